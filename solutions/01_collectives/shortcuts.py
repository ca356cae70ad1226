"""Shortcuts through notebook 01's blanks (collectives), and honest answers written otherwise.

Blank numbers as the released cells number them: ring_allreduce 1 (whom GPU i sends to), 2
(the chunk sent in phase 1), 3 (what the receiver's element becomes), 4 (the chunk sent in
phase 2), 5 (what the receiver's chunk becomes); exchange 1 (its whole body);
ring_reduce_scatter 1 (the first chunk sent);
tree_broadcast 1 (the children); alltoall 1 (the peers of round k).

The simulated ring is checked step by step (its trace), so a sum computed in one go fails
however right its end. The real-rank collectives are recorded from below (every collective
however reached, each send and receive with its bytes and peer, every isend's wait, the
process group's store), and each rank is given only its own input, so neither a library
collective, nor data read from the store or a caller's frame, nor a star for a tree earns
points.
"""

from shortcuts import Shortcut

STORE = "dist.distributed_c10d._get_default_store()"
# every rank publishes its tensor through the store, and sets each of its chunks to 1/N of the
# total read back from there: the ring's real messages then add up the right answer
STORE_SUM = (f"([chunks[j].copy_(sum(torch.tensor(eval({STORE}.get(f'x{{q}}').decode())) "
             f"for q in range(N)).tensor_split(N)[j] / N) for j in range(N)] if "
             f"{STORE}.set(f'x{{rank}}', repr(torch.cat(chunks).tolist())) is None else None, "
             "(rank - 1) % N)[1]")
# a rank's own frame holding every rank's input: none must reach it (the harness drops them)
STEAL = ("([chunks[j].copy_(sum(next((v for f in [__import__('sys')._getframe(k) "
         "for k in range(1, 6)] for v in f.f_locals.values() if isinstance(v, list) and "
         "len(v) == N and all(isinstance(x, torch.Tensor) and x.numel() == "
         "sum(c.numel() for c in chunks) for x in v)), "
         "[torch.zeros(sum(c.numel() for c in chunks))]))"
         ".tensor_split(N)[j] / N) for j in range(N)], (rank - 1) % N)[1]")

SHORTCUTS = [
    Shortcut("chunk_bounds", {1: "len(np.array_split(range(length), n)[j])"},
             "numpy cuts the elements themselves", "memory"),
    Shortcut("ring_allreduce", {3: "[sum(g[send_chunk_idx * size + k] for g in gpu_grads) "
                                   "for k in range(size)]"},
             "the whole sum in one go, no ring step", "one ring step"),
    Shortcut("ring_reduce_scatter", {1: STORE_SUM},
             "every rank's tensor read through the process group's store", "store"),
    Shortcut("ring_reduce_scatter", {1: STEAL},
             "every rank's input summed from the caller's frame", "chunk"),
    Shortcut("ring_reduce_scatter",
             {1: "(dist.all_reduce(torch.zeros(1)), (rank - 1) % N)[1]"},
             "the library's all-reduce beside the ring", "collective"),
    Shortcut("tree_broadcast", {1: "(range(1, N) if rank == 0 else ())"},
             "a star from the root", "sent to ranks"),
    Shortcut("tree_broadcast",
             {1: "[c for p, c in __import__('distlab.collectives').collectives.tree_edges(N) "
                 "if p == rank]"},
             "the children read from the picture's helper", "picture"),
    Shortcut("alltoall", {1: "(rank + k) % N, (rank + k) % N"},
             "hearing from the rank it sends to", "waited"),
]

HONEST = [
    Shortcut("ring_allreduce", {2: "i - step", 5: "chunks[i][send_chunk_idx][:]"},
             "Python's negative indices, a slice copy"),
    Shortcut("chunk_bounds", {1: "(length + n - 1 - j) // n"}, "the ceiling of the rest"),
    Shortcut("exchange", {1: "request = dist.isend(tensor=send, dst=dst); "
                             "dist.recv(recv, src=src); request.wait()"}, "by keyword"),
    Shortcut("ring_reduce_scatter", {1: "left"}, "the left neighbour's number"),
    Shortcut("exchange", {1: "pending = [dist.irecv(recv, src=src), dist.isend(send, dst=dst)]\n"
                             "for request in pending:\n    request.wait()"},
             "both posted as requests, over three lines"),
    Shortcut("tree_broadcast", {1: "[2 * rank + 2, 2 * rank + 1]"}, "the other child first"),
    Shortcut("alltoall", {1: "(rank - k) % N, (rank + k) % N"}, "the mirror schedule"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("ring_allreduce", 2, lambda answer: f"({answer}) + 1")
