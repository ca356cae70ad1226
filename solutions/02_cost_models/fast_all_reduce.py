"""The course's answer to 02's speed challenge (not graded, not shipped): a send/recv ring
all-reduce that keeps up with gloo's. bench/bench_challenge.py measures how its score varies
over 20 runs; tests/test_challenge.py holds that it scores what the README says.

What it does that §5's ring does not:
- a chunk travels in slices of about 1 MiB, and each slice is passed on as soon as it has been
  added (or received): the add of one slice overlaps the transfer of the next, and the
  all-gather's first sends leave before the reduce-scatter's last add;
- small messages travel whole (one slice per chunk): a slice costs a step's alpha;
- every receive of a step is posted at once (irecv), so a slice that arrives early is taken;
- the all-gather receives straight into the tensor (no inbox, no copy).
"""

import torch
import torch.distributed as dist

SLICE_BYTES = 2**20


def fast_all_reduce(tensor):
    """Sum `tensor` in place over the default group with send/recv only; returns it."""
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = tensor.tensor_split(n)
    slices = max(1, min(16, chunks[0].numel() * tensor.element_size() // SLICE_BYTES))
    parts = [chunk.tensor_split(slices) for chunk in chunks]
    sends = [dist.isend(part, right) for part in parts[rank]]
    steps = 2 * (n - 1)  # n - 1 of reduce-scatter, then n - 1 of all-gather
    for step in range(steps):
        reducing = step < n - 1
        targets = parts[(rank - step - 1) % n]
        # every slice of this step's chunk is awaited at once, the reduce-scatter's into an
        # inbox, the all-gather's straight into place
        inboxes = [torch.empty_like(t) if reducing else t for t in targets]
        receives = [dist.irecv(inbox, left) for inbox in inboxes]
        for target, inbox, receive in zip(targets, inboxes, receives, strict=True):
            receive.wait()
            if reducing:
                target.add_(inbox)
            if step < steps - 1:  # pass it on at once
                sends.append(dist.isend(target, right))
    for request in sends:
        request.wait()
    return tensor
