"""Shortcuts through notebook 01's blanks (collectives), and honest answers written otherwise.

Blank numbers as the released cells number them: ring_allreduce 1 (right neighbour), 2 (chunk
sent in the scatter-reduce), 3 (the add), 4 (chunk sent in the all-gather), 5 (the overwrite);
ring_allreduce_p2p 1 (start the send), 2 (the in-place add), 3 (where the all-gather lands),
4 (the wait).

The simulated ring is checked step by step (its trace), so a sum computed in one go fails
however right its end. The real-rank ring is recorded from below (every collective however
reached, each send and receive with its bytes and peer, every isend's wait) and each rank is
given only its own tensor, so neither a library collective nor a sum read from a caller's
frame earns its points.
"""

from shortcuts import Shortcut

# the pre-fix harness kept every rank's input in its frame: find a list of N tensors there
STEAL = ("(step > 0 or tensor.copy_(sum(next((v for f in [__import__('sys')._getframe(k) "
         "for k in range(1, 5)] for v in f.f_locals.values() if isinstance(v, list) and "
         "len(v) == N and all(isinstance(x, torch.Tensor) for x in v)), [tensor]))), "
         "dist.isend(outgoing, dst=right))[1]")

SHORTCUTS = [
    Shortcut("ring_allreduce", {3: "sum(g[send_chunk_idx * size + k] for g in gpu_grads)"},
             "the whole sum in one go, no ring step", "one ring step"),
    Shortcut("ring_allreduce_p2p",
             {1: "(dist.group.WORLD.allreduce([tensor]).wait(), "
                 "dist.isend(outgoing, dst=right))[1]", 2: "eq", 3: "inbox[: arriving.numel()]"},
             "the process group's own allreduce, the ring's messages for show", "collective"),
    Shortcut("ring_allreduce_p2p", {1: STEAL, 2: "eq", 3: "inbox[: arriving.numel()]"},
             "every rank's input summed from the caller's frame", "all-reduce"),
    Shortcut("ring_allreduce_p2p", {4: "None"}, "sends never waited for", "waited"),
]

HONEST = [
    Shortcut("ring_allreduce", {2: "i - step", 5: "chunks[i][send_chunk_idx][:]"},
             "Python's negative indices, a slice copy"),
    Shortcut("ring_allgather", {1: "latest[r - 1]"}, "a negative index"),
    Shortcut("alltoall", {1: "(k + r) % N"}, "reordered"),
    Shortcut("ring_allreduce_p2p", {1: "dist.isend(tensor=outgoing, dst=right)"},
             "by keyword"),
]
