"""The course's answer to 02's speed challenge (not graded, not shipped to learners).
bench/bench_challenge.py measures its score and how much that varies over 20 races;
tests/test_challenge.py holds that it scores well above a correct but slow ring.

It chooses the schedule by size, as §2-3 of 02 do:
- small messages on a power-of-two number of ranks: recursive doubling, log2 N exchanges of
  the whole tensor (on 2 ranks one exchange instead of the ring's two steps: one alpha saved,
  the same bytes sent);
- otherwise the ring, each step's receive posted before its send, the all-gather received
  straight into place (no inbox, no copy).

What did not pay on this machine's 2 cores (bench_challenge, README "The speed challenge"):
cutting each chunk into slices passed on as soon as they are added, to overlap the adds with
the transfers. Over loopback TCP the transfer is itself a copy made by the same cores, so
there is little to overlap with, and every extra message costs its alpha.
"""

import torch
import torch.distributed as dist

SMALL_BYTES = 4 * 2**20


def fast_all_reduce(tensor):
    """Sum `tensor` in place over the default group with send/recv only; returns it."""
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return tensor
    if n & (n - 1) == 0 and tensor.numel() * tensor.element_size() <= SMALL_BYTES:
        inbox = torch.empty_like(tensor)
        distance = 1
        while distance < n:
            peer = rank ^ distance
            receive = dist.irecv(inbox, peer)
            send = dist.isend(tensor, peer)
            receive.wait()
            send.wait()
            tensor.add_(inbox)
            distance *= 2
        return tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = tensor.tensor_split(n)
    inbox = torch.empty_like(chunks[0])
    for step in range(2 * (n - 1)):
        outgoing, incoming = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        reducing = step < n - 1
        target = inbox[: incoming.numel()] if reducing else incoming
        receive = dist.irecv(target, left)
        send = dist.isend(outgoing, right)
        receive.wait()
        send.wait()
        if reducing:
            incoming.add_(target)
    return tensor
