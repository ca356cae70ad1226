# %% [markdown]
# # 01 · Collectives: how N workers agree on one gradient
#
# In data-parallel training every worker computes a gradient on its own slice of the batch,
# and before anyone takes an optimizer step all of them must hold the **same** gradient: the
# sum (or the mean) of everybody's. The operation that does this is **AllReduce**, and the way
# NCCL and gloo do it for large tensors is a **ring**.
#
# **What you will build**
#
# 1. Ring AllReduce, simulated over Python lists: scatter-reduce, then all-gather.
# 2. The same ring for any vector length (chunks whose sizes differ by at most one).
# 3. The other collectives: ring AllGather, ring ReduceScatter, binary-tree Broadcast, AlltoAll.
# 4. The real thing: a `torch.distributed` process group on 4 CPU ranks (gloo backend), an
#    `all_reduce` and a `barrier`, then your own ring out of `send`/`recv`, checked against
#    `dist.all_reduce`.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your function works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import copy

import numpy as np
import torch
import torch.distributed as dist

from distlab import _____, run
from distlab.collectives import show_ring, show_tree

# %% [markdown]
# ## 1. Ring AllReduce, simulated
#
# Put the $N$ GPUs in a ring: GPU $i$ sends only to GPU $(i+1) \bmod N$ and receives only from
# GPU $(i-1) \bmod N$. Cut every GPU's gradient into $N$ chunks. Then:
#
# * **Scatter-reduce** ($N-1$ steps). At each step every GPU sends one chunk to its right
#   neighbour, which **adds** it to its own copy of that chunk. A chunk travels around the ring
#   picking up one more GPU's contribution per hop, so after $N-1$ hops one GPU holds its full
#   sum. GPU $i$ starts by sending chunk $i$; whatever it received at one step it passes on at
#   the next.
# * **All-gather** ($N-1$ more steps). Each GPU now owns one finished chunk. The finished chunks
#   travel around the ring the same way, and a GPU that receives one **overwrites** its copy
#   (adding again would count contributions twice).
#
# ```
#  scatter-reduce, step 0 (N = 4)          chunk c on GPU i after the step
#     GPU0 --c0--> GPU1                    GPU1: c0 = g0[c0] + g1[c0]
#     GPU1 --c1--> GPU2                    GPU2: c1 = g1[c1] + g2[c1]
#     GPU2 --c2--> GPU3                    GPU3: c2 = g2[c2] + g3[c2]
#     GPU3 --c3--> GPU0                    GPU0: c3 = g3[c3] + g0[c3]
# ```
#
# All GPUs send at the same time, so a step must use what every GPU held at the *start* of the
# step: the code below writes into a copy, `new_chunks`, and swaps it in after the step.
#
# This first version requires the length to be a multiple of $N$ (section 2 lifts that). It
# must *say* so rather than drop the leftover elements: a gradient with silently missing
# entries trains the wrong model.

# %% solution="ring_allreduce"
def ring_allreduce(gpu_grads, op="mean"):
    """Ring AllReduce simulated over lists.

    gpu_grads[i] is GPU i's gradient (a list of numbers, the same length on every GPU).
    Returns one list per GPU, each the element-wise sum (op="sum") or mean (op="mean").
    """
    N = len(gpu_grads)
    length = len(gpu_grads[0])
    if any(len(grads) != length for grads in gpu_grads):
        raise ValueError("every GPU must hold a gradient of the same length")
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    if length % N != 0:
        raise ValueError(f"length {length} is not a multiple of {N} GPUs: this ring would "
                         "drop elements. Use ring_allreduce_uneven (section 2).")
    size = length // N
    # chunks[i][j]: chunk j as GPU i holds it
    chunks = [[list(grads[j * size:(j + 1) * size]) for j in range(N)] for grads in gpu_grads]

    # Scatter-reduce: N-1 steps; every GPU sends one chunk right, the receiver adds it in.
    for step in range(N - 1):
        new_chunks = copy.deepcopy(chunks)
        for i in range(N):
            send_chunk_idx = (i - step) % N  # BLANK chunk i first, then what arrived last step
            recv_gpu = (i + 1) % N  # BLANK the next GPU round the ring
            for k in range(size):
                new_chunks[recv_gpu][send_chunk_idx][k] = chunks[recv_gpu][send_chunk_idx][k] + chunks[i][send_chunk_idx][k]  # BLANK the receiver's value and the sender's
        chunks = new_chunks

    # All-gather: N-1 steps; every GPU passes a finished chunk right, the receiver overwrites.
    for step in range(N - 1):
        new_chunks = copy.deepcopy(chunks)
        for i in range(N):
            send_chunk_idx = (i - step + 1) % N  # BLANK first the chunk GPU i finished in scatter-reduce, then what arrived last step
            recv_gpu = (i + 1) % N
            new_chunks[recv_gpu][send_chunk_idx] = list(chunks[i][send_chunk_idx])  # BLANK the receiver gets its own copy of the sender's chunk
        chunks = new_chunks

    result = [[value for chunk in gpu_chunks for value in chunk] for gpu_chunks in chunks]
    if op == "mean":
        result = [[value / N for value in grads] for grads in result]
    return result


# %%
gpu_grads = [
    [1, 2, 3, 4],
    [5, 6, 7, 8],
    [9, 10, 11, 12],
    [13, 14, 15, 16],
]
result = ring_allreduce(gpu_grads, op="mean")
for i, grads in enumerate(result):
    print(f"GPU {i}: {grads}")
    assert grads == [7.0, 8.0, 9.0, 10.0], f"GPU {i} holds {grads}, expected the mean"
assert ring_allreduce(gpu_grads, op="sum") == [[28, 32, 36, 40]] * 4, "the sum is wrong"
assert gpu_grads[0] == [1, 2, 3, 4], "ring_allreduce must not change its input"
print("✓ every GPU holds the same mean (and the same sum): ring_allreduce works")

# %% tests="ring_allreduce_tests" points=5
# Hidden tests (5 points): world sizes 1-8, random values, sum and mean.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# ### The ring, step by step
#
# Move the slider. Left: who sends which chunk in this step (orange: scatter-reduce, green:
# all-gather). Right: what every GPU holds; a cell's number is its current partial sum, its
# colour how many GPUs' contributions it already contains, and the cells with a thick border
# are the ones that change in this step. Watch one chunk travel the ring, growing by one
# contribution per hop, then the finished chunks spreading.

# %%
show_ring(gpu_grads)

# %% [markdown]
# ## 2. Any length: chunks that differ by at most one
#
# Gradients are rarely a multiple of the world size. The usual fix (`numpy.array_split`,
# `torch.tensor_split`) cuts a length-$L$ vector into $N$ chunks of $\lfloor L/N \rfloor$
# elements and gives the first $L \bmod N$ chunks one element more. Length 10 on 4 GPUs:
# sizes 3, 3, 2, 2, so the bounds are `[(0, 3), (3, 6), (6, 8), (8, 10)]`. When $L < N$ some
# chunks are empty, and the ring still works: an empty chunk is sent and added like any other.

# %% solution="chunk_bounds"
def chunk_bounds(length, n):
    """(start, end) of each of n chunks of range(length); sizes differ by at most one,
    the larger chunks first."""
    base, extra = divmod(length, n)  # BLANK the size of the small chunks, and how many chunks get one more
    bounds, start = [], 0
    for j in range(n):
        end = start + base + (1 if j < extra else 0)  # BLANK where does chunk j end? (the larger chunks come first)
        bounds.append((start, end))
        start = end  # BLANK where does the next chunk begin?
    return bounds


# %%
assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)], chunk_bounds(10, 4)
assert chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)], chunk_bounds(2, 4)
for n in range(1, 7):
    for length in range(0, 3 * n + 1):
        pieces = [list(range(length))[lo:hi] for lo, hi in chunk_bounds(length, n)]
        assert pieces == [list(p) for p in np.array_split(range(length), n)], (length, n)
print("✓ chunk_bounds cuts like numpy.array_split")

# %% tests="chunk_bounds_tests" points=3
# Hidden tests (3 points): lengths 0-60, 1-9 chunks.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(chunk_bounds)
### END HIDDEN TESTS

# %% [markdown]
# Now the ring for any length. This time write it as each **receiver** sees it, which is how
# code running on one rank must see it: at step $s$, GPU $i$ gets a chunk from its left
# neighbour $i-1$. Which chunk? The one GPU $i-1$ sends at step $s$, by the rule of section 1.
# Each GPU's whole vector lives in one buffer `data[i]`, and chunk $j$ is the slice
# `data[i][lo:hi]` with `(lo, hi) = bounds[j]`.

# %% solution="ring_allreduce_uneven"
def ring_allreduce_uneven(gpu_grads, op="mean"):
    """Ring AllReduce for any length: chunk j is data[lo:hi], (lo, hi) = chunk_bounds(...)[j]."""
    N = len(gpu_grads)
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    bounds = chunk_bounds(len(gpu_grads[0]), N)
    data = [list(grads) for grads in gpu_grads]  # data[i]: GPU i's buffer, reduced in place

    # Scatter-reduce. `sent` is what every GPU sends in this step (a slice of a list is a
    # copy, so it keeps the values from the start of the step).
    for step in range(N - 1):
        sent = [data[i][slice(*bounds[(i - step) % N])] for i in range(N)]
        for i in range(N):
            lo, hi = bounds[(i - step - 1) % N]  # BLANK `(i - step - 1) % N` which chunk does GPU i-1 send in this step?
            incoming = sent[(i - 1) % N]  # BLANK `(i - 1) % N` who sends to GPU i?
            data[i][lo:hi] = [mine + theirs for mine, theirs in zip(data[i][lo:hi], incoming)]

    # All-gather: every GPU forwards a finished chunk; the receiver overwrites its copy.
    for step in range(N - 1):
        sent = [data[i][slice(*bounds[(i - step + 1) % N])] for i in range(N)]
        for i in range(N):
            lo, hi = bounds[(i - step) % N]  # BLANK `(i - step) % N` which finished chunk arrives at GPU i in this step?
            data[i][lo:hi] = sent[(i - 1) % N]

    if op == "mean":
        data = [[value / N for value in row] for row in data]
    return data


# %%
rng = np.random.default_rng(0)
for N in range(1, 6):
    for length in range(0, 3 * N + 1):  # includes length < N: some chunks are empty
        grads = rng.integers(-9, 10, size=(N, length)).tolist()
        for op, expected in (("sum", np.sum(grads, axis=0)), ("mean", np.mean(grads, axis=0))):
            out = ring_allreduce_uneven(grads, op=op)
            assert len(out) == N, f"N={N}: expected one result per GPU, got {len(out)}"
            for i, row in enumerate(out):
                assert np.allclose(row, expected), (
                    f"N={N}, length={length}, op={op!r}: GPU {i} holds {row}, "
                    f"expected {expected.tolist()}")
print("✓ ring_allreduce_uneven is right for every length from 0 to 3N, N = 1..5")

# %% tests="ring_allreduce_uneven_tests" points=3
# Hidden tests (3 points): world sizes 1-8, lengths 0-3N (so also shorter than N), sum and mean.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_allreduce_uneven)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The other collectives
#
# AllReduce is one of a small family. In each exercise below rank $r$ may only talk to the
# ranks the algorithm allows, and all ranks act at the same time.
#
# | collective | before (rank $r$ holds) | after (rank $r$ holds) |
# | --- | --- | --- |
# | AllGather | shard $r$ | every shard, in rank order |
# | ReduceScatter | a full vector $x_r$ | chunk $r$ of $\sum_q x_q$ |
# | Broadcast | (root only) the data | the data |
# | AlltoAll | blocks $b_{r,0}, \dots, b_{r,N-1}$ | $b_{0,r}, \dots, b_{N-1,r}$ |
#
# AllReduce = ReduceScatter then AllGather: exactly the two phases of your ring.
#
# ### 3a. Ring AllGather
#
# Rank $r$ starts with its shard $r$. At each of $N-1$ steps every rank forwards to its right
# neighbour the shard it got most recently (at step 0: its own), and files what arrives from
# its left neighbour in the right slot. `slots[r][c]` is rank $r$'s copy of shard $c$.

# %% solution="ring_allgather"
def ring_allgather(shards):
    """shards[r] is rank r's list. Returns, per rank, the concatenation of all shards in rank
    order (shards may differ in length)."""
    N = len(shards)
    slots = [[None] * N for _ in range(N)]  # slots[r][c]: rank r's copy of shard c
    for r in range(N):
        slots[r][r] = list(shards[r])
    for step in range(N - 1):
        sent = [slots[r][(r - step) % N] for r in range(N)]  # BLANK `(r - step) % N` which shard does rank r forward in this step?
        for r in range(N):
            sender = (r - 1) % N  # BLANK who sends to rank r?
            slots[r][(r - step - 1) % N] = list(sent[sender])  # BLANK `(r - step - 1) % N` which shard has arrived?
    return [[value for shard in slots[r] for value in shard] for r in range(N)]


# %%
shards = [[0, 1], [2, 3], [4], [5]]
gathered = ring_allgather(shards)
for r, full in enumerate(gathered):
    print(f"rank {r}: {full}")
    assert full == [0, 1, 2, 3, 4, 5], f"rank {r} holds {full}"
assert ring_allgather([[7.0]]) == [[7.0]], "one rank: nothing to send"
print("✓ every rank gathered every shard, in rank order")

# %% tests="ring_allgather_tests" points=3
# Hidden tests (3 points): world sizes 1-8, shards of random (also empty) lengths.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_allgather)
### END HIDDEN TESTS

# %% [markdown]
# ### 3b. Ring ReduceScatter
#
# ReduceScatter is the scatter-reduce phase alone, with a **convention**: rank $r$ ends with
# chunk $r$ of the reduced vector (chunks cut by `chunk_bounds`). Careful: in your AllReduce,
# rank $r$ sends chunk $r$ first; after $N-1$ hops that chunk is complete on rank $r-1$, so
# rank $r$ ends up holding chunk $r+1$. A chunk always finishes one rank *before* the rank it
# started on. Shift the schedule so that every chunk finishes on its owner.

# %% solution="ring_reduce_scatter"
def ring_reduce_scatter(vectors, op="sum"):
    """vectors[r] is rank r's list. Returns shards: shards[r] is chunk r (chunk_bounds) of the
    element-wise sum (or mean) of all vectors."""
    N = len(vectors)
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    bounds = chunk_bounds(len(vectors[0]), N)
    data = [list(vector) for vector in vectors]
    for step in range(N - 1):
        sent = [data[r][slice(*bounds[(r - step - 1) % N])] for r in range(N)]  # BLANK `(r - step - 1) % N` which chunk must start here to finish on its owner? (then: what arrived)
        for r in range(N):
            lo, hi = bounds[(r - step - 2) % N]  # BLANK `(r - step - 2) % N` which chunk does rank r-1 send in this step?
            data[r][lo:hi] = [mine + theirs for mine, theirs in zip(data[r][lo:hi], sent[(r - 1) % N])]
    shards = [data[r][slice(*bounds[r])] for r in range(N)]  # BLANK `bounds[r]` which part of its buffer does rank r keep?
    if op == "mean":
        shards = [[value / N for value in shard] for shard in shards]
    return shards


# %%
vectors = [[1, 2, 3, 4, 5], [10, 20, 30, 40, 50], [100, 200, 300, 400, 500]]
shards = ring_reduce_scatter(vectors)
print("shards:", shards)
assert shards == [[111, 222], [333, 444], [555]], f"got {shards}"
# AllGather(ReduceScatter(x)) = AllReduce(x)
assert ring_allgather(shards) == ring_allreduce_uneven(vectors, op="sum")
print("✓ rank r holds chunk r of the sum, and all-gathering the shards gives the all-reduce")

# %% tests="ring_reduce_scatter_tests" points=3
# Hidden tests (3 points): world sizes 1-8, lengths 0-3N, sum and mean.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_reduce_scatter)
### END HIDDEN TESTS

# %% [markdown]
# ### 3c. Binary-tree Broadcast
#
# The root (rank 0) has the data; everyone needs it. Sending it to each rank in turn takes
# $N-1$ steps. Arrange the ranks in a binary tree instead: rank $i$'s children are $2i+1$ and
# $2i+2$, its parent $\lfloor (i-1)/2 \rfloor$. In each step, every rank that received the data
# in the previous step passes it to its children (both at once: a rank can send on two links).
# A tree of $N$ ranks has $\lceil \log_2(N+1) \rceil$ levels, so the broadcast takes one step
# per level below the root: $\lceil \log_2(N+1) \rceil - 1 = \lfloor \log_2 N \rfloor$ steps
# (3 steps for 8 ranks instead of 7). Return the number of steps too.

# %% solution="tree_broadcast"
def tree_broadcast(data, num_nodes):
    """Broadcast `data` from rank 0 down a binary tree. Returns (received, steps): received[i]
    is rank i's copy, steps the number of communication steps."""
    received = [None] * num_nodes
    received[0] = list(data)
    level, steps = [0], 0  # level: the ranks that got the data in the last step
    while level:
        next_level = []
        for parent in level:
            for child in (2 * parent + 1, 2 * parent + 2):  # BLANK `(2 * parent + 1, 2 * parent + 2)` the two children
                if child < num_nodes:  # BLANK is there such a rank?
                    received[child] = list(received[parent])
                    next_level.append(child)
        if next_level:  # BLANK when does this round count as a step?
            steps += 1
        level = next_level
    return received, steps


# %%
received, steps = tree_broadcast([3.14, 2.72], 8)
assert received == [[3.14, 2.72]] * 8, received
assert steps == 3, f"8 ranks: expected 3 steps (levels 1, 2, 3 below the root), got {steps}"
for n in (1, 2, 3, 4, 7, 16, 100):
    assert tree_broadcast([0], n)[1] == int(np.ceil(np.log2(n + 1))) - 1, n
print("✓ everyone has the data after", steps, "steps for 8 ranks")

# %% tests="tree_broadcast_tests" points=3
# Hidden tests (3 points): 1-40 ranks, random data; every rank's copy and the step count.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(tree_broadcast)
### END HIDDEN TESTS

# %% [markdown]
# Rank $i$ is coloured by the step in which it receives the data:

# %%
show_tree(10)

# %% [markdown]
# ### 3d. AlltoAll
#
# Every rank has a block for every rank: `blocks[r][c]` must go from rank $r$ to rank $c$, and
# rank $c$ files it as `received[c][r]` (so `received` is the transpose of `blocks`). This is
# how mixture-of-experts layers send tokens to the rank that holds their expert. A schedule
# without collisions: in round $k = 1, \dots, N-1$ every rank sends to the rank $k$ places to
# its right (and so receives from the rank $k$ places to its left); the block for itself never
# leaves home.

# %% solution="alltoall"
def alltoall(blocks):
    """blocks[r][c] goes from rank r to rank c. Returns received with received[c][r] == blocks[r][c]."""
    N = len(blocks)
    received = [[None] * N for _ in range(N)]
    for r in range(N):
        received[r][r] = list(blocks[r][r])  # its own block stays home
    for k in range(1, N):  # round k: everyone sends k places to the right
        for r in range(N):
            dst = (r + k) % N  # BLANK k places to the right of r
            block = blocks[r][dst]  # BLANK which of rank r's blocks is meant for dst?
            received[dst][r] = list(block)  # BLANK `dst` whose row files the block from r?
    return received


# %%
blocks = [[[f"{r}->{c}"] for c in range(3)] for r in range(3)]  # a one-item block per pair
received = alltoall(blocks)
for c in range(3):
    print(f"rank {c} received: {[block[0] for block in received[c]]}")
assert received == [[blocks[r][c] for r in range(3)] for c in range(3)], received
print("✓ received is the transpose of blocks")

# %% tests="alltoall_tests" points=3
# Hidden tests (3 points): world sizes 1-8, blocks of random (also empty) lengths.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(alltoall)
### END HIDDEN TESTS

# %% [markdown]
# ### What each rank sends
#
# Let the full vector be $S$ bytes. Counting what one rank sends during the whole collective:
#
# | collective | bytes sent per rank | steps |
# | --- | --- | --- |
# | ring AllReduce | $2\,\frac{N-1}{N}\,S$ | $2(N-1)$ |
# | ring ReduceScatter, ring AllGather | $\frac{N-1}{N}\,S$ | $N-1$ |
# | tree Broadcast | up to $2S$ (an inner node, to two children) | $\lfloor \log_2 N \rfloor$ |
# | AlltoAll | $\frac{N-1}{N}\,S$ | $N-1$ |
#
# The ring AllReduce's $2\frac{N-1}{N}S$ hardly grows with $N$: it is below $2S$ for any number
# of ranks, which is why rings are used for large gradients. Its $2(N-1)$ steps each pay a
# latency, though, which is where trees win for small messages. Notebook 02 turns these counts
# into a cost model ($\alpha$ per message, $\beta$ per byte) and measures them.

# %% [markdown]
# ## 4. For real: a process group on 4 ranks
#
# Enough simulation. `torch.distributed` runs one **process** per rank; the processes find each
# other through a rendezvous address (`MASTER_ADDR`, `MASTER_PORT`) and form a **process
# group**. The **backend** moves the bytes: NCCL between GPUs, **gloo** between CPUs, which is
# what we have here.
#
# `run(fn, *args, world_size=4, init_group=False)` (from `distlab`) starts `world_size`
# processes, calls `fn(rank, world_size, *args)` in each, shows each rank's prints prefixed
# with `[rank r]`, and returns the list of per-rank return values. With `init_group=False`
# your function sets up (and tears down) the process group itself; the rendezvous address is
# already in the environment.
#
# Each rank starts with the tensor `[rank + 1]`; after a SUM all-reduce every rank holds
# $1 + 2 + 3 + 4 = 10$. A **barrier** then makes every rank wait until all have reached it,
# so none leaves (and tears down the group) while others still need it.

# %% solution="hello_allreduce"
def hello_allreduce(rank, world_size):
    """Join a gloo process group, all-reduce [rank + 1] (SUM), wait for everyone, leave."""
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)  # BLANK `"gloo"` the backend that runs on CPUs
    x = torch.tensor([rank + 1.0])
    print(f"before all_reduce: {x.item()}")
    dist.all_reduce(x, op=dist.ReduceOp.SUM)  # BLANK `dist.ReduceOp.SUM` which reduction gives 1 + 2 + 3 + 4?
    print(f"after all_reduce:  {x.item()}")
    dist.barrier()  # BLANK `barrier` the call that waits until every rank arrives
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
# Hidden tests (3 points): 1-4 ranks; the value each rank returns, and the group is closed.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(hello_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Your ring over real ranks: `send` and `recv`
#
# Now write the ring as the code of **one** rank: it knows only its own `rank`, talks only to
# its neighbours, and sends and receives real tensors with point-to-point calls:
#
# * `dist.recv(buf, src=left)` blocks until a tensor from rank `left` has arrived in `buf`;
# * `req = dist.isend(t, dst=right)` *starts* sending and returns at once; `req.wait()` waits
#   for the send to finish (don't touch `t` before).
#
# Why not a plain blocking `dist.send` first? If every rank sends first and nobody receives
# yet, every rank can be stuck in its send forever: a **deadlock**. Posting the send
# asynchronously, then receiving, then waiting, keeps the ring moving.
#
# The function reduces `tensor` **in place**, like `dist.all_reduce`, and returns it.
# `torch.tensor_split(tensor, N)` cuts it exactly like your `chunk_bounds` and returns
# **views**: adding into a chunk writes into `tensor` itself, with no copies. The scatter-reduce
# receives into a spare buffer `inbox` (then adds it in); the all-gather receives straight into
# the chunk, which overwrites it. For the mean, each rank divides only the chunk it finished,
# before the all-gather shares it: $L/N$ divisions per rank instead of $L$.
#
# From here on `run` sets up the process group before calling your function (its default,
# `init_group=True`).

# %% solution="ring_allreduce_p2p"
def ring_allreduce_p2p(rank, world_size, tensor, op="sum"):
    """All-reduce a 1-D float tensor over the default process group with a ring of send/recv.
    Works for any length; reduces `tensor` in place and returns it."""
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    N = world_size
    chunks = torch.tensor_split(tensor, N)  # views of tensor; the first len % N are one longer
    right = (rank + 1) % N  # BLANK the rank we send to
    left = (rank - 1) % N  # BLANK the rank we receive from
    inbox = torch.empty_like(chunks[0])  # chunk 0 is a largest chunk

    # Scatter-reduce: after N-1 steps this rank holds the full sum of chunk (rank + 1) % N.
    for step in range(N - 1):
        send = chunks[(rank - step) % N]  # BLANK `(rank - step) % N` which chunk do we pass on in this step?
        recv = chunks[(rank - step - 1) % N]  # BLANK `(rank - step - 1) % N` which chunk does our left neighbour send?
        request = dist.isend(send, dst=right)
        incoming = inbox[: recv.numel()]
        dist.recv(incoming, src=left)
        recv.add_(incoming)  # BLANK `add_` combine what arrived with our own copy, in place
        request.wait()

    if op == "mean":
        chunks[(rank + 1) % N].div_(N)  # the chunk this rank finished

    # All-gather: receive each finished chunk straight into place (overwrite).
    for step in range(N - 1):
        send = chunks[(rank - step + 1) % N]
        recv = chunks[(rank - step) % N]
        request = dist.isend(send, dst=right)
        dist.recv(recv, src=left)
        request.wait()
    return tensor


# %% [markdown]
# The check runs your function on 4 ranks next to `dist.all_reduce` on the same random tensor
# (each rank draws a different one), for a length that is not a multiple of 4.

# %%
def compare_with_all_reduce(rank, world_size, length, op):
    x = torch.randn(length, generator=torch.Generator().manual_seed(rank))
    expected = x.clone()
    dist.all_reduce(expected, op=dist.ReduceOp.SUM)
    if op == "mean":
        expected /= world_size
    mine = ring_allreduce_p2p(rank, world_size, x.clone(), op=op)
    return torch.allclose(mine, expected, rtol=1e-5, atol=1e-5)


for op in ("sum", "mean"):
    for length in (1001, 3):
        same = run(compare_with_all_reduce, length, op, world_size=4, backend="gloo")
        assert all(same), f"op={op!r}, length={length}: ranks that disagree with " \
                          f"dist.all_reduce: {[r for r, ok in enumerate(same) if not ok]}"
print("✓ ring_allreduce_p2p matches dist.all_reduce on 4 ranks (sum and mean)")

# %% [markdown]
# When a ring misbehaves, look at the messages. `trace=True` prints every send and receive of
# every rank, here for a tiny tensor on 3 ranks: 2 steps of scatter-reduce, then 2 of
# all-gather, each rank sending right and receiving from the left. The sizes show the uneven
# chunks: 5 elements on 3 ranks make chunks of 2, 2 and 1 elements (8, 8 and 4 bytes).

# %%
results = run(ring_allreduce_p2p, torch.arange(5.0), world_size=3, backend="gloo", trace=True)
print("every rank:", results[0].tolist())
assert all(torch.equal(t, 3 * torch.arange(5.0)) for t in results)

# %% tests="ring_allreduce_p2p_tests" points=5
# Hidden tests (5 points): world sizes 1 to 8, lengths also shorter than the world size,
# sum and mean, float32 and float64, against dist.all_reduce.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_allreduce_p2p)
### END HIDDEN TESTS

# %% [markdown]
# ## Wrap-up
#
# * AllReduce = ReduceScatter + AllGather; on a ring each takes $N-1$ steps, and each rank sends
#   $\frac{N-1}{N}S$ in each, whatever $N$ is.
# * Uneven lengths are no reason to drop data: chunks that differ by at most one element.
# * A tree broadcast needs $\lfloor \log_2 N \rfloor$ steps; AlltoAll is a transpose.
# * On real ranks the same ring is a few `isend`/`recv` calls on views of one tensor, and its
#   answer matches `dist.all_reduce`.
#
# **Next.** Notebook 02 puts numbers on all this: the $\alpha$-$\beta$ cost of ring and tree,
# algorithm bandwidth vs bus bandwidth, and measured gloo timings on this machine. Notebook 03
# uses AllReduce for what it is for: data-parallel training.
