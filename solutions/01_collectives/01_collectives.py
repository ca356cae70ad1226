# %% [markdown]
# # 01 · Collectives: how N workers agree on one gradient
#
# In data-parallel training every worker computes a gradient on its own slice of the batch,
# and before anyone takes an optimizer step all of them must hold the **same** gradient: the
# sum (or the mean) of everybody's. The operation that does this is **AllReduce**. Libraries
# know several algorithms for it and choose one per call: NCCL picks ring, tree, NVLS (the
# reduction done inside the NVLink switches) or CollNet (done inside the network switches) by
# message size and topology. The **ring** is the one to understand first: for a large tensor
# it makes every GPU send less than twice the tensor, however many GPUs there are.
#
# **What you will build**
#
# 1. Ring AllReduce, simulated over Python lists, read off a picture.
# 2. Chunks for any length (sizes that differ by at most one).
# 3. The real thing: a `torch.distributed` process group on 4 CPU ranks (gloo backend).
# 4. A send and a receive that cannot deadlock, and a ring AllGather built on it.
# 5. Ring ReduceScatter on real ranks, then AllReduce = ReduceScatter + AllGather.
# 6. Binary-tree Broadcast and 7. AlltoAll, on real ranks.
#
# Each real-rank collective is checked against its `torch.distributed` counterpart
# (`all_gather`, `reduce_scatter`, `all_reduce`, `broadcast`, `all_to_all_single`).
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your function works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked, and only the blanks are yours: a change
# elsewhere in a function earns nothing.

# %%
import numpy as np
import torch
import torch.distributed as dist

from distlab import run
from distlab.collectives import ring_states, show_ring, show_tree

# %% [markdown]
# ## 1. Ring AllReduce, simulated
#
# **The problem.** $N$ GPUs each hold a gradient of the same length; at the end each must hold
# the element-wise sum (or mean) of all of them. The GPUs stand in a ring, and the rules are
# strict:
#
# * a GPU sends to one fixed neighbour only, and receives from its other neighbour only;
# * every gradient is cut into $N$ chunks, numbered $0, \dots, N-1$, and in one step every GPU
#   sends exactly **one** chunk, all at the same time;
# * the whole operation takes $2(N-1)$ steps: a first phase of $N-1$ steps, then a second one.
#
# The picture shows the ring at work on four GPUs whose gradients are `[1, 2, 3, 4]`,
# `[5, 6, 7, 8]`, and so on. Move the slider. Left: who sends which chunk to whom in this step
# (orange: phase 1, green: phase 2). Right: what every GPU holds, chunk by chunk; a cell's
# colour counts the GPUs whose contributions it holds, and a thick border marks the cells this
# step changed. Read off the picture, at each step: where each GPU's message goes, which chunk
# it is, and what the receiver does with it in each phase.

# %%
show_ring()

# %% [markdown]
# Now write the ring for any $N$, as the picture runs it. `chunks[i][j]` is chunk $j$ as GPU $i$
# holds it, and every step updates these lists in place, GPU after GPU (the check will tell you
# whether that is safe). The picture's gradients have length 4 for 4 GPUs; this first
# version requires the length to be a multiple of $N$, and must *say* so when it is not rather
# than drop elements (section 2 lifts that).

# %% solution="ring_allreduce" drill
def ring_allreduce(gpu_grads, op="mean", trace=False):
    """Ring AllReduce simulated over lists.

    gpu_grads[i] is GPU i's gradient (a list of numbers, the same length on every GPU).
    Returns one list per GPU, each the element-wise sum (op="sum") or mean (op="mean").
    With trace=True it returns (result, states): states[s] is what every GPU holds after step
    s, as chunks[i][j] (the slider's right-hand picture).
    """
    N = len(gpu_grads)
    length = len(gpu_grads[0])
    if any(len(grads) != length for grads in gpu_grads):
        raise ValueError("every GPU must hold a gradient of the same length")
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    if length % N != 0:
        raise ValueError(f"length {length} is not a multiple of {N} GPUs: this ring would "
                         "drop elements. Section 2 handles any length.")
    size = length // N
    chunks = [[list(grads[j * size:(j + 1) * size]) for j in range(N)] for grads in gpu_grads]
    right = [(i + 1) % N for i in range(N)]  # BLANK `(i + 1) % N` whom does GPU i send to? # REJECT `(i + 2) % N`
    states = []  # for trace=True: a copy of every GPU's chunks after each step

    # Phase 1: N-1 steps
    for step in range(N - 1):
        for i in range(N):
            recv_gpu = right[i]
            send_chunk_idx = (i - step) % N  # BLANK which chunk does GPU i send in this step? # ACCEPT `i - step` # REJECT `(i + step) % N`
            chunks[recv_gpu][send_chunk_idx] = [mine + theirs for mine, theirs in zip(chunks[recv_gpu][send_chunk_idx], chunks[i][send_chunk_idx])]  # BLANK what the receiver's chunk becomes # ACCEPT `[a + b for a, b in zip(chunks[i][send_chunk_idx], chunks[recv_gpu][send_chunk_idx])]` `[mine + theirs for theirs, mine in zip(chunks[recv_gpu][send_chunk_idx], chunks[i][send_chunk_idx])]` `[mine + theirs for mine, theirs in zip(chunks[i][send_chunk_idx], chunks[recv_gpu][send_chunk_idx])]` # REJECT `list(chunks[i][send_chunk_idx])` `chunks[recv_gpu][send_chunk_idx] + chunks[i][send_chunk_idx]`
        states.append([[list(chunk) for chunk in gpu] for gpu in chunks])

    # Phase 2: N-1 steps
    for step in range(N - 1):
        for i in range(N):
            recv_gpu = right[i]
            send_chunk_idx = (i - step + 1) % N  # BLANK which chunk does GPU i send in this step? # REJECT `(i - step) % N`
            chunks[recv_gpu][send_chunk_idx] = list(chunks[i][send_chunk_idx])  # BLANK what the receiver's chunk becomes # ACCEPT `chunks[i][send_chunk_idx]` `chunks[i][send_chunk_idx][:]` # REJECT `[a + b for a, b in zip(chunks[recv_gpu][send_chunk_idx], chunks[i][send_chunk_idx])]`
        states.append([[list(chunk) for chunk in gpu] for gpu in chunks])

    result = [[value for chunk in gpu_chunks for value in chunk] for gpu_chunks in chunks]
    if op == "mean":
        result = [[value / N for value in grads] for grads in result]
    return (result, states) if trace else result


# %% [markdown]
# The check runs your ring on the picture's gradients, and compares what every GPU holds after
# every step with what the picture shows (`ring_states` draws the slider).

# %%
gpu_grads = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]
result, states = ring_allreduce(gpu_grads, op="sum", trace=True)
for i, grads in enumerate(result):
    print(f"GPU {i}: {grads}")
assert gpu_grads[0] == [1, 2, 3, 4], "ring_allreduce must not change its input"
picture_states = ring_states()[1:]
assert len(states) == len(picture_states), \
    f"the trace has {len(states)} steps; the picture has {len(picture_states)}"
for step, (mine, picture) in enumerate(zip(states, picture_states), start=1):
    for i in range(4):
        assert mine[i] == picture.values[i], (
            f"after step {step} GPU {i} holds {mine[i]}; the picture shows {picture.values[i]}")
assert ring_allreduce(gpu_grads, op="mean") == [[sum(col) / 4 for col in zip(*gpu_grads)]] * 4
print("✓ every step matches the picture, and every GPU ends with the sum (and the mean)")

# %% tests="ring_allreduce_tests" points=5
# Hidden tests (5 points): world sizes 1-8, random values, sum and mean, every step.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# **Why it works.** Phase 1 is a **scatter-reduce** (a *reduce-scatter*, as libraries call
# it): every chunk travels once round the ring and picks up one more contribution per hop, so
# after $N-1$ hops each chunk is complete on exactly one GPU, a different GPU for each chunk.
# Phase 2 is an **all-gather**: the finished chunks travel round the ring once more, and now a
# copy is only passed on, never combined (combining again would count contributions twice).
#
# **Why in place is safe.** All GPUs send at once, so a step must use what every GPU held at
# its start. Updating the lists GPU after GPU is still right because no GPU, in any step,
# receives the chunk it is sending: what it reads and what it writes are different chunks.
# Many textbook versions copy the whole state every step; it is not needed.

# %% [markdown]
# ## 2. Any length: chunks that differ by at most one
#
# Gradients are rarely a multiple of the world size, and dropping the leftover elements trains
# the wrong model. The usual cut (`numpy.array_split`, `torch.tensor_split`) is as even as it
# can be: chunk sizes differ by at most one, and the larger chunks come first. Length 10 in 4
# chunks gives sizes 3, 3, 2, 2, so the bounds are `[(0, 3), (3, 6), (6, 8), (8, 10)]`; length
# 2 in 4 chunks gives 1, 1, 0, 0: when $L < N$ some chunks are empty, and a ring still works
# (an empty chunk is sent like any other). Compute the bounds with arithmetic: the lengths the
# hidden tests try go up to $10^{15}$, far more elements than any memory holds.

# %% solution="chunk_bounds"
def chunk_bounds(length, n):
    """(start, end) of each of n chunks of range(length); sizes differ by at most one,
    the larger chunks first."""
    bounds, start = [], 0
    for j in range(n):
        size = length // n + (1 if j < length % n else 0)  # BLANK how many elements does chunk j get? # ACCEPT `length // n + (j < length % n)` # REJECT `length // n` `-(-length // n)` `length // n + (1 if j >= n - length % n else 0)`
        bounds.append((start, start + size))
        start += size
    return bounds


# %%
print("chunk_bounds(10, 4) =", chunk_bounds(10, 4))
for n in range(1, 7):
    for length in range(0, 3 * n + 1):
        pieces = [list(range(length))[lo:hi] for lo, hi in chunk_bounds(length, n)]
        expected = [list(p) for p in np.array_split(range(length), n)]
        assert pieces == expected, f"length {length} in {n} chunks: {pieces}, expected {expected}"
print("✓ chunk_bounds cuts like numpy.array_split for every length 0..3n, n = 1..6")

# %% tests="chunk_bounds_tests" points=1
# Hidden tests (1 point): lengths 0-60 and one of 10**15, 1-9 chunks.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(chunk_bounds)
### END HIDDEN TESTS

# %% [markdown]
# `torch.tensor_split(t, n)` cuts a tensor exactly like your `chunk_bounds`, and returns
# **views**: writing into a piece writes into `t`. The real rings below use it.

# %% [markdown]
# ## 3. For real: a process group on 4 ranks
#
# Enough simulation. `torch.distributed` runs one **process** per rank; the processes find each
# other through a rendezvous address (`MASTER_ADDR`, `MASTER_PORT`) and form a **process
# group**: `dist.init_process_group(backend=..., rank=..., world_size=...)` joins it and
# `dist.destroy_process_group()` leaves it. The **backend** moves the bytes: NCCL between GPUs,
# gloo between CPUs (the one this machine has).
#
# `run(fn, *args, world_size=4, init_group=True)` (from `distlab`) starts `world_size`
# processes, calls `fn(rank, world_size, *args)` in each, shows each rank's prints prefixed
# with `[rank r]`, and returns the list of per-rank return values. By default it sets up the
# process group before calling `fn`; below we pass `init_group=False`, so your function joins
# (and leaves) the group itself. The rendezvous address is already in the environment.
#
# `dist.all_reduce(t, op=...)` replaces `t` on every rank by the reduction of every rank's `t`;
# `op` is a member of `dist.ReduceOp`: `SUM`, `AVG`, `PRODUCT`, `MIN`, `MAX` and the bitwise
# ones (gloo runs `AVG` on the PyTorch this course pins, 2.13; older releases had it on NCCL
# only). `dist.barrier()` makes every rank
# wait until all have reached it. Each rank starts with `[rank + 1]`; at the end every rank must
# hold $1 + 2 + 3 + 4 = 10$, and no rank may leave (tearing the group down) while others still
# need it.

# %% solution="hello_allreduce"
def hello_allreduce(rank, world_size):
    """Join the process group, combine every rank's rank + 1 into their total, and leave once
    everyone is done. Returns the total."""
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)  # BLANK `"gloo"` the backend that runs on CPUs # API # REJECT `"nccl"`
    x = torch.tensor([rank + 1.0])
    print(f"before all_reduce: {x.item()}")
    dist.all_reduce(x, op=dist.ReduceOp.SUM)  # BLANK `dist.ReduceOp.SUM` which reduction gives 1 + 2 + 3 + 4? # API # REJECT `dist.ReduceOp.MAX`
    print(f"after all_reduce:  {x.item()}")
    dist.barrier()  # BLANK `barrier` wait for everyone # API # ACCEPT `monitored_barrier` # REJECT `get_rank`
    if rank == 0:
        print("every rank is past the barrier")
    dist.destroy_process_group()
    return x.item()


# %%
values = run(hello_allreduce, world_size=4, init_group=False)
print("returned:", values)
assert values == [10.0] * 4, f"expected every rank to return 1 + 2 + 3 + 4 = 10, got {values}"
print("✓ four processes agreed on one sum")

# %% tests="hello_allreduce_tests" points=3
# Hidden tests (3 points): 1-4 ranks; the value each rank returns, a barrier, and the group is
# closed.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(hello_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# Outside a notebook, `torchrun --nproc-per-node 4 script.py` starts one process per rank and
# puts `MASTER_ADDR`, `MASTER_PORT`, `RANK` and `WORLD_SIZE` into each one's environment, where
# `init_process_group` finds them. `python -m distlab.export` writes your notebook's real-rank
# functions into such a script (the README's "From the notebook to a cluster" says how to run
# it on one machine, on several, and under SLURM).

# %% [markdown]
# ## 4. Sending and receiving without a deadlock
#
# From here on you write collectives as the code of **one** rank, out of point-to-point calls,
# and `run` sets up the process group for you (its default). The calls:
#
# * `dist.send(t, dst=q)` sends `t` to rank `q` and blocks: with gloo, until `q` has received it;
# * `dist.recv(buf, src=q)` blocks until a tensor from rank `q` has arrived in `buf` (its size
#   must match);
# * `dist.isend(t, dst=q)` and `dist.irecv(buf, src=q)` only *start* the transfer and return at
#   once, with a request object; its `wait()` method returns when that transfer is over. Until
#   then `t` must not change (and `buf` must not be read).
#
# ```python
# # rank 1 expects a tensor from rank 0, and works while it travels
# if rank == 0:
#     dist.send(torch.arange(3.0), dst=1)   # returns once rank 1 has it
# else:
#     buf = torch.empty(3)
#     pending = dist.irecv(buf, src=0)      # returns at once
#     busy = torch.randn(100).sum()         # meanwhile
#     pending.wait()                        # now buf holds it
# ```
#
# **The situation.** In a ring every rank sends to its right neighbour *and* receives from its
# left one in the same step. Written the obvious way, a step is
#
# ```python
# dist.send(outgoing, dst=right)
# dist.recv(incoming, src=left)
# ```
#
# and this is what the four ranks are doing a moment later, for ever:
#
# ```
#   rank 0: in send(dst=1) ── waits for rank 1 to call recv ──┐
#   rank 1: in send(dst=2) ── waits for rank 2 to call recv   │  nobody reaches
#   rank 2: in send(dst=3) ── waits for rank 3 to call recv   │  its recv:
#   rank 3: in send(dst=0) ── waits for rank 0 to call recv ──┘  a deadlock
# ```
#
# Write `exchange(send, dst, recv, src)`: send the tensor `send` to rank `dst` and receive into
# `recv` from rank `src`, such that when **every** rank calls it at the same time (each with its
# own `dst` and `src`) none of them waits for ever. When it returns, `recv` holds the data and
# `send` may be changed again. Write the whole body: it takes a few lines.

# %% solution="exchange"
def exchange(send, dst, recv, src):
    """Send `send` to rank dst and receive into `recv` from rank src; safe when every rank
    calls it at once. Returns when both transfers are over."""
    request = dist.isend(send, dst=dst); dist.recv(recv, src=src); request.wait()  # BLANK `request = dist.isend(send, dst=dst); dist.recv(recv, src=src); request.wait()` send and receive, in an order in which no rank waits for ever # REJECT `dist.send(send, dst=dst); dist.recv(recv, src=src)` `request = dist.isend(send, dst=dst); dist.recv(recv, src=src)` `dist.recv(recv, src=src); dist.send(send, dst=dst)`


# %% [markdown]
# A ring **AllGather** is the phase-2 half of your ring on its own: rank $r$ starts with piece
# $r$ of a tensor and must end with all $N$ pieces. Each rank passes on, step after step, the
# piece it received last (at first its own). Here it is, built on your `exchange`; the check
# runs it on 4 ranks next to `dist.all_gather`, with pieces of 3 elements.

# %%
def ring_allgather(rank, world_size, pieces):
    """pieces: the world_size pieces of one tensor (views), pieces[rank] filled by this rank.
    Fills the others in place, from the ranks that own them, and returns pieces."""
    N = world_size
    right = rank + 1 if rank + 1 < N else 0
    left = rank - 1 if rank > 0 else N - 1
    send_index = rank  # first our own piece
    for step in range(N - 1):
        recv_index = send_index - 1 if send_index > 0 else N - 1  # what left got a step before us
        exchange(pieces[send_index], right, pieces[recv_index], left)
        send_index = recv_index  # next step: pass on what just arrived
    return pieces


def compare_allgather(rank, world_size):
    mine = torch.randn(3, generator=torch.Generator().manual_seed(rank))
    expected = [torch.empty(3) for _ in range(world_size)]
    dist.all_gather(expected, mine)
    pieces = list(torch.zeros(3 * world_size).tensor_split(world_size))
    pieces[rank].copy_(mine)
    return all(torch.equal(a, b) for a, b in zip(ring_allgather(rank, world_size, pieces),
                                                 expected))


same = run(compare_allgather, world_size=4)
assert all(same), f"ranks whose pieces differ from dist.all_gather's: " \
                  f"{[r for r, ok in enumerate(same) if not ok]}"
print("✓ your exchange carried a ring all-gather on 4 ranks, as dist.all_gather does")

# %% tests="exchange_tests" points=1
# Hidden tests (1 point): 2-4 ranks, a ring all-gather and an all-to-all built on exchange
# (ranks that send to each other in the same step included); each rank's messages are recorded.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(exchange)
### END HIDDEN TESTS

# %% [markdown]
# **Why it works.** A blocking send on every rank at once is a cycle of waits: each rank waits
# for a receive that its neighbour reaches only after its own send returns. Break one link of
# the cycle (the send must not hold its rank back from the receive) and every rank gets
# through; the send is then finished before the caller may touch its tensor again. Posting
# both halves as requests and waiting for both works too, and so does
# `dist.batch_isend_irecv`. gloo blocks a `send` for any size; NCCL and MPI may buffer small
# messages, so the deadlock can hide until a tensor grows.

# %% [markdown]
# ## 5. ReduceScatter, then AllReduce, on real ranks
#
# **ReduceScatter**: every rank holds a whole tensor $x_r$, cut into $N$ chunks (views, from
# `torch.tensor_split`); at the end rank $r$ must hold chunk $r$ of $\sum_q x_q$, **in its own
# chunk $r$**, which is what `dist.reduce_scatter` returns. The ring's budget: $N-1$ steps, each
# sending one chunk to the right and receiving one from the left, and a rank passes on the
# chunk it updated last. `inbox` is spare room for an arriving chunk (its first `numel`
# elements).

# %% solution="ring_reduce_scatter" drill
def ring_reduce_scatter(rank, world_size, chunks, op="sum"):
    """chunks: the world_size chunks (views) of this rank's tensor. Reduces in place so that
    chunks[rank] ends as chunk `rank` of the sum (or mean) over all ranks; returns it."""
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    N = world_size
    right = rank + 1 if rank + 1 < N else 0
    left = rank - 1 if rank > 0 else N - 1
    inbox = torch.empty_like(chunks[0])  # room for a largest chunk
    send_index = (rank - 1) % N  # BLANK which chunk does this rank send first? # ACCEPT `(rank + N - 1) % N` # REJECT `rank` `(rank + 1) % N`
    for step in range(N - 1):
        recv_index = send_index - 1 if send_index > 0 else N - 1
        incoming = inbox[: chunks[recv_index].numel()]
        exchange(chunks[send_index], right, incoming, left)
        chunks[recv_index].add_(incoming)
        send_index = recv_index
    if op == "mean":
        chunks[rank].div_(N)
    return chunks[rank]


# %%
def compare_reduce_scatter(rank, world_size):
    x = torch.randn(4 * world_size, generator=torch.Generator().manual_seed(rank))
    expected = torch.empty(4)
    dist.reduce_scatter(expected, list(x.clone().tensor_split(world_size)))
    mine = ring_reduce_scatter(rank, world_size, list(x.clone().tensor_split(world_size)))
    return torch.allclose(mine, expected, atol=1e-6)


same = run(compare_reduce_scatter, world_size=4)
assert all(same), f"ranks whose chunk differs from dist.reduce_scatter's: " \
                  f"{[r for r, ok in enumerate(same) if not ok]}"
print("✓ ring_reduce_scatter matches dist.reduce_scatter on 4 ranks")

# %% tests="ring_reduce_scatter_tests" points=1
# Hidden tests (1 point): 1-5 ranks, lengths also shorter than the world size, sum and mean;
# each rank holds only its own tensor, and its messages are recorded.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_reduce_scatter)
### END HIDDEN TESTS

# %% [markdown]
# **Why the shifted start.** A chunk collects its last contribution $N-1$ hops after it
# leaves, so where a chunk finishes is fixed by where it starts; the convention that chunk $r$
# finishes on rank $r$ is one choice of starts, section 1's ring another. Every reduce-scatter
# convention is such a shift of the same ring, and an all-gather that follows must start from
# wherever the reduce-scatter left the finished chunks.
#
# **AllReduce = ReduceScatter + AllGather.** With both halves on real ranks, the all-reduce is
# two lines. The check compares it with `dist.all_reduce` on 4 ranks for a length that is no
# multiple of 4, then `trace=True` prints every message of every rank for 5 elements on 3
# ranks: 2 steps of reduce-scatter, then 2 of all-gather, chunks of 2, 2 and 1 elements.

# %%
def ring_allreduce_p2p(rank, world_size, tensor, op="sum"):
    """All-reduce a 1-D float tensor in place with your ring; returns it."""
    chunks = list(torch.tensor_split(tensor, world_size))
    ring_reduce_scatter(rank, world_size, chunks, op=op)
    ring_allgather(rank, world_size, chunks)
    return tensor


def compare_with_all_reduce(rank, world_size, length, op):
    x = torch.randn(length, generator=torch.Generator().manual_seed(rank))
    expected = x.clone()
    dist.all_reduce(expected, op=dist.ReduceOp.AVG if op == "mean" else dist.ReduceOp.SUM)
    mine = ring_allreduce_p2p(rank, world_size, x.clone(), op=op)
    return torch.allclose(mine, expected, rtol=1e-5, atol=1e-5)


for op in ("sum", "mean"):
    for length in (1001, 3):
        same = run(compare_with_all_reduce, length, op, world_size=4)
        assert all(same), f"op={op!r}, length={length}: ranks that disagree with " \
                          f"dist.all_reduce: {[r for r, ok in enumerate(same) if not ok]}"
print("✓ ring_allreduce_p2p matches dist.all_reduce on 4 ranks (sum and mean)")
results = run(ring_allreduce_p2p, torch.arange(5.0), world_size=3, trace=True)
assert all(torch.equal(t, 3 * torch.arange(5.0)) for t in results)

# %% [markdown]
# **How fast is it?** Correct is not fast: this ring moves the bytes the ring should, and still
# loses to `dist.all_reduce` on large messages (notebook 02 measures both and says where the
# time goes). Notebook 02 ends with a challenge, not graded: an all-reduce of send/recv as fast
# as gloo's, scored on 2 ranks at 1, 4 and 16 MiB.

# %% [markdown]
# ## 6. Binary-tree Broadcast
#
# The root (rank 0) has the data; everyone needs it. Sending it to each rank in turn takes
# $N-1$ steps. A tree does it in fewer: the picture shows the tree for 10 ranks, ranks numbered
# level by level from the left, each rank coloured by the step in which it receives (a rank
# sends to both its children in one step). Write one rank's part of the broadcast for any $N$:
# it receives the data (from whoever sends it: `dist.recv(t)` without `src` takes the first
# message from any rank), then passes it on down the tree.

# %%
show_tree(10)

# %% solution="tree_broadcast"
def tree_broadcast(rank, world_size, tensor):
    """Broadcast rank 0's `tensor` down the binary tree drawn above; every rank's `tensor`
    ends holding it. Returns tensor."""
    N = world_size
    if rank > 0:
        dist.recv(tensor)  # from whoever sends it: our parent in the tree
    children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < N]  # BLANK `(2 * rank + 1, 2 * rank + 2)` the ranks this one passes the data to # ACCEPT `(2 * rank + 2, 2 * rank + 1)` `[2 * rank + 1, 2 * rank + 2]` `range(2 * rank + 1, 2 * rank + 3)` # REJECT `(rank + 1, rank + 2)` `(2 * rank, 2 * rank + 1)` `(range(1, N) if rank == 0 else ())`
    sends = [dist.isend(tensor, dst=child) for child in children]  # both at once
    for sending in sends:
        sending.wait()
    return tensor


# %%
def compare_broadcast(rank, world_size):
    data = torch.arange(4.0) * 3.14
    mine = data.clone() if rank == 0 else torch.zeros(4)
    expected = mine.clone()
    dist.broadcast(expected, src=0)
    return torch.equal(tree_broadcast(rank, world_size, mine), expected)


for n in (4, 7):
    same = run(compare_broadcast, world_size=n)
    assert all(same), f"{n} ranks: ranks whose copy differs from dist.broadcast's: " \
                      f"{[r for r, ok in enumerate(same) if not ok]}"
run(tree_broadcast, torch.zeros(2), world_size=7, trace=True)
print("✓ tree_broadcast matches dist.broadcast on 4 and 7 ranks")

# %% tests="tree_broadcast_tests" points=1
# Hidden tests (1 point): 1-8 ranks; who sends to whom is recorded, and the tree's depth is
# measured from the messages.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(tree_broadcast)
### END HIDDEN TESTS

# %% [markdown]
# **Why it works, and how many steps.** Numbering level by level makes a rank's children a
# function of its number alone, so every rank knows whom to serve without a table. Each step
# fills one level, and level $l$ holds $2^l$ ranks, so the broadcast takes
# $\lfloor \log_2 N \rfloor$ steps (3 for 8 ranks, instead of 7), *if* a rank can send to both
# children at once. With one send per step the second child waits a step: a full tree
# ($N = 2^L - 1$) then takes $2\lfloor \log_2 N \rfloor$ steps. The **binomial tree** is built
# for one send per step: every rank that has the data sends it to one that has not, so the
# number of holders doubles per step, and $\lceil \log_2 N \rceil$ steps suffice, the fewest
# possible.
#
# So why would a library use a binary tree? Because messages are large. The binomial tree's
# root sends the whole message $\lceil \log_2 N \rceil$ times, one child after another; in a
# binary tree no rank has more than two children, so the message can be cut into pieces and
# **pipelined** (a rank forwards piece $k$ while piece $k+1$ arrives), and for a large message
# the time approaches that of sending it about twice, whatever $N$. NCCL's **double binary
# tree** (Sanders, Speck & Träff, 2009) runs two such trees, each carrying half the data, built
# so that a leaf of one is an inner node of the other.

# %% [markdown]
# ## 7. AlltoAll
#
# Every rank has a block for every rank: `blocks[c]` on rank $r$ must reach rank $c$, which
# files it as its `received[r]`. This is how mixture-of-experts layers send tokens to the rank
# that holds their expert (notebook 09). The block for itself never leaves home. The others
# travel in $N-1$ rounds, $k = 1, \dots, N-1$, under a budget: in every round each rank sends
# exactly one block and receives exactly one, every rank sends to a different rank, and after
# the $N-1$ rounds every pair has met once. So on a **switch** (each rank has its own
# full-duplex port) no two messages of a round share a link. Each round is one call of your
# `exchange`.

# %% solution="alltoall" drill
def alltoall(rank, world_size, blocks, recv_sizes):
    """blocks[c]: this rank's block for rank c (1-D tensors whose sizes may differ);
    recv_sizes[r]: how many elements rank r's block for this rank has. Returns received, with
    received[r] the block rank r had for this rank."""
    N = world_size
    received = [torch.empty(size, dtype=blocks[rank].dtype) for size in recv_sizes]
    received[rank].copy_(blocks[rank])  # its own block stays home
    for k in range(1, N):
        dst, src = (rank + k) % N, (rank - k) % N  # BLANK whom does this rank send to in round k, and whom does it hear from? # ACCEPT `(k + rank) % N, (rank - k + N) % N` `(rank - k) % N, (rank + k) % N` # REJECT `(rank + k) % N, (rank + k) % N` `(rank + k) % N, (rank - 1) % N`
        exchange(blocks[dst], dst, received[src], src)
    return received


# %% [markdown]
# Blocks of different sizes are the normal case (an expert gets as many tokens as the router
# sends it), so a receiver must know the size of each block coming to it: real code exchanges
# the sizes first (one small all-to-all of one number per pair). The check gives rank $r$'s
# block for rank $c$ `1 + (r + 2c) % 3` elements, each worth `10 r + c`, and compares your
# blocks with `dist.all_to_all_single`'s, which takes one flat tensor and the split sizes.

# %%
def compare_alltoall(rank, world_size):
    def size(r, c):
        return 1 + (r + 2 * c) % 3

    blocks = [torch.full((size(rank, c),), 10.0 * rank + c) for c in range(world_size)]
    recv_sizes = [size(r, rank) for r in range(world_size)]
    flat = torch.empty(sum(recv_sizes))
    dist.all_to_all_single(flat, torch.cat(blocks), output_split_sizes=recv_sizes,
                           input_split_sizes=[b.numel() for b in blocks])
    mine = alltoall(rank, world_size, blocks, recv_sizes)
    return all(torch.equal(a, b) for a, b in zip(mine, flat.split(recv_sizes), strict=True))


for n in (3, 4):
    same = run(compare_alltoall, world_size=n)
    assert all(same), f"{n} ranks: ranks whose blocks differ from dist.all_to_all_single's: " \
                      f"{[r for r, ok in enumerate(same) if not ok]}"
print("✓ alltoall matches dist.all_to_all_single on 3 and 4 ranks")

# %% tests="alltoall_tests" points=1
# Hidden tests (1 point): 1-5 ranks, blocks of random (also empty) sizes; each rank's messages
# are recorded.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(alltoall)
### END HIDDEN TESTS

# %% [markdown]
# **Why it works.** A round is a permutation: every rank is the target of exactly one
# sender, and hears from exactly that sender, so no receive waits for a message that never
# comes; over the $N-1$ rounds every ordered pair meets exactly once. On the **ring** of
# section 1 this schedule is not collision-free: a block that travels $k$ places crosses $k$
# links, so in round $k$ every link carries $k$ blocks at once.

# %% [markdown]
# ## Wrap-up
#
# * AllReduce = ReduceScatter + AllGather, and each of the two is a ring pass in which every
#   chunk moves once per step.
# * A tree reaches every rank in few steps; a ring keeps every link busy with small pieces.
#   Which one is faster depends on the message size: notebook 02 counts both.
# * Uneven lengths are no reason to drop data: chunks that differ by at most one element.
# * On real ranks a step is a send and a receive that must not wait on each other.
#
# **Next.** Notebook 02 puts numbers on these algorithms: the $\alpha$-$\beta$ cost of ring and
# tree, algorithm bandwidth against bus bandwidth, and gloo measured on this machine. Notebook
# 03 uses AllReduce for what it is for: data-parallel training.
