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
# 1. Ring AllReduce, simulated over Python lists: scatter-reduce, then all-gather.
# 2. The same ring for any vector length (chunks whose sizes differ by at most one).
# 3. The other collectives: ring AllGather, ring ReduceScatter, binary-tree Broadcast, AlltoAll.
# 4. The real thing: a `torch.distributed` process group on 4 CPU ranks (gloo backend), an
#    `all_reduce` and a `barrier`, then your own ring out of `isend`/`recv`, checked against
#    `dist.all_reduce`.
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
from distlab.collectives import show_ring, show_tree

# %% [markdown]
# ## 1. Ring AllReduce, simulated
#
# Put the $N$ GPUs in a ring: GPU 0 sends to GPU 1, GPU 1 to GPU 2, and so on, and the last GPU
# sends back to GPU 0. Each GPU sends only to its right neighbour and receives only from its
# left one. Cut every GPU's gradient into $N$ chunks, numbered $0, \dots, N-1$. Then:
#
# * **Scatter-reduce** ($N-1$ steps). At each step every GPU sends one chunk to its right
#   neighbour, which **adds** it to its own copy of that chunk. In the first step GPU $i$ sends
#   chunk $i$; from then on it passes on the chunk it has just received. So a chunk travels
#   round the ring, picking up one more GPU's contribution per hop.
# * **All-gather** ($N-1$ more steps). Each GPU now holds one finished chunk. In the first step
#   every GPU sends the chunk it finished; from then on it passes on the chunk it has just
#   received. A GPU that receives a finished chunk **overwrites** its copy (adding again would
#   count contributions twice).
#
# ```
#  scatter-reduce, step 0 (N = 4)          after the step
#     GPU0 --c0--> GPU1                    GPU1: c0 = g0[c0] + g1[c0]
#     GPU1 --c1--> GPU2                    GPU2: c1 = g1[c1] + g2[c1]
#     GPU2 --c2--> GPU3                    GPU3: c2 = g2[c2] + g3[c2]
#     GPU3 --c3--> GPU0                    GPU0: c3 = g3[c3] + g0[c3]
# ```
#
# Move the slider. Left: who sends which chunk in this step (orange: scatter-reduce, green:
# all-gather). Right: what every GPU holds; a cell's number is its current partial sum, its
# colour how many GPUs' contributions it already contains, and the cells with a thick border
# are the ones that change in this step. Watch one chunk travel the ring, growing by one
# contribution per hop, then the finished chunks spreading.

# %%
show_ring([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])

# %% [markdown]
# Two things to read off the picture before you write the code:
#
# * **Which chunk does GPU $i$ finish?** Chunk $j$ leaves GPU $j$ in step 0 and moves one GPU to
#   the right per step. After $N-1$ hops it has been on every GPU once, so it is complete on the
#   GPU just *left* of the one it started from: GPU $i$ finishes chunk $i+1$, and the last GPU
#   finishes chunk 0. (After step 3 on the slider, GPU 0's darkest cell is c1.) That is the
#   chunk GPU $i$ sends first in the all-gather.
# * **No copy of the state.** All GPUs send at the same time, so a step must use what every GPU
#   held at its start. But in every step a GPU sends a *different* chunk from the one it
#   receives (it receives the one its left neighbour sends). Updating the lists in place, one
#   GPU after the other, therefore never reads a value that the same step has already changed:
#   the order of the loop over the GPUs does not matter. The same fact lets the real-rank
#   version of section 5 receive straight into its own tensor.
#
# This first version requires the length to be a multiple of $N$ (section 2 lifts that). It
# must *say* so rather than drop the leftover elements: a gradient with silently missing
# entries trains the wrong model.

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
                         "drop elements. Use ring_allreduce_uneven (section 2).")
    size = length // N
    # chunks[i][j]: chunk j as GPU i holds it (updated in place: see above)
    chunks = [[list(grads[j * size:(j + 1) * size]) for j in range(N)] for grads in gpu_grads]
    right = [(i + 1) % N for i in range(N)]  # BLANK `(i + 1) % N` GPU i's right neighbour, round the ring # REJECT `(i + 2) % N`
    states = []  # for trace=True: a copy of every GPU's chunks after each step

    # Scatter-reduce: N-1 steps; every GPU sends one chunk right, the receiver adds it in.
    for step in range(N - 1):
        for i in range(N):
            recv_gpu = right[i]
            send_chunk_idx = (i - step) % N  # BLANK chunk i first, then the chunk that arrived in the step before # ACCEPT `i - step` # REJECT `(i + step) % N`
            for k in range(size):
                chunks[recv_gpu][send_chunk_idx][k] = chunks[recv_gpu][send_chunk_idx][k] + chunks[i][send_chunk_idx][k]  # BLANK what the receiver holds, and what arrives # REJECT `chunks[i][send_chunk_idx][k]`
        states.append([[list(chunk) for chunk in gpu] for gpu in chunks])

    # All-gather: N-1 steps; every GPU passes a finished chunk right, the receiver overwrites.
    for step in range(N - 1):
        for i in range(N):
            recv_gpu = right[i]
            send_chunk_idx = (i - step + 1) % N  # BLANK first the chunk GPU i finished, then the chunk that arrived in the step before # REJECT `(i - step) % N`
            chunks[recv_gpu][send_chunk_idx] = list(chunks[i][send_chunk_idx])  # BLANK the receiver's copy is replaced by the sender's # ACCEPT `chunks[i][send_chunk_idx]` `chunks[i][send_chunk_idx][:]` # REJECT `[a + b for a, b in zip(chunks[recv_gpu][send_chunk_idx], chunks[i][send_chunk_idx])]`
        states.append([[list(chunk) for chunk in gpu] for gpu in chunks])

    result = [[value for chunk in gpu_chunks for value in chunk] for gpu_chunks in chunks]
    if op == "mean":
        result = [[value / N for value in grads] for grads in result]
    return (result, states) if trace else result


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
# The right end is not enough: every step must be a ring step. After step 0 (the slider's
# first picture) GPU 1's chunk 0 holds GPU 0's and its own contributions, nothing more.
_, states = ring_allreduce(gpu_grads, op="sum", trace=True)
assert len(states) == 6, f"4 GPUs take 2 x 3 steps, the trace has {len(states)}"
assert states[0][1][0] == [1 + 5], f"after step 0 GPU 1's chunk 0 is {states[0][1][0]}, expected [6]"
assert states[2][0][1] == [2 + 6 + 10 + 14], "after step 2 GPU 0 must have finished chunk 1"
print("✓ every GPU holds the same mean (and the same sum), step by step: ring_allreduce works")

# %% tests="ring_allreduce_tests" points=5
# Hidden tests (5 points): world sizes 1-8, random values, sum and mean.
### BEGIN HIDDEN TESTS
# For instructors, how this exercise departs from seed 000's exercise 1 (its five blanks kept):
# - Seed hints 1 and 4 were the answers (`(i - step) % N`, `(i - step + 1) % N`); they now
#   say which chunk in words, and "GPU i finishes chunk i+1" is taught (and drawn) above.
# - Seed blank 2 (`recv_gpu`, "the next GPU") had an unblanked twin `recv_gpu = (i + 1) % N`
#   in the all-gather loop: the neighbour is now asked once, as the list `right` (blank [1]).
# - The seed's `new_chunks = copy.deepcopy(chunks)` per step is dropped: a GPU never sends the
#   chunk it receives in the same step, so in-place updates are right (said in the markdown).
# - Seed hint 5 ("replace with the sender's chunk") kept as overwrite-not-add; the `list(...)`
#   copy is accepted either way (it is not observable in this simulation).
# - The seed drops the last length % N elements; this version raises ValueError instead.
# - The slider picture comes before the exercise (seed: none).
from autograder.grade_cell import grade
grade(ring_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Any length: chunks that differ by at most one
#
# Gradients are rarely a multiple of the world size. The usual fix (`numpy.array_split`,
# `torch.tensor_split`) cuts as evenly as it can: chunk sizes differ by at most one, and the
# larger chunks come first. Length 10 on 4 GPUs gives sizes 3, 3, 2, 2, so the bounds are
# `[(0, 3), (3, 6), (6, 8), (8, 10)]`; length 2 on 4 GPUs gives sizes 1, 1, 0, 0. When $L < N$
# some chunks are empty, and the ring still works: an empty chunk is sent and added like any
# other.

# %% solution="chunk_bounds"
def chunk_bounds(length, n):
    """(start, end) of each of n chunks of range(length); sizes differ by at most one,
    the larger chunks first."""
    base, extra = divmod(length, n)  # BLANK the size of the small chunks, and how many chunks are one longer # REJECT `(length // n, 0)`
    bounds, start = [], 0
    for j in range(n):
        end = start + base + (1 if j < extra else 0)  # BLANK where does chunk j end? (the larger chunks come first) # REJECT `start + base + (1 if j >= n - extra else 0)`
        bounds.append((start, end))
        start = end  # BLANK where does the next chunk begin? # REJECT `start + base`
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
# For instructors: chunk_bounds is not in the seeds (seed 000 drops the remainder). The text
# above no longer spells out blank [1] (it said "L // N elements, the first L mod N one more").
from autograder.grade_cell import grade
grade(chunk_bounds)
### END HIDDEN TESTS

# %% [markdown]
# Now the ring for any length. This time write it as each **receiver** sees it, which is how
# code running on one rank must see it: at step $s$, GPU $i$ gets a chunk from its left
# neighbour `left`. Which chunk? The one `left` sends at step $s$, by the rules of section 1.
# Each GPU's whole vector lives in one buffer `data[i]`, and chunk $j$ is the slice
# `data[i][lo:hi]` with `(lo, hi) = bounds[j]`. As in section 1 the buffers change in place:
# the chunk GPU $i$ reads from `left` is not the one `left` receives in the same step.

# %% solution="ring_allreduce_uneven"
def ring_allreduce_uneven(gpu_grads, op="mean"):
    """Ring AllReduce for any length: chunk j is data[lo:hi], (lo, hi) = chunk_bounds(...)[j]."""
    N = len(gpu_grads)
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    bounds = chunk_bounds(len(gpu_grads[0]), N)
    data = [list(grads) for grads in gpu_grads]  # data[i]: GPU i's buffer, reduced in place

    # Scatter-reduce, as GPU i sees it: a chunk arrives from the left and is added in.
    for step in range(N - 1):
        for i in range(N):
            left = (i - 1) % N
            lo, hi = bounds[(i - step - 1) % N]  # BLANK `(i - step - 1) % N` which chunk does GPU left send in this step? # ACCEPT `i - step - 1` `(left - step) % N` `left - step` # REJECT `(i - step) % N`
            data[i][lo:hi] = [mine + theirs for mine, theirs in zip(data[i][lo:hi], data[left][lo:hi])]

    # All-gather, as GPU i sees it: a finished chunk arrives from the left and replaces its copy.
    for step in range(N - 1):
        for i in range(N):
            left = (i - 1) % N
            lo, hi = bounds[(i - step) % N]  # BLANK `(i - step) % N` which finished chunk does GPU left pass on in this step? # ACCEPT `i - step` `(left - step + 1) % N` # REJECT `(i - step + 1) % N`
            data[i][lo:hi] = data[left][lo:hi]

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

# %% tests="ring_allreduce_uneven_tests" points=2
# Hidden tests (2 points): world sizes 1-8, lengths 0-3N (so also shorter than N), sum and mean.
### BEGIN HIDDEN TESTS
# For instructors: seed 000 has no uneven ring. The neighbour (`left`) is given here, not asked
# again; the two blanks are the receiver's view of each phase, the idea this section adds.
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
# its left neighbour in the right slot. `slots[r][c]` is rank $r$'s copy of shard $c$. No
# chunk arithmetic this time: a rank only remembers which shard it got last.

# %% solution="ring_allgather" drill
def ring_allgather(shards):
    """shards[r] is rank r's list. Returns, per rank, the concatenation of all shards in rank
    order (shards may differ in length)."""
    N = len(shards)
    slots = [[None] * N for _ in range(N)]  # slots[r][c]: rank r's copy of shard c
    for r in range(N):
        slots[r][r] = list(shards[r])
    latest = list(range(N))  # latest[r]: the shard rank r got most recently (at first, its own)
    for step in range(N - 1):
        arriving = [latest[(r - 1) % N] for r in range(N)]  # BLANK `latest[(r - 1) % N]` which shard reaches rank r in this step? # ACCEPT `latest[r - 1]` # REJECT `latest[r]`
        for r in range(N):
            slots[r][arriving[r]] = list(slots[(r - 1) % N][arriving[r]])
        latest = arriving
    return [[value for shard in slots[r] for value in shard] for r in range(N)]


# %%
shards = [[0, 1], [2, 3], [4], [5]]
gathered = ring_allgather(shards)
for r, full in enumerate(gathered):
    print(f"rank {r}: {full}")
    assert full == [0, 1, 2, 3, 4, 5], f"rank {r} holds {full}"
assert ring_allgather([[7.0]]) == [[7.0]], "one rank: nothing to send"
print("✓ every rank gathered every shard, in rank order")

# %% tests="ring_allgather_tests" points=1
# Hidden tests (1 point): world sizes 1-8, shards of random (also empty) lengths.
### BEGIN HIDDEN TESTS
# For instructors, from seed 003 §2: the seed's "node r holds the data of rank r - step"
# comment was the answer. The shard index rule is asked in sections 1 and 2; here the ring is
# written as forwarding what arrived last (`latest`), so the blank is the forwarding itself.
from autograder.grade_cell import grade
grade(ring_allgather)
### END HIDDEN TESTS

# %% [markdown]
# ### 3b. Ring ReduceScatter
#
# ReduceScatter is the scatter-reduce phase alone, with a **convention**: rank $r$ ends with
# chunk $r$ of the reduced vector (chunks cut by `chunk_bounds`). In your AllReduce a chunk
# finishes one rank *before* the rank it started on (GPU $i$ finished chunk $i+1$). Shift the
# schedule so that every chunk finishes on its owner: which chunk must rank $r$ send first?

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
        sending = [(r - step - 1) % N for r in range(N)]  # BLANK `(r - step - 1) % N` which chunk must rank r send first to finish it on its owner? (then: what arrived) # ACCEPT `r - step - 1` # REJECT `(r - step) % N`
        sent = [data[r][slice(*bounds[sending[r]])] for r in range(N)]  # all send at once
        for r in range(N):
            left = (r - 1) % N
            lo, hi = bounds[sending[left]]  # the chunk rank left sent
            data[r][lo:hi] = [mine + theirs for mine, theirs in zip(data[r][lo:hi], sent[left])]
    shards = [data[r][slice(*bounds[r])] for r in range(N)]  # BLANK `bounds[r]` which part of its buffer does rank r keep? # REJECT `bounds[(r + 1) % N]`
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

# %% tests="ring_reduce_scatter_tests" points=2
# Hidden tests (2 points): world sizes 1-8, lengths 0-3N, sum and mean.
### BEGIN HIDDEN TESTS
# For instructors, from seed 003 §3: the seed keeps chunk r on rank r with the all-reduce's
# unshifted schedule, which leaves rank r with chunk r+1 complete; here the shift is the blank.
# Its neighbour (`left`) is given, and the receiver takes the chunk `left` sent, by name.
from autograder.grade_cell import grade
grade(ring_reduce_scatter)
### END HIDDEN TESTS

# %% [markdown]
# ### 3c. Binary-tree Broadcast
#
# The root (rank 0) has the data; everyone needs it. Sending it to each rank in turn takes
# $N-1$ steps. Arrange the ranks in a binary tree instead, numbered level by level from the
# left: the root 0; below it 1 and 2; below those 3, 4, 5, 6; and so on (the picture below has
# 10 ranks). In each step, every rank that received the data in the previous step passes it to
# its children, to both at once: we assume a rank can send on two links at the same time.

# %%
show_tree(10)

# %% [markdown]
# Each step fills one more level of the tree, so the broadcast takes one step per level below
# the root: $\lfloor \log_2 N \rfloor$ steps (3 for 8 ranks, instead of 7). Return the number of
# steps too: the rounds in which some rank received the data.
#
# **Two trees, two counts.** The binary tree drawn here needs a rank that can send to two
# children *at once*. If a rank can send only one message per step (one link, or all its
# bandwidth to one peer), its second child waits a step: a full tree ($N = 2^L - 1$ ranks)
# then takes $2\lfloor \log_2 N \rfloor$ steps, and a tree whose last level is partly filled
# a little less (10 ranks: 4 steps, 8 ranks: 4). The **binomial tree** is built for one send
# per step: in every step each rank that has the data sends it to one rank that has not, so the
# number of ranks with the data doubles per step, and $\lceil \log_2 N \rceil$ steps suffice
# (4 for 10 ranks, 3 for 8), the fewest possible.
#
# So why would a library ever use a binary tree? Because messages are large. The binomial
# tree's root sends the whole message $\lceil \log_2 N \rceil$ times, one child after another.
# In a binary tree no rank has more than two children, so the message can be cut into small
# pieces and **pipelined**: a rank forwards piece $k$ to its children while piece $k+1$
# arrives from its parent, and for a large message the time approaches that of sending it about
# twice, whatever $N$. NCCL's tree algorithm goes one step further with a **double binary
# tree** (Sanders, Speck & Träff, 2009): two binary trees, each carrying half the data, built so
# that a rank that is a leaf in one is an inner node in the other, which spreads the sending
# evenly over the ranks.

# %% solution="tree_broadcast"
def tree_broadcast(data, num_nodes):
    """Broadcast `data` from rank 0 down a binary tree, each rank sending to both its children
    in one step. Returns (received, steps): received[i] is rank i's copy, steps the number of
    communication steps."""
    received = [None] * num_nodes
    received[0] = list(data)
    senders, steps = [0], 0  # senders: the ranks that got the data in the last step
    while True:
        receivers = []
        for parent in senders:
            for child in (2 * parent + 1, 2 * parent + 2):  # BLANK `(2 * parent + 1, 2 * parent + 2)` the two children of rank parent # ACCEPT `(2 * parent + 2, 2 * parent + 1)` `[2 * parent + 1, 2 * parent + 2]` # REJECT `(parent + 1, parent + 2)`
                if child < num_nodes:  # BLANK is there such a rank? # REJECT `child <= num_nodes`
                    received[child] = list(received[parent])
                    receivers.append(child)
        if not receivers:  # BLANK when is the broadcast over? # REJECT `not parent`
            return received, steps
        steps += 1
        senders = receivers


# %%
received, steps = tree_broadcast([3.14, 2.72], 8)
assert received == [[3.14, 2.72]] * 8, received
assert steps == 3, f"8 ranks: expected 3 steps (levels 1, 2, 3 below the root), got {steps}"
for n in (1, 2, 3, 4, 7, 16, 100):
    assert tree_broadcast([0], n)[1] == int(np.floor(np.log2(n))), n
print("✓ everyone has the data after", steps, "steps for 8 ranks")

# %% tests="tree_broadcast_tests" points=3
# Hidden tests (3 points): 1-40 ranks, random data; every rank's copy and the step count
# (floor(log2 N): the binary tree drawn above, two sends per step).
### BEGIN HIDDEN TESTS
# For instructors, from seed 003 §4: the seed's children 2i+1, 2i+2 were spelled out in the
# text; the picture now shows the numbering instead. The seed says ceil(log2 N) steps, which
# is the binomial tree's count (one send per step); the binary tree with two sends per step,
# drawn and tested here, takes floor(log2 N): the text says which and why both exist. The step
# count is now the loop's end condition (the old `if next_level:` blank let `if parent:` pass).
from autograder.grade_cell import grade
grade(tree_broadcast)
### END HIDDEN TESTS

# %% [markdown]
# ### 3d. AlltoAll
#
# Every rank has a block for every rank: `blocks[r][c]` must go from rank $r$ to rank $c$, and
# rank $c$ files it as `received[c][r]` (so `received` is the transpose of `blocks`). This is
# how mixture-of-experts layers send tokens to the rank that holds their expert. The block for
# itself never leaves home; the others travel in $N-1$ rounds: in round $k = 1, \dots, N-1$
# every rank sends to the rank $k$ places to its right. In every round each rank then sends one
# block and receives one, so on a **switch** (each rank has its own full-duplex port, and any
# two ranks talk without sharing a link) no two messages of a round collide. On the **ring** of
# section 1 this schedule is not collision-free: a block going $k$ places crosses $k$ links, so
# in round $k$ every link carries $k$ blocks at once.
#
# The simulation keeps the messages of a round in `wire`, keyed by (sender, receiver). A rank
# can take only a message sent to it, and must say whom it is from, as `dist.recv(..., src=)`
# must on real ranks.

# %% solution="alltoall"
def alltoall(blocks):
    """blocks[r][c] goes from rank r to rank c. Returns received with received[c][r] == blocks[r][c]."""
    N = len(blocks)
    received = [[None] * N for _ in range(N)]
    for r in range(N):
        received[r][r] = list(blocks[r][r])  # its own block stays home
    for k in range(1, N):
        wire = {}  # (sender, receiver) -> block: the messages of round k
        for r in range(N):
            dst = (r + k) % N  # BLANK `(r + k) % N` whom does rank r send to in round k? # ACCEPT `(k + r) % N` # REJECT `(r - k) % N`
            wire[r, dst] = blocks[r][dst]
        for r in range(N):
            src = (r - k) % N  # the rank k places to the left
            received[r][src] = list(wire[src, r])
    return received


# %%
blocks = [[[f"{r}->{c}"] for c in range(3)] for r in range(3)]  # a one-item block per pair
received = alltoall(blocks)
for c in range(3):
    print(f"rank {c} received: {[block[0] for block in received[c]]}")
assert received == [[blocks[r][c] for r in range(3)] for c in range(3)], received
print("✓ received is the transpose of blocks")

# %% tests="alltoall_tests" points=1
# Hidden tests (1 point): world sizes 1-8, blocks of random (also empty) lengths.
### BEGIN HIDDEN TESTS
# For instructors, from seed 003 §5: the seed's direct transpose and its unfinished ring
# version become the shift schedule above. Either direction is a valid schedule, so the
# receiver's side is given and the blank is the sender's: a wrong `dst` leaves the block the
# receiver looks for off the wire.
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
# | binary-tree Broadcast (two sends per step) | up to $2S$ (an inner node, to two children) | $\lfloor \log_2 N \rfloor$ |
# | binomial-tree Broadcast (one send per step) | up to $\lceil \log_2 N \rceil\,S$ (the root) | $\lceil \log_2 N \rceil$ |
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
# group**: `dist.init_process_group(backend=..., rank=..., world_size=...)` joins it and
# `dist.destroy_process_group()` leaves it. The **backend** moves the bytes: NCCL between GPUs,
# **gloo** between CPUs, which is what we have here.
#
# `run(fn, *args, world_size=4, init_group=True)` (from `distlab`) starts `world_size`
# processes, calls `fn(rank, world_size, *args)` in each, shows each rank's prints prefixed
# with `[rank r]`, and returns the list of per-rank return values. By default
# (`init_group=True`) it sets up the process group before calling `fn`. Below we pass
# `init_group=False`: your function joins (and leaves) the group itself; the rendezvous
# address is already in the environment.
#
# `dist.all_reduce(t, op=...)` replaces `t` on every rank by the reduction of every rank's
# `t`; `op` is a member of the enum `dist.ReduceOp`: `SUM`, `PRODUCT`, `MIN`, `MAX` (and
# `AVG`, on NCCL only). Each rank starts with the
# tensor `[rank + 1]`; after the all-reduce every rank must hold $1 + 2 + 3 + 4 = 10$. A
# **barrier** then makes every rank wait until all have reached it, so none leaves (and tears
# down the group) while others still need it.

# %% solution="hello_allreduce"
def hello_allreduce(rank, world_size):
    """Join the process group, combine every rank's rank + 1 into their total, and leave once
    everyone is done. Returns the total."""
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)  # BLANK `"gloo"` the backend that runs on CPUs # REJECT `"nccl"`
    x = torch.tensor([rank + 1.0])
    print(f"before all_reduce: {x.item()}")
    dist.all_reduce(x, op=dist.ReduceOp.SUM)  # BLANK `dist.ReduceOp.SUM` which reduction gives 1 + 2 + 3 + 4? # REJECT `dist.ReduceOp.MAX`
    print(f"after all_reduce:  {x.item()}")
    dist.barrier()  # BLANK `barrier` the call that waits until every rank arrives # ACCEPT `monitored_barrier` # REJECT `get_rank`
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
# For instructors, from seed 003 §13: the seed's NCCL backend and `.cuda(rank)` become gloo on
# CPU; its fixed MASTER_PORT 29500 comes from `run` (or torchrun, below); its mp.spawn
# launcher is `run`. The docstring no longer names the answers (gloo, SUM, barrier), and
# `dist.monitored_barrier()` counts as the barrier.
from autograder.grade_cell import grade
grade(hello_allreduce)
### END HIDDEN TESTS

# %% [markdown]
# ### The same program outside a notebook: `torchrun`
#
# `run` is a notebook convenience. On a machine or a cluster you start one process per rank
# with `torchrun`, which puts `MASTER_ADDR`, `MASTER_PORT`, `RANK` and `WORLD_SIZE` (and
# `LOCAL_RANK`) into each process's environment; `init_process_group` reads the rendezvous
# address from there. Save your `hello_allreduce`, with the imports it uses (`torch` and
# `torch.distributed as dist`), as `hello.py`, and next to it this script, `hello_torchrun.py`:
#
# ```python
# import os
#
# from hello import hello_allreduce
#
# # torchrun starts this script once per rank and tells each copy who it is
# hello_allreduce(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
# ```
#
# Then start 4 ranks from a terminal (the lines of the 4 processes come out interleaved):
#
# ```bash
# torchrun --nproc-per-node 4 hello_torchrun.py
# ```
#
# ## 5. Your ring over real ranks: `isend` and `recv`
#
# Now write the ring as the code of **one** rank: it knows only its own `rank`, talks only to
# its neighbours, and sends and receives real tensors with point-to-point calls:
#
# * `dist.recv(buf, src=left)` blocks until a tensor from rank `left` has arrived in `buf`;
# * `dist.send(t, dst=right)` blocks too: with gloo, until `right` has received `t`;
# * `dist.isend` takes the same arguments as `dist.send` but only *starts* the send: it returns
#   at once, with a request object, and the request's `wait()` method returns when that send
#   has finished. Until then the tensor being sent must not change.
#
# In a ring every rank sends and receives in every step. If every rank's first call blocks
# until its neighbour receives, then every rank waits for a receive that nobody has posted: a
# **deadlock** (with gloo the ranks hang, whatever the size). So a step is three moves, in an
# order that cannot deadlock: start the send without blocking, receive, then wait for the send
# before the next step touches the tensor again.
#
# The function reduces `tensor` **in place**, like `dist.all_reduce`, and returns it.
# `torch.tensor_split(tensor, N)` cuts it exactly like your `chunk_bounds` and returns
# **views**: writing into a chunk writes into `tensor` itself. PyTorch's methods whose name
# ends in `_` work in place:
#
# ```python
# t = torch.zeros(5)
# a, b = torch.tensor_split(t, 2)    # views: a is t[0:3], b is t[3:5]
# a.add_(torch.ones(3))              # t is now [1, 1, 1, 0, 0]
# b.copy_(torch.tensor([7.0, 8.0]))  # t is now [1, 1, 1, 7, 8]
# a.add(1)                           # a new tensor: t does not change
# ```
#
# Number the steps straight through, $0, \dots, 2N-3$: scatter-reduce, then all-gather. The
# all-gather's first step is step $N-1$, and the chunk a rank has just finished is exactly the
# one your scatter-reduce rule of section 1 gives for step $N-1$. So one rule for the chunk a
# rank sends, and one for the chunk that arrives, serve all $2(N-1)$ steps: you wrote both in
# sections 1 and 2, and they are given below. What differs is what becomes of an arriving
# chunk: in the scatter-reduce it lands in a spare buffer, `inbox`,
# and is added to ours; in the all-gather it replaces ours, so it is received straight into
# place (the chunk we send in that step is another one, as in section 1). For the mean, each
# rank divides only the chunk it finished, before the all-gather shares it: $L/N$ divisions per
# rank instead of $L$.
#
# From here on `run` sets up the process group before calling your function (its default,
# `init_group=True`).

# %% solution="ring_allreduce_p2p" drill
def ring_allreduce_p2p(rank, world_size, tensor, op="sum"):
    """All-reduce a 1-D float tensor over the default process group with a ring of send/recv.
    Works for any length; reduces `tensor` in place and returns it."""
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    N = world_size
    chunks = torch.tensor_split(tensor, N)  # views of tensor; the first len % N are one longer
    right, left = (rank + 1) % N, (rank - 1) % N
    inbox = torch.empty_like(chunks[0])  # room for a largest chunk

    # steps 0 .. N-2: scatter-reduce; steps N-1 .. 2N-3: all-gather
    for step in range(2 * (N - 1)):
        outgoing = chunks[(rank - step) % N]  # the chunk we pass on (section 1's rule)
        arriving = chunks[(rank - step - 1) % N]  # the chunk our left neighbour sends (section 2's)
        request = dist.isend(outgoing, dst=right)  # BLANK `dist.isend(outgoing, dst=right)` start passing `outgoing` on, without blocking # ACCEPT `dist.isend(outgoing, right)` `dist.isend(tensor=outgoing, dst=right)` # REJECT `dist.send(outgoing, dst=right)` `dist.irecv(outgoing, src=right)` `dist.isend(arriving, dst=right)`
        if step < N - 1:  # scatter-reduce: add what arrives to our copy
            incoming = inbox[: arriving.numel()]
            dist.recv(incoming, src=left)
            arriving.add_(incoming)  # BLANK `add_` combine it with our copy, in place # REJECT `copy_` `sub_`
            if op == "mean" and step == N - 2:
                arriving.div_(N)  # finished here: divide once, before the all-gather shares it
        else:  # all-gather: a finished chunk arrives and replaces our copy
            dist.recv(arriving, src=left)  # BLANK `arriving` where does it go? # REJECT `outgoing` `incoming` `inbox` `tensor`
        request.wait()  # BLANK `request.wait()` before the next step: what must be over? # REJECT `request.is_completed()` `dist.barrier()`
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

# %% tests="ring_allreduce_p2p_tests" points=4
# Hidden tests (4 points): world sizes 1 to 8, lengths also shorter than the world size, sum
# and mean, float32 and float64. Each rank is given only its own tensor, and its result is
# compared with the sum (or mean) of all ranks' tensors computed in float64, outside the ranks.
# The ring must be yours: a rank that calls any collective (however reached) fails, each rank
# must send 2(N-1) chunks to its right neighbour and receive 2(N-1) from its left, 2(N-1)/N of
# the tensor in all, and wait for every send it started.
### BEGIN HIDDEN TESTS
# For instructors, from seed 003 §1 (its send/recv version): the neighbours and the chunk
# schedule are given (both asked in sections 1 and 2); the blanks are this section's ideas:
# the send that does not block and the wait after the receive (the deadlock-free order), the
# in-place add, and receiving the all-gather in place.
from autograder.grade_cell import grade
grade(ring_allreduce_p2p)
### END HIDDEN TESTS

# %% [markdown]
# ## Wrap-up
#
# * AllReduce = ReduceScatter + AllGather; on a ring each takes $N-1$ steps, and in each a rank
#   sends $\frac{N-1}{N}S$: less than $S$, whatever $N$ is.
# * Uneven lengths are no reason to drop data: chunks that differ by at most one element.
# * A binary-tree broadcast needs $\lfloor \log_2 N \rfloor$ steps when a rank sends to both
#   children at once, a binomial tree $\lceil \log_2 N \rceil$ with one send per step; binary
#   trees (NCCL's double binary tree) win for large messages, which they pipeline;
#   AlltoAll is a transpose, collision-free on a switch with the shift schedule.
# * On real ranks the same ring is a few `isend`/`recv` calls on views of one tensor, and its
#   answer matches `dist.all_reduce`.
#
# **Next.** Notebook 02 puts numbers on all this: the $\alpha$-$\beta$ cost of ring and tree,
# algorithm bandwidth vs bus bandwidth, and measured gloo timings on this machine. Notebook 03
# uses AllReduce for what it is for: data-parallel training.
