# %% [markdown]
# # 02 · Cost models: predict communication time, then measure it
#
# Notebook 01 counted what a collective sends. That count becomes a **time** once you know two
# numbers per link: how long any message takes to get going, and how many bytes per second
# flow once it does. With those two numbers you can say, before running anything, whether a
# ring or a tree is faster for a gradient of a given size, how much a second node costs, and
# which way of splitting a model over 32 GPUs wastes the least time on communication.
#
# **What you will build**
#
# 1. The best number of pieces for a pipelined chain, the $\alpha$-$\beta$ time of recursive
#    halving and doubling (the ring and the tree are given), and the message size where ring
#    overtakes tree.
# 2. Algorithm bandwidth and bus bandwidth: the two numbers every benchmark prints.
# 3. Measurements on the machine you run this on: `dist.all_reduce` and a send/recv ring on
#    gloo ranks, a least-squares fit of $\alpha$ and $\beta$, and the fitted model against
#    sizes it never saw.
# 4. Two kinds of links: GPUs in a node on a fast one, nodes on a slow one. A flat ring against
#    a hierarchical all-reduce.
# 5. A per-iteration analyzer for a transformer split by data, tensor and pipeline parallelism,
#    and the cheapest layout that fits in memory.
#
# **How to use this notebook.** As in 01: replace each `_____` with code (the comment after it,
# `# [n] ...`, is a hint for blank *n*), run the cell, then the check below it, which prints
# what your function computed and a ✓ when it works. The cell after each check holds the hidden
# tests (press **Validate** to run them all). Every other cell is locked.
#
# **Units.** Sizes are in bytes, times in seconds, bandwidths in bytes per second. GB means
# $10^9$ bytes (as in "a 50 GB/s link"); MiB means $2^{20}$ bytes (as in memory sizes).

# %%
import math
import os

import numpy as np
import torch
import torch.distributed as dist

from distlab.cost_models import (
    GB,
    MiB,
    copy_bandwidth,
    explore_layouts,
    human_bytes,
    human_seconds,
    measure,
    show_allreduce_costs,
    show_fit,
    show_iteration_costs,
    show_message_cost,
    show_topology,
)
from distlab.challenge import race, show_race

# %% [markdown]
# ## 1. One message: latency, then bandwidth
#
# Sending one message of $n$ bytes over a link takes
#
# $$t(n) = \alpha + \frac{n}{B} = \alpha + \beta\, n$$
#
# * $\alpha$ (seconds) is the **latency**: the cost of any message at all, however small
#   (software on both ends, the trip across the wire). A few microseconds between GPUs.
# * $B$ (bytes/s) is the **bandwidth**, and $\beta = 1/B$ (seconds per byte) its inverse.
#
# Small messages are all latency, large ones all bandwidth; the two terms are equal at
# $n = \alpha B$. A collective is a sequence of **steps**; in each step every rank sends at
# most one message and receives at most one (one link, one message at a time each way), and
# the ranks send at the same time, so a step costs one message time. An algorithm that takes
# $S$ steps of $m$ bytes costs $S\,(\alpha + m/B)$: to know its time, count its steps and the
# bytes of one step.
#
# A cost function `f(nbytes, n, alpha, bw)` written this way can be asked for its two counts
# back, and the checks below do that to show you what the functions count: with $\alpha = 1$
# and an infinite bandwidth it returns its number of steps; with $\alpha = 0$ and a bandwidth
# of 1 byte/s it returns the bytes of all its steps added up, the bytes that cross links one
# after another on the way to the result (its **critical path**). For the ring of section 2
# that is also what every rank sends; in a tree no rank sends that much, the steps are taken
# by different ranks.

# %%
show_message_cost(alpha=5e-6, bw=10 * GB)


def counts(f, nbytes, n):
    """(steps, bytes on the critical path) of the cost function f for nbytes over n ranks."""
    return f(nbytes, n, 1.0, math.inf), f(nbytes, n, 0.0, 1.0)


# %% [markdown]
# ## 2. Ways to all-reduce $M$ bytes over $N$ ranks
#
# Every rank holds a vector of $M$ bytes; at the end every rank must hold the sum of all $N$
# vectors. In each step a rank sends at most one message and receives at most one.
#
# Three algorithms you know from notebook 01 are given as cost functions:
#
# * **Ring.** Each rank cuts its vector into $N$ chunks; a reduce-scatter of $N-1$ steps and
#   an all-gather of $N-1$ steps, one chunk per rank per step.
# * **Binomial tree.** A reduce to a root, then a broadcast from it, each taking the
#   $\lceil \log_2 N \rceil$ steps of notebook 01's binomial tree (one send per rank per step);
#   a partial sum travels whole.
# * **All to one.** Every rank sends its vector to rank 0, which sends the sum back to each;
#   rank 0 has one link, so it takes in one message at a time and sends one at a time.

# %% drill="allreduce_time_ring"
def allreduce_time_ring(nbytes, n, alpha, bw):
    """Seconds for a ring all-reduce of `nbytes` bytes over `n` ranks, on links of latency
    `alpha` (s) and bandwidth `bw` (bytes/s)."""
    steps = 2 * (n - 1)  # the reduce-scatter's n - 1 steps, then the all-gather's
    chunk = nbytes / n  # each step, every rank passes one chunk to its right
    return steps * (alpha + chunk / bw)


def allreduce_time_tree(nbytes, n, alpha, bw):
    """Seconds for a binomial-tree all-reduce (reduce, then broadcast) of `nbytes` bytes over
    `n` ranks."""
    depth = math.ceil(math.log2(n))  # steps up the tree, and as many down it
    return 2 * depth * (alpha + nbytes / bw)  # a partial sum travels whole


def allreduce_time_one(nbytes, n, alpha, bw):
    """Seconds for an all-reduce through rank 0 (everyone sends to it, it sends the sum back)."""
    messages_in = messages_out = n - 1  # one after another over rank 0's link
    return (messages_in + messages_out) * (alpha + nbytes / bw)


# %% [markdown]
# **A pipelined chain.** The tree sends the whole vector in every step. Libraries cut a large
# message into pieces instead and keep every link busy. Line the ranks up,
# $0 - 1 - \dots - (N-1)$, and cut every vector into $k$ equal pieces (`pieces`).
#
# * The **reduce** runs along the line towards rank $N-1$. Rank 0 sends its piece 1 to rank 1.
#   A rank that has received piece $j$ from its left adds its own piece $j$ and sends the sum on
#   to its right, one piece per step, while the next piece arrives from its left.
# * When rank $N-1$ holds every piece summed, the **broadcast** runs the other way: the pieces
#   travel back down the line to rank 0, in the same manner.
#
# Its cost function is given: the first piece takes $N-1$ steps to reach the far end, and the
# others follow one a step, in each direction.

# %%
def allreduce_time_chain(nbytes, n, alpha, bw, pieces):
    """Seconds for a pipelined all-reduce along a chain of `n` ranks (a reduce towards the last
    rank, then a broadcast back from it) of `nbytes` bytes cut into `pieces` equal pieces."""
    if n == 1:
        return 0.0
    steps = 2 * (n - 1 + pieces - 1)  # each way: the first piece crosses, the others follow
    return steps * (alpha + nbytes / pieces / bw)


print("64 MiB on 8 ranks, 10 GB/s and 1 µs: ring "
      f"{human_seconds(allreduce_time_ring(64 * MiB, 8, 1e-6, 10 * GB))}, tree "
      f"{human_seconds(allreduce_time_tree(64 * MiB, 8, 1e-6, 10 * GB))}; chain in "
      + ", ".join(f"{k} pieces: {human_seconds(allreduce_time_chain(64 * MiB, 8, 1e-6, 10 * GB, k))}"
                  for k in (1, 16, 256, 4096)))

# %% [markdown]
# **How many pieces?** (your turn) The line above shows the chain's time falling as the pieces
# multiply, then rising again. For a given message, line and link there is one number of pieces
# that makes the chain fastest. Find it from the cost function, without trying numbers: write
# the chain's time as a function of $k$ (treat $k$ as a real number) and find the $k$ where it
# stops falling. The code after the blank takes the better of the two whole numbers around
# yours, and never fewer than one piece.

# %% solution="chain_best_pieces"
def chain_best_pieces(nbytes, n, alpha, bw):
    """The whole number of pieces that makes allreduce_time_chain fastest for `nbytes` bytes on
    `n` ranks, links of latency `alpha` (s) and bandwidth `bw` (bytes/s)."""
    if n == 1:
        return 1  # nothing to send: any number will do
    best = math.sqrt((n - 2) * nbytes / (alpha * bw))  # BLANK the k where the chain's time stops falling # ACCEPT `((n - 2) * nbytes / (alpha * bw)) ** 0.5` `math.sqrt((n - 2) * nbytes * (1 / bw) / alpha)` `math.sqrt((n - 2) * nbytes // (alpha * bw))` # REJECT `math.sqrt(n * nbytes / (alpha * bw))` # REJECT `math.sqrt((n - 1) * nbytes / (alpha * bw))` `math.sqrt(nbytes / (alpha * bw))` `(n - 2) * nbytes / (alpha * bw)` `nbytes / (alpha * bw)`
    around = {max(1, math.floor(best)), max(1, math.ceil(best))}
    return min(around, key=lambda k: allreduce_time_chain(nbytes, n, alpha, bw, k))


# %%
print(f"{'N':>4} {'message':>9} {'your k':>8} {'time with k - 1':>16} {'k':>10} {'k + 1':>10}")
for n, nbytes in ((2, 1 * MiB), (3, 64 * 1024), (8, 1 * MiB), (8, 64 * MiB), (64, 64 * MiB),
                  (512, 4 * GB)):
    k = chain_best_pieces(nbytes, n, 1e-6, 10 * GB)
    assert isinstance(k, int) and k >= 1, f"N = {n}: {k!r} is not a whole number of pieces"
    times = [allreduce_time_chain(nbytes, n, 1e-6, 10 * GB, j) if j >= 1 else math.inf
             for j in (k - 1, k, k + 1)]
    print(f"{n:>4} {human_bytes(nbytes):>9} {k:>8} "
          + " ".join(f"{human_seconds(t) if t < math.inf else '-':>10}" for t in times))
    assert times[1] <= min(times[0], times[2]), f"N = {n}, {human_bytes(nbytes)}: " \
        f"{k} pieces is not where the time stops falling"
print("✓ chain_best_pieces: no neighbouring number of pieces is faster")

# %% tests="chain_best_pieces_tests" points=1
# Hidden tests (1 point): 1 to 1000 ranks, random sizes and links, up to millions of pieces.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(chain_best_pieces)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** Each piece pays the latency once per step, so more pieces mean more latency; but the
# line fills with smaller pieces, so less of the message waits in sequence. The two pull in
# opposite directions, and the best number of pieces is where they balance. With one piece the
# chain is as slow as all to one; with its best number it comes close to the ring on large
# messages. NCCL runs its broadcast and reduce as
# such a pipelined chain along its ring, and its trees pipeline pieces the same way (notebook
# 01's tree section), with a piece size tuned per link.
#
# The ring's own character: it is **bandwidth-optimal** (Patarasuk & Yuan 2009 show that no
# all-reduce can send less per rank) and pays a latency that grows with $N$.

# %% [markdown]
# **Recursive doubling, and recursive halving and doubling** (Thakur, Rabenseifner & Gropp 2005,
# "Optimization of Collective Communication Operations in MPICH"; MPICH's all-reduce uses them).
# Let $N$ be a power of two. In **recursive doubling** each step pairs rank $r$ with rank
# $r \oplus 2^k$ (its rank with bit $k$ flipped, $k = 0, 1, \dots$); the two swap their whole
# partial sums and both add. After step $k$ every rank holds the sum of $2^{k+1}$ ranks
# (given below).
#
# **Rabenseifner's algorithm** keeps those few exchanges but makes them smaller. Its
# reduce-scatter, by **recursive halving**: in the first exchange each pair splits the vector in
# two; rank $r$ keeps one half, sends its partner the other, and adds the half it receives to
# the half it kept. In the next exchange each rank does the same with the half it is now
# responsible for, with a partner twice as far away; and so on, until each rank holds one
# $N$-th of the vector, fully reduced. Its all-gather, by **recursive doubling**, runs the same
# exchanges in reverse order, each one doubling the finished piece a rank holds. Both phases
# take $\log_2 N$ exchanges (given); the messages change size from one exchange to the next, so
# add up what a rank sends.

# %%
def allreduce_time_recursive_doubling(nbytes, n, alpha, bw):
    """Seconds for a recursive-doubling all-reduce on `n` ranks, n a power of two."""
    if n & (n - 1):
        raise ValueError(f"recursive doubling as written here needs a power of two, not {n}")
    return (n.bit_length() - 1) * (alpha + nbytes / bw)


# %% solution="allreduce_time_halving_doubling" drill
def allreduce_time_halving_doubling(nbytes, n, alpha, bw):
    """Seconds for Rabenseifner's all-reduce (reduce-scatter by recursive halving, all-gather
    by recursive doubling) of `nbytes` bytes on `n` ranks, n a power of two."""
    if n & (n - 1):
        raise ValueError(f"recursive halving needs a power of two, not {n}")
    rounds = n.bit_length() - 1  # log2(n): the exchanges of one phase
    sent = 2 * sum(nbytes / 2**k for k in range(1, rounds + 1))  # BLANK bytes one rank sends in all, both phases # ACCEPT `2 * (n - 1) / n * nbytes` `2 * (nbytes - nbytes / n)` # REJECT `rounds * nbytes` `2 * rounds * nbytes` `2 * rounds * nbytes / 2` # REJECT `2 * nbytes` # REJECT `(n - 1) / n * nbytes` `sum(nbytes / 2**k for k in range(1, rounds + 1))`
    return 2 * rounds * alpha + sent / bw


# %%
print(f"{'N':>5} {'algorithm':>17} {'steps':>6} {'critical path, 1 MiB':>21}")
for n in (2, 8, 64):
    for name, f in (("ring", allreduce_time_ring), ("tree", allreduce_time_tree),
                    ("halving-doubling", allreduce_time_halving_doubling)):
        steps, sent = counts(f, 1 * MiB, n)
        print(f"{n:>5} {name:>17} {steps:>6g} {human_bytes(sent):>21}")
assert allreduce_time_halving_doubling(1 * MiB, 1, 1e-6, 10 * GB) == 0, "one rank: no exchange"
assert math.isclose(counts(allreduce_time_halving_doubling, 1 * MiB, 2)[1], 1 * MiB), \
    "two ranks: one exchange of half the vector in each phase"
sent = [counts(allreduce_time_halving_doubling, 1 * MiB, 2**k)[1] for k in range(1, 11)]
doubling = [counts(allreduce_time_recursive_doubling, 1 * MiB, 2**k)[1] for k in range(1, 11)]
assert all(a < b for a, b in zip(sent, sent[1:])), "more ranks: more exchanges, more bytes"
assert all(a < b for a, b in zip(sent[1:], doubling[1:])), "from 4 ranks on, the shrinking " \
    "messages should add up to less than recursive doubling's whole ones"
print("✓ allreduce_time_halving_doubling: nothing on one rank, half each way on two, more "
      "with every doubling, less than recursive doubling from 4 ranks on")

# %% tests="allreduce_time_halving_doubling_tests" points=1
# Hidden tests (1 point): 1 to 1024 ranks (powers of two), random sizes and links.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(allreduce_time_halving_doubling)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** The pieces shrink as fast as the groups grow. Compare the table's rows, steps and bytes, with the ring's and the tree's: few
# exchanges, and small ones, is what Rabenseifner's algorithm was built for.
#
# All six on one log-log plot, the chain cut into 64 pieces (move the slider to change $N$; the two
# recursive algorithms are drawn only where $N$ is a power of two). Small messages are all latency:
# few steps win. Large messages are all bandwidth: the algorithms that send each rank a fraction of
# $M$ per step win. The dotted line is where ring overtakes tree, from the function you write next
# (it is not drawn until that works).

# %%
def crossover_if_ready(n, alpha, bw):
    try:
        return ring_tree_crossover(n, alpha, bw)
    except Exception:  # not written yet: draw the curves without the line
        return None


show_allreduce_costs({"ring": allreduce_time_ring, "tree": allreduce_time_tree,
                      "all-to-one": allreduce_time_one,
                      "chain, 64 pieces": lambda m, n, a, b: allreduce_time_chain(m, n, a, b, 64),
                      "recursive doubling": allreduce_time_recursive_doubling,
                      "halving-doubling": allreduce_time_halving_doubling},
                     alpha=1e-6, bw=10 * GB, crossover=crossover_if_ready)

# %% [markdown]
# ## 3. Where the ring overtakes the tree
#
# Each algorithm's time is a straight line in $M$: a fixed part (what an empty message costs) plus a
# part per byte. The code below asks the ring's and the tree's functions for both parts. Find the
# size above which the ring is faster; and say when there is no such size, because the ring is never
# slower whatever the size: then return `None` (the blank may take several lines). Try
# $N = 1, 2, 3, 4$ on paper first.

# %% solution="ring_tree_crossover"
def ring_tree_crossover(n, alpha, bw):
    """The message size (bytes) above which a ring all-reduce over `n` ranks is faster than a
    binomial-tree one; None if the ring is never slower."""
    ring_fixed = allreduce_time_ring(0.0, n, alpha, bw)  # seconds of an empty message
    tree_fixed = allreduce_time_tree(0.0, n, alpha, bw)
    ring_per_byte = allreduce_time_ring(1.0, n, 0.0, bw)  # seconds per byte, latency left out
    tree_per_byte = allreduce_time_tree(1.0, n, 0.0, bw)
    return None if ring_fixed <= tree_fixed else (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)  # BLANK `return None if ring_fixed <= tree_fixed else (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)` the size where the ring starts to win, or None # ACCEPT `return None if n <= 3 else (tree_fixed - ring_fixed) / (ring_per_byte - tree_per_byte)` `return (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte) if ring_fixed > tree_fixed else None` # REJECT `return None if ring_fixed < tree_fixed else (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)` `return (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)` `return None if n == 1 else (ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)` `return None if ring_fixed <= tree_fixed else (ring_fixed - tree_fixed) / (ring_per_byte - tree_per_byte)` `return None if ring_fixed <= tree_fixed else (ring_fixed - tree_fixed) / tree_per_byte`


# %%
for n in (1, 2, 3, 4, 8, 16, 1024):
    m = ring_tree_crossover(n, 1e-6, 10 * GB)
    if m is None:
        print(f"  N = {n:4d}: no crossover")
        continue
    ring, tree = allreduce_time_ring(m, n, 1e-6, 10 * GB), allreduce_time_tree(m, n, 1e-6,
                                                                              10 * GB)
    print(f"  N = {n:4d}: ring faster above {human_bytes(m):>10}; there ring "
          f"{human_seconds(ring)}, tree {human_seconds(tree)}")
    assert math.isclose(ring, tree, rel_tol=1e-9), f"N = {n}: at your crossover ring and " \
        "tree should take the same time"
    assert allreduce_time_ring(10 * m, n, 1e-6, 10 * GB) < allreduce_time_tree(
        10 * m, n, 1e-6, 10 * GB), f"N = {n}: above your crossover the ring should be faster"
assert ring_tree_crossover(8, 1e-6, 10 * GB) is not None, "8 ranks: the tree wins small " \
    "messages, so there is a crossover"
print("✓ ring_tree_crossover: ring and tree take the same time there, the ring wins above")

# %% tests="ring_tree_crossover_tests" points=1
# Hidden tests (1 point): 1 to 1000 ranks, random alpha and bandwidth.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_tree_crossover)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** The ring pays latency, the tree pays bytes: two straight lines in $M$, which cross
# once or not at all. **Tree for small messages, ring for large ones**, and the crossover grows
# with $\alpha B$, and with $N$ over the long run (the ring's steps grow like $N$, the tree's
# like $\lceil \log_2 N \rceil$), though not at every step: it falls just past each power of two
# (0.8 $\alpha B$ at $N = 4$, 0.45 $\alpha B$ at $N = 5$), where the tree takes one more step.
#
# MPICH picks recursive doubling for short messages and Rabenseifner's algorithm for long ones
# (Thakur, Rabenseifner & Gropp 2005). The model hides what the ring gains in practice: it talks
# only to its neighbours, while the exchanges of halving-doubling pair ranks up to $N/2$ apart,
# whose messages cross more links and share them with others; a number of ranks that is not a
# power of two costs halving-doubling extra steps (the paper first folds the surplus ranks into
# a power of two); and a ring is easily pipelined.
#
# Real libraries refine this picture. NCCL's tree is a *double binary tree* that cuts the
# message into pieces and pipelines them down the tree, so its bandwidth cost is close to the
# ring's rather than whole messages at every step, and NCCL picks among ring, tree and other
# algorithms (NVLS, CollNet) with its own tuned model of each link. The model above explains
# *why* such a choice exists; it does not predict NCCL's exact thresholds.

# %% [markdown]
# ## 4. Algorithm bandwidth and bus bandwidth
#
# A benchmark measures the time $t$ of a collective on $S$ bytes (the full vector: what an
# all-reduce reduces, what an all-gather gathers, what a reduce-scatter starts from) and prints
# two bandwidths (the definitions of NVIDIA's `nccl-tests`, in its `doc/PERFORMANCE.md`):
#
# * **algbw** $= S / t$: how fast the collective gets through the data.
# * **busbw** $=$ algbw $\times$ factor, where the factor is how many bytes each rank must send over
#   its link per byte of $S$, with the best algorithm. For an all-reduce that is the ring's count
#   (the code asks `allreduce_time_ring` for it). In an all-gather each rank starts with one block
#   of $S/N$ bytes and must end with all $N$ blocks; a reduce-scatter and an all-to-all send as much
#   as an all-gather (an all-to-all sends everything except the block a rank keeps for itself). A
#   broadcast or a reduce passes every byte over each link once (pipelined): factor 1.

# %% solution="bus_bandwidth"
def bus_bandwidth(nbytes, seconds, n, collective):
    """(algbw, busbw) in bytes/s of `collective` on `nbytes` bytes over `n` ranks that took
    `seconds`. collective: "all_reduce", "all_gather", "reduce_scatter", "alltoall",
    "broadcast" or "reduce"."""
    algbw = nbytes / seconds
    if collective == "all_reduce":
        factor = counts(allreduce_time_ring, 1.0, n)[1]  # the ring's bytes per byte of data
    elif collective in ("all_gather", "reduce_scatter", "alltoall"):
        factor = (n - 1) / n  # BLANK bytes a rank sends per byte of data # ACCEPT `1 - 1 / n` `counts(allreduce_time_ring, 1.0, n)[1] / 2` # REJECT `1 / n` # REJECT `n / (n - 1)` `2 * (n - 1) / n` `n - 1` `1.0`
    elif collective in ("broadcast", "reduce"):
        factor = 1.0
    else:
        raise ValueError(f"unknown collective {collective!r}")
    return algbw, algbw * factor


# %%
print("1 GB in 50 ms (algbw 20 GB/s); busbw:")
for n in (2, 8, 64):
    shown = "  ".join(f"{collective} {bus_bandwidth(1 * GB, 0.05, n, collective)[1] / GB:5.2f}"
                      for collective in ("all_reduce", "all_gather", "broadcast"))
    print(f"  N = {n:2d}: {shown} GB/s")
assert math.isclose(bus_bandwidth(1 * GB, 0.05, 8, "all_reduce")[1], 35 * GB)
assert bus_bandwidth(1 * GB, 0.05, 1, "all_gather")[1] == 0, "one rank sends nothing"
gathers = [bus_bandwidth(1 * GB, 0.05, n, "all_gather")[1] for n in range(1, 1025)]
assert all(a < b < 20 * GB for a, b in zip(gathers, gathers[1:])), "an all-gather: each rank " \
    "sends less than the whole vector, and more of it the more ranks there are"
assert math.isclose(gathers[-1], 20 * GB, rel_tol=1e-3), "an all-gather on 1024 ranks: a rank " \
    "sends almost the whole vector"
print("a ring all-reduce at full link speed (50 GB/s), as allreduce_time_ring times it:")
for n in (2, 8, 64):
    t = allreduce_time_ring(10 * GB, n, 0.0, 50 * GB)
    algbw, busbw = bus_bandwidth(10 * GB, t, n, "all_reduce")
    print(f"  N = {n:2d}: algbw {algbw / GB:5.1f} GB/s, busbw {busbw / GB:5.1f} GB/s")
    assert math.isclose(busbw, 50 * GB), f"N = {n}: busbw should be the link's 50 GB/s"
print("✓ bus_bandwidth: the all-gather's busbw grows with N below algbw, and a ring at full "
      "speed shows the link's 50 GB/s")

# %% tests="bus_bandwidth_tests" points=1
# Hidden tests (1 point): every collective, 1 to 64 ranks, random sizes and times.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(bus_bandwidth)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** algbw depends on $N$: the ring all-reduce above drives every
# link at full speed, yet its algbw falls towards half the link's bandwidth as $N$ grows.
# busbw takes the algorithm's traffic out, so on a good implementation it stays close to the
# link's bandwidth whatever $N$ is: it is the number to compare with the hardware's datasheet,
# and across cluster sizes.

# %% [markdown]
# ## 5. Measured here
#
# Time for real numbers. Below, gloo ranks on this machine all-reduce float32 tensors of 4 bytes
# to 64 MiB, with `dist.all_reduce` and with the send/recv ring of notebook 01 (given here, with
# its schedule written as "pass on what you just received"). Each size is run several times
# after a warm-up call; a call is as slow as its slowest rank. We keep the lower quartile of the
# calls: other processes on this machine now and then take a core for milliseconds, and that is
# not the collective's time. We also run `dist.all_reduce` on 4 ranks: the cell prints how many
# cores this process may use (`os.sched_getaffinity`); with fewer than 4, the 4 ranks are
# **oversubscribed**, and a rank waiting for a message may not even be running when it arrives.
# The cell also times one core copying a 64 MiB tensor (`copy_bandwidth`), a yardstick for the
# bandwidth we will fit. The whole sweep takes about 10 seconds.

# %%
def ring_all_reduce(tensor):
    """Sum `tensor` over the ranks of the default group, in place, with a ring of send/recv."""
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor, n)
    right, left = (rank + 1) % n, (rank - 1) % n
    inbox = torch.empty_like(chunks[0])
    mine = rank  # the chunk this rank passes on next
    for phase in ("reduce-scatter", "all-gather"):
        for _ in range(n - 1):
            incoming = (mine - 1) % n  # what the left neighbour passes on in this step
            request = dist.isend(chunks[mine], dst=right)
            if phase == "reduce-scatter":
                part = inbox[: chunks[incoming].numel()]
                dist.recv(part, src=left)
                chunks[incoming].add_(part)
            else:
                dist.recv(chunks[incoming], src=left)
            request.wait()
            mine = incoming  # pass on what just arrived
    return tensor


cores = len(os.sched_getaffinity(0))
print(f"{cores} CPU core(s) for our ranks: 4 ranks are "
      + ("oversubscribed" if cores < 4 else "one core each"))
copy_speed = copy_bandwidth()
print(f"one core copies memory at {copy_speed / GB:.1f} GB/s")
SIZES = [4 * 4**k for k in range(13)]  # 4 bytes to 64 MiB
records = measure({"all_reduce": None, "ring": ring_all_reduce}, SIZES, world_sizes=(2, 4),
                  only={"ring": (2,)})

# %% [markdown]
# The two largest messages, as bandwidths (with your `bus_bandwidth`):

# %%
for record in records:
    if record["nbytes"] >= 16 * MiB:
        algbw, busbw = bus_bandwidth(record["nbytes"], record["seconds"], record["n"],
                                     "all_reduce")
        print(f"{record['name']:>10} on {record['n']} ranks, {human_bytes(record['nbytes']):>8}:"
              f" {human_seconds(record['seconds']):>8}, algbw {algbw / GB:5.2f} GB/s, "
              f"busbw {busbw / GB:5.2f} GB/s")

# %% [markdown]
# ### Fitting $\alpha$ and $\beta$
#
# The ring model is $t = S\,\alpha + V\beta$, with $S$ its steps and $V$ the bytes a rank sends:
# linear in the two unknowns $\alpha$ and $\beta$. With $k$ measurements that is $k$ equations
# $A \begin{pmatrix}\alpha \\ \beta\end{pmatrix} \approx t$, where row $i$ of the $k \times 2$
# matrix $A$ holds $S$ and $V$ for size $M_i$ (the code asks `allreduce_time_ring` for them). More
# equations than unknowns: `np.linalg.lstsq(A, t, rcond=None)` returns the least-squares solution
# first (then three diagnostics), the $(\alpha, \beta)$ that minimises $\sum_i e_i^2$, where $e_i$
# is equation $i$'s error in seconds. Multiplying equation $i$ (its row of $A$ and its $t_i$) by a
# number $w_i$ multiplies its error by $w_i$: the fit then minimises $\sum_i (w_i e_i)^2$ instead.
#
# The problem: our sizes span seven orders of magnitude, and so do the times, from about
# 100 µs to about 0.1 s. An error of 10 µs is nothing on the largest message and a tenth of the
# smallest one's time, yet plain least squares weighs it the same in both: the largest messages
# decide everything, and $\alpha$ can even come out negative. We want a fit in which a 10 %
# error counts the same at every size. Choose the weights.

# %% solution="fit_alpha_beta"
def fit_alpha_beta(nbytes, seconds, n):
    """Least-squares (alpha, beta) of the ring model from measurements of a ring all-reduce on
    `n` ranks: nbytes[i] bytes took seconds[i]. beta is in seconds per byte."""
    M = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    A = np.array([counts(allreduce_time_ring, m, n) for m in M])  # row i: (S, V) of size M[i]
    w = 1 / t  # BLANK how much each equation's error counts # ACCEPT `t ** -1` `np.reciprocal(t)` `1.0 / t` `2 / t` # REJECT `np.ones_like(t)` # REJECT `t` `1 / M` `1 / t**2` `1 / np.sqrt(t)` `M`
    (alpha, beta), *_ = np.linalg.lstsq(A * w[:, None], t * w, rcond=None)
    return float(alpha), float(beta)


# %%
alpha_true, bw_true = 50e-6, 2 * GB
sizes = 4.0 * 4.0 ** np.arange(13)  # 4 bytes to 64 MiB
exact = np.array([allreduce_time_ring(m, 4, alpha_true, bw_true) for m in sizes])
noisy = exact * np.random.default_rng(0).uniform(0.8, 1.2, len(exact))  # ±20 % everywhere
alpha, beta = fit_alpha_beta(sizes, exact, 4)
print(f"true:              alpha {human_seconds(alpha_true):>8}, 1/beta {bw_true / GB:.3g} GB/s")
print(f"exact times:       alpha {human_seconds(alpha):>8}, 1/beta {1 / beta / GB:.3g} GB/s")
assert math.isclose(alpha, alpha_true, rel_tol=1e-6) and math.isclose(beta * bw_true, 1,
                                                                      rel_tol=1e-6)
alpha, beta = fit_alpha_beta(sizes, noisy, 4)
errors = [allreduce_time_ring(m, 4, alpha, 1 / beta) / t - 1 for m, t in zip(sizes, noisy)]
print(f"±20 % noisy times: alpha {human_seconds(alpha):>8}, 1/beta {1 / beta / GB:.3g} GB/s; "
      f"relative error of the fit at 4 bytes {100 * errors[0]:+.0f} %, at 64 MiB "
      f"{100 * errors[-1]:+.0f} %")
assert abs(alpha / alpha_true - 1) < 0.2, f"alpha {alpha:.3g} s from ±20 % noise: the small " \
    "messages, where alpha shows, count for nothing in your fit"
assert abs(beta * bw_true - 1) < 0.2, beta
print("✓ fit_alpha_beta recovers alpha and beta, and the small messages count as much as the "
      "large")

# %% tests="fit_alpha_beta_tests" points=1
# Hidden tests (1 point): 2 to 8 ranks, random alpha and beta, 8 to 30 sizes, exact and noisy.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(fit_alpha_beta)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** With these weights the fit minimises *relative* errors: a 10 % error costs the same
# at 4 bytes as at 64 MiB, and $\alpha$ is decided by the small messages, where it shows. The
# noisy fit above printed how far off it is at both ends.
#
# Now fit the measurements, leaving every other size out of the fit, and see how well the model
# predicts the sizes it never saw.

# %%
held_out = SIZES[1::2]
fits = {}
for key in sorted({(r["name"], r["n"]) for r in records}, key=lambda k: (k[1], k[0])):
    used = [r for r in records if (r["name"], r["n"]) == key and r["nbytes"] not in held_out]
    fits[key] = fit_alpha_beta([r["nbytes"] for r in used], [r["seconds"] for r in used],
                               key[1])
    alpha, beta = fits[key]
    errors = {r["nbytes"]: allreduce_time_ring(r["nbytes"], key[1], alpha, 1 / beta)
              / r["seconds"] - 1
              for r in records if (r["name"], r["n"]) == key and r["nbytes"] in held_out}
    worst = max(errors, key=lambda size: abs(errors[size]))
    print(f"{key[0]:>10} on {key[1]} ranks: alpha {human_seconds(alpha):>8}, "
          f"1/beta {1 / beta / GB:.2f} GB/s ({copy_speed * beta:.1f} times slower than one "
          f"core's copy); error on held-out sizes: median "
          f"{100 * np.median(np.abs(list(errors.values()))):.0f} %, worst "
          f"{100 * errors[worst]:+.0f} % at {human_bytes(worst)}")
show_fit(records, fits, allreduce_time_ring, held_out=held_out)

# %% [markdown]
# What to read in the plot and the lines above it:
#
# * **How far off the model is.** Expect tens of percent on the sizes left out of the fit, and a
#   worst size off by much more. On the 2-core Linux machine this notebook was written on
#   (PyTorch 2.13, gloo), with other work running, `dist.all_reduce` on 2 ranks gave a median
#   of 14 % and a worst of 36 %, the send/recv ring a median of 53 % and a worst of 96 %; an
#   earlier run of the same sweep gave 33 % and 92 %. Two reasons. The measured curve is not a
#   straight line: messages that fit in the processor's caches move faster per byte than 64 MiB
#   ones, and the transport changes its behaviour with the size (socket buffers, gloo's choice
#   of algorithm), so one $\beta$ over-predicts the middle sizes and under-predicts the largest
#   (the error plot's arch). And on a machine with 2 cores, 2 ranks and the notebook's own
#   process compete for them: a message that arrives while its rank is not running waits
#   milliseconds, and the lower quartile of a few calls does not always remove that; the worst
#   errors of the ring, which runs many small send/recv calls, were such sizes.
# * **$\alpha$** came out between 60 and 150 µs per step on that machine: loopback TCP through
#   the operating system, and Python, far from the few microseconds of NVLink or InfiniBand.
# * **$1/\beta$** came out between 1.2 and 1.4 GB/s, while one core copied memory at 8 to 10 GB/s
#   (the line above prints both for this machine). A byte sent over loopback TCP is copied at
#   least twice (into the kernel's socket buffer and out of it), is added into the result on
#   arrival, and shares the cores with the other rank: a network transfer on one machine is
#   several times slower than a copy.
# * **Oversubscribed ranks.** On 4 ranks with fewer than 4 cores (2, when this was written),
#   small messages take milliseconds, and erratically: a rank waiting for a message is often not
#   running when it arrives, and waits for the operating system to give it a core again.
#   Oversubscribing the cores ruins latency far more than bandwidth, and no $\alpha$-$\beta$
#   line fits the points (see its error). Never benchmark with more busy ranks than cores.

# %% [markdown]
# ## 6. Two kinds of links: a flat ring or a hierarchy
#
# A cluster is $K$ nodes of $G$ GPUs. Inside a node the GPUs share a fast link (NVLink, hundreds
# of GB/s); between nodes each GPU has a network card (InfiniBand, tens of GB/s) and more
# latency. Below, a link is a pair `(alpha, bw)`, one for inside a node (`intra`) and one
# between nodes (`inter`), and each GPU has its own network card, so the GPUs of a node can all
# talk across nodes at the same time without sharing bandwidth.
#
# **A flat ring** (given) puts all $N = K G$ GPUs on one ring. Every step moves a chunk over
# every link of the ring at the same time, and the step is over only when the slowest transfer
# is: with more than one node, the slow link sets the pace of every step.

# %%
def flat_ring_time(nbytes, nodes, gpus_per_node, intra, inter):
    """Seconds for one ring all-reduce over every GPU of `nodes` nodes. intra, inter:
    (alpha, bw) of the links inside a node and between nodes."""
    alpha, bw = inter if nodes > 1 else intra
    return allreduce_time_ring(nbytes, nodes * gpus_per_node, alpha, bw)


INTRA, INTER = (3e-6, 300 * GB), (10e-6, 50 * GB)  # NVLink-class, 400 Gb/s per GPU
t = flat_ring_time(1 * GB, 4, 8, INTRA, INTER)
print(f"flat ring, 1 GB over 4 nodes x 8 GPUs: {human_seconds(t)}")

# %% [markdown]
# **A hierarchical all-reduce** keeps most of the traffic inside the nodes, in three phases:
#
# 1. **reduce-scatter inside each node** (a ring over its $G$ GPUs): afterwards GPU $g$ of each
#    node holds chunk $g$ of its node's sum;
# 2. **all-reduce across nodes**: GPU $g$ of every node combines what it holds with GPU $g$ of
#    the other nodes, by a ring through its own network card; the $G$ cards of a node all work
#    at once;
# 3. **all-gather inside each node**: the finished chunks spread back to every GPU.
#
# Write its time, all three phases (the blank may take several lines).

# %% solution="hierarchical_allreduce_time"
def hierarchical_allreduce_time(nbytes, nodes, gpus_per_node, intra, inter):
    """Seconds for a hierarchical all-reduce: reduce-scatter inside nodes, all-reduce across,
    all-gather inside."""
    G = gpus_per_node
    inside = allreduce_time_ring(nbytes, G, *intra); across = allreduce_time_ring(nbytes / G, nodes, *inter)  # BLANK `inside = allreduce_time_ring(nbytes, G, *intra); across = allreduce_time_ring(nbytes / G, nodes, *inter)` inside: phases 1 and 3 together; across: phase 2 # ACCEPT `across = allreduce_time_ring(nbytes / G, nodes, *inter); inside = 2 * (allreduce_time_ring(nbytes, G, *intra) / 2)` `inside = allreduce_time_ring(nbytes, gpus_per_node, intra[0], intra[1]); across = allreduce_time_ring(nbytes / gpus_per_node, nodes, inter[0], inter[1])` # REJECT `inside = allreduce_time_ring(nbytes, G, *intra); across = allreduce_time_ring(nbytes, nodes, *inter)` `inside = allreduce_time_ring(nbytes, G, *intra) / 2; across = allreduce_time_ring(nbytes / G, nodes, *inter)` `inside = allreduce_time_ring(nbytes / G, G, *intra); across = allreduce_time_ring(nbytes / G, nodes, *inter)` `inside = allreduce_time_ring(nbytes, G, *intra); across = allreduce_time_ring(nbytes / G, nodes * G, *inter)` `inside = allreduce_time_ring(nbytes, G, *intra); across = allreduce_time_ring(nbytes / nodes, nodes, *inter)`
    return inside + across


# %%
M = 1 * GB
flat = flat_ring_time(M, 4, 8, INTRA, INTER)
total = hierarchical_allreduce_time(M, 4, 8, INTRA, INTER)
in_nodes = hierarchical_allreduce_time(M, 1, 8, INTRA, INTER)  # one node: phases 1 and 3 only
slow_only = hierarchical_allreduce_time(M, 4, 8, (0.0, math.inf), INTER)  # free links inside
print(f"1 GB over 4 nodes x 8 GPUs: flat ring {human_seconds(flat)}")
print(f"  hierarchical {human_seconds(total)}: {flat / total:.2f}x faster than the flat ring")
print(f"    phases 1 and 3, inside the nodes: {human_seconds(in_nodes)}")
print(f"    phase 2, across the nodes:        {human_seconds(slow_only)} "
      f"({flat / slow_only:.1f}x less than the flat ring)")
assert math.isclose(in_nodes, 5.875333333e-3, rel_tol=1e-9), "one node of 8 GPUs: phases 1 and 3 " \
    "are all there is; count what they send"
assert math.isclose(hierarchical_allreduce_time(M, 4, 1, INTRA, INTER), 3.006e-2,
                    rel_tol=1e-9), "one GPU per node: nothing to do inside a node"
assert math.isclose(total, 9.685333333e-3, rel_tol=1e-9), f"4 x 8: got {total:.6g} s"
print("✓ hierarchical_allreduce_time: one node, one GPU per node, and 4 x 8 agree")

# %% tests="hierarchical_allreduce_time_tests" points=1
# Hidden tests (1 point): 1 to 8 nodes of 1 to 8 GPUs, random sizes and links.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(hierarchical_allreduce_time)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** The hierarchy keeps the heavy traffic on the fast links and puts every network card
# of a node to work in the slow phase. Read the check's lines:
#
# * **The slow phase alone** is about $G$ times cheaper than the flat ring, a bit more here
#   (10.3 with $G = 8$): the flat ring leaves each node through one card, while the hierarchy
#   shares the slow traffic among all $G$ cards of a node, on a shorter ring.
# * **The phases inside the nodes cost too**, and here more than the slow phase, even at
#   300 GB/s. So the whole hierarchy wins by 4.06, not by 10.3: it reaches the slow phase's
#   gain only when the fast link is so fast that the inside phases are free (try
#   `INTRA = (0.0, math.inf)`).
#
# Both over message size, with a third curve: $G$ flat rings at once, each over every GPU, each
# carrying $M/G$ and leaving each node through a different network card.
#
# * NCCL does not run one ring: it runs several rings at once (its *channels*), laid out so
#   that they leave each node through different cards. With one ring per card, each card
#   carries $2\frac{KG-1}{KG}\cdot\frac{M}{G}$ ($0.242\,M$ here, $K = 4$, $G = 8$), not much more
#   than a card carries in the hierarchy, so most of the hierarchy's bandwidth advantage is
#   gone. What is left
#   is latency: the flat rings take many more slow steps than the hierarchy, so the hierarchy
#   still wins small and medium messages (below about 110 MB with the links above). For larger
#   ones the flat rings win in this model: the hierarchy's phases inside the node come on top of
#   its slow phase, while a flat ring's fast links work during its slow steps. (The sketch also
#   lets the $G$ rings share each GPU's fast link for free; with these links that sharing would
#   cost the flat rings about a sixth.)
#
# What the gap really depends on: how many of a node's cards the flat algorithm keeps busy, the
# ratio of the two links' bandwidths, and the message size against $\alpha B$.

# %%
def flat_rings_per_card(nbytes, nodes, gpus_per_node, intra, inter):
    """gpus_per_node flat rings at once, each carrying 1/gpus_per_node of the data through
    its own network card."""
    return flat_ring_time(nbytes / gpus_per_node, nodes, gpus_per_node, intra, inter)


show_topology({"flat ring": flat_ring_time, "flat, one ring per card": flat_rings_per_card,
               "hierarchical": hierarchical_allreduce_time}, 4, 8, INTRA, INTER)

# %% [markdown]
# ## 7. One training iteration: data, tensor and pipeline parallelism
#
# A transformer of $L$ layers, hidden size $h$, sequence length $s$; it has about
# $\Psi = 12 L h^2$ parameters (4 $h^2$ in attention, 8 $h^2$ in the MLP); `model["params"]`
# holds a model's own count $\Psi$, embeddings included, and is the one to use.
# An iteration trains on a global batch of sequences, cut into **micro-batches** of $b$
# sequences. The cluster's $\mathrm{DP} \times \mathrm{TP} \times \mathrm{PP}$ GPUs split the
# work three ways:
#
# * **Pipeline parallelism (PP)** gives each of PP **stages** $L/\mathrm{PP}$ consecutive
#   layers. Micro-batches flow through the stages; at each boundary between stages, a
#   micro-batch's activations ($b \cdot s \cdot h$ values) go forward and their gradient comes
#   back.
# * **Tensor parallelism (TP)** splits every layer's weight matrices over TP GPUs (Megatron-LM,
#   Shoeybi et al. 2019; notebook 04 builds it). The TP GPUs of a group each hold a partial
#   result where a block of the layer ends: in the forward pass the attention block and the MLP
#   block each end with an all-reduce of their output, and in the backward pass each block needs
#   an all-reduce of the gradient of its input. Each such all-reduce carries one micro-batch's
#   $b \cdot s \cdot h$ values.
# * **Data parallelism (DP)** runs DP copies of that pipeline on different sequences; at the end
#   of the iteration each GPU all-reduces the gradients of the parameters **it** holds with the
#   GPUs that hold the same ones in the other copies.
#
# Values are 16-bit (2 bytes) on the wire. The boundaries between stages all work at the same
# time, so the pipeline's communication time is that of one boundary, the slowest.
#
# **Where the groups sit.** GPUs are numbered node by node (GPUs $0$ to $G-1$ in the first
# node), and a layout hands them out in Megatron's order: a GPU's TP rank varies fastest, then
# its DP rank, then its pipeline stage. A group whose span fits in a node talks over the fast
# link; otherwise the slow one sets its pace: `group_link(cluster, stride, size)` is the link of
# `size` GPUs spaced `stride` apart (a TP group's is `group_link(cluster, 1, tp)`, given).
#
# **Compute, and the bubble.** Forward and backward cost about 6 floating-point operations per
# parameter per token, so one micro-batch on one stage takes
# $6\,\Psi_\text{GPU}\, b s / F$ seconds on a GPU doing $F$ FLOP/s with $\Psi_\text{GPU}$
# parameters: a **stage time** (a forward and a backward). A stage works for one stage time per
# micro-batch. But a pipeline must fill and drain: the last stage has nothing to do until the
# first micro-batch has come forward through every stage before it, and the first stage has
# nothing left to do while the last micro-batch's backward is still on its way back to it. The
# time a stage spends waiting is the **bubble** (take a forward as long as a backward, and
# draw the timeline of 3 stages and 4 micro-batches if you are unsure).
#
# **Memory.** Training with Adam in mixed precision keeps 16 bytes per parameter: 2 for the 16-bit
# weight, 2 for its gradient, and 12 for the optimizer (a 32-bit master copy, Adam's $m$ and $v$)
# (ZeRO paper, Rajbhandari et al. 2020). On top of that, activations saved for the backward pass:
# $s\,b\,h\,(10 + 24/\mathrm{TP})$ bytes per layer per micro-batch (Korthikanti et al. 2022's
# formula for tensor parallelism without its attention-score term $5as/(h\,\mathrm{TP})$, $a$ the
# number of heads: a kernel that never stores the attention scores, such as FlashAttention, saves
# that term), for as many micro-batches as a stage holds at once: up to PP under a 1F1B schedule
# (notebook 05).
#
# Communication and compute are added up as if nothing overlapped: the analyzer gives an upper
# bound, good for comparing layouts.

# %%
def group_link(cluster, stride, size):
    """(alpha, bw) of a group of `size` GPUs spaced `stride` apart: the fast link if the group's
    span fits in one node, else the slow one (groups line up with the nodes' boundaries here:
    every size is a power of two, as the GPUs of a node are)."""
    return cluster["intra"] if stride * size <= cluster["gpus_per_node"] else cluster["inter"]


# %% solution="iteration_costs"
def iteration_costs(model, cluster, dp, tp, pp):
    """One GPU's costs per training iteration under layout dp x tp x pp: seconds of compute,
    bubble, and DP, TP and PP communication; memory in bytes, and whether it fits."""
    L, h, s, b = model["layers"], model["hidden"], model["seq"], model["micro_batch"]
    m = model["global_batch"] // (dp * b)  # micro-batches per pipeline per iteration
    nbytes = 2  # 16-bit values on the wire
    stage_layers = L // pp  # layers in this GPU's pipeline stage
    params_per_gpu = model["params"] / (tp * pp)  # parameters one GPU holds
    activation = b * s * h * nbytes  # bytes of one layer's output for one micro-batch

    grad_bytes = params_per_gpu * nbytes  # the gradient this GPU all-reduces
    dp_time = allreduce_time_ring(grad_bytes, dp, *group_link(cluster, tp, dp))  # BLANK `group_link(cluster, tp, dp)` the link of this GPU's DP group # SHAPE `the stride and size are the idea; a call of three names matches any such call, here counts(f, nbytes, n)` # ACCEPT `group_link(cluster, dp, tp)` `group_link(cluster, 1, tp * dp)` `group_link(cluster, stride=tp, size=dp)` # REJECT `group_link(cluster, 1, dp)` # REJECT `group_link(cluster, tp * dp, dp)` `group_link(cluster, dp, 1)` `cluster["intra"]` `cluster["inter"]`

    tp_count = 4 * stage_layers * m  # BLANK all-reduces per iteration on this GPU # ACCEPT `4 * m * L / pp` # REJECT `4 * L * m` `4 * stage_layers` # REJECT `2 * stage_layers * m`
    tp_time = tp_count * allreduce_time_ring(activation, tp, *group_link(cluster, 1, tp))

    pp_messages = 2 * m if pp > 1 else 0  # over one stage boundary: forward and back
    alpha, bw = group_link(cluster, tp * dp, pp)  # BLANK the link of the slowest stage boundary # ACCEPT `group_link(cluster, dp * tp, pp)` `group_link(cluster, 1, tp * dp * pp)` `group_link(cluster, pp, tp * dp)` # REJECT `group_link(cluster, tp, pp)` # REJECT `group_link(cluster, tp * dp, 2)` `group_link(cluster, 1, pp)` `group_link(cluster, dp, pp)` `cluster["intra"]`
    pp_time = pp_messages * (alpha + activation / bw)

    stage = 6 * params_per_gpu * b * s / cluster["flops"]  # one micro-batch on one stage (s)
    bubble = (pp - 1) * stage  # BLANK seconds each stage sits idle # REJECT `pp * stage` # REJECT `(pp - 1) * stage / m` # REJECT `(pp - 1) * m * stage`
    states = 16 * params_per_gpu  # weights, gradients and Adam states
    memory = states + min(m, pp) * stage_layers * s * b * h * (10 + 24 / tp)
    return {"compute": m * stage, "bubble": bubble, "dp": dp_time, "tp": tp_time,
            "pp": pp_time, "memory": memory, "fits": memory <= cluster["memory"]}


# %% [markdown]
# The check uses a small model: 8 layers, $h = 1024$ (so $\Psi \approx 101$ M parameters),
# sequences of 1024, a global batch of 16 sequences in micro-batches of 1. First on one node of
# 8 GPUs, where every group is on the fast link; then on 2 nodes of 4 GPUs, where it prints
# which of your groups pay the slow link (their time changes when the slow link is made fast).

# %%
SMALL = {"layers": 8, "hidden": 1024, "seq": 1024, "global_batch": 16, "micro_batch": 1,
         "params": 12 * 8 * 1024**2}
NODE = {"nodes": 1, "gpus_per_node": 8, "intra": INTRA, "inter": INTER, "memory": 80 * GB,
        "flops": 400e12}
costs = iteration_costs(SMALL, NODE, 2, 2, 2)
for key, value in costs.items():
    shown = value if key == "fits" else human_bytes(value) if key == "memory" \
        else human_seconds(value)
    print(f"{key:>8}: {shown}")
expected = {"compute": 3.09237645312e-3, "bubble": 3.8654705664e-4, "dp": 1.7377216e-4,
            "tp": 1.66278485333e-3, "pp": 1.5984810667e-4, "memory": 587202560.0}
for key, value in expected.items():
    assert math.isclose(costs[key], value, rel_tol=1e-9), f"{key}: {costs[key]:.6g}, " \
        f"expected {value:.6g}"
alone = iteration_costs(SMALL, NODE, 1, 1, 1)
assert alone["dp"] == alone["tp"] == alone["pp"] == alone["bubble"] == 0, \
    "one GPU: no communication and no bubble"
TWO = {**NODE, "nodes": 2, "gpus_per_node": 4}
slow_groups = {}
for layout in ((2, 2, 2), (4, 2, 1), (1, 2, 4), (1, 4, 2)):
    slow = iteration_costs(SMALL, TWO, *layout)
    fast = iteration_costs(SMALL, {**TWO, "inter": TWO["intra"]}, *layout)
    slow_groups[layout] = [key.upper() for key in ("dp", "tp", "pp") if slow[key] != fast[key]]
    print("dp={} tp={} pp={} on 2 nodes of 4: ".format(*layout)
          + (", ".join(slow_groups[layout]) or "no group") + " on the slow link")
assert slow_groups == {(2, 2, 2): ["PP"], (4, 2, 1): ["DP"], (1, 2, 4): ["PP"],
                       (1, 4, 2): ["PP"]}, "some group's link does not follow from where " \
    "its GPUs sit"
print("✓ iteration_costs on dp=2, tp=2, pp=2 matches, one GPU alone pays only compute, and on "
      "2 nodes the groups that span both pay the slow link")

# %% tests="iteration_costs_tests" points=4
# Hidden tests (4 points): random models, clusters of 1 to 4 nodes, every layout.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(iteration_costs)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** TP's all-reduces are small but many, and each pays the link's latency: that is why
# TP is kept inside a node, and why the order puts TP ranks next to each other. A DP group or a
# pipeline that spans nodes pays the slow link for all its traffic, however few of its GPUs sit
# across the boundary. The bubble is a pipeline filling and draining; in seconds it does not
# shrink with more micro-batches, its share of the iteration does (GPipe, Huang et al. 2019;
# notebook 05 schedules it).

# %% [markdown]
# ## 8. The cheapest layout that fits
#
# A 13-billion-parameter model (40 layers, $h = 5120$, sequences of 2048, a global batch of 256
# sequences in micro-batches of 1) on 4 nodes of 8 GPUs with 80 GB each. Its weights, gradients
# and Adam states alone take 16 bytes $\times$ 12.6 G $\approx$ 201 GB: no single GPU can hold
# them, so DP alone is out. Which split is fastest among those that fit?
#
# `layouts` lists every split that uses all 32 GPUs and divides the model evenly. Pick TP and PP
# with the menus (DP is what is left): the bars show every layout's iteration, yours outlined,
# the ones that do not fit hatched. Find the fastest one that fits before you read on: the
# next cell names it.

# %%
def layouts(model, cluster):
    """Every (dp, tp, pp) that uses all the cluster's GPUs and divides the model evenly."""
    gpus = cluster["nodes"] * cluster["gpus_per_node"]
    found = []
    for tp in range(1, gpus + 1):
        for pp in range(1, gpus // tp + 1):
            dp = gpus // (tp * pp)
            if (dp * tp * pp == gpus and model["hidden"] % tp == 0
                    and model["layers"] % pp == 0
                    and model["global_batch"] % (dp * model["micro_batch"]) == 0):
                found.append((dp, tp, pp))
    return found


def iteration_time(costs):
    """Seconds per iteration: compute, bubble and communication, none overlapped."""
    return costs["compute"] + costs["bubble"] + costs["dp"] + costs["tp"] + costs["pp"]


GPT13B = {"layers": 40, "hidden": 5120, "seq": 2048, "global_batch": 256, "micro_batch": 1,
          "params": 12 * 40 * 5120**2}
CLUSTER = {"nodes": 4, "gpus_per_node": 8, "intra": INTRA, "inter": INTER, "memory": 80 * GB,
           "flops": 400e12}
explore_layouts(lambda dp, tp, pp: iteration_costs(GPT13B, CLUSTER, dp, tp, pp),
                layouts(GPT13B, CLUSTER), CLUSTER["memory"])

# %% [markdown]
# Now let the computer search (given): the fastest layout among those that fit, or `None` if
# none does.

# %%
def cheapest_layout(model, cluster):
    """The (dp, tp, pp) with the shortest iteration_time among the layouts that fit in memory;
    None if none fits."""
    race = [(iteration_time(costs), (dp, tp, pp)) for dp, tp, pp in layouts(model, cluster)
            if (costs := iteration_costs(model, cluster, dp, tp, pp))["fits"]]
    return min(race)[1] if race else None  # tuples compare by their first item: the time


dp, tp, pp = choice = cheapest_layout(GPT13B, CLUSTER)
costs = iteration_costs(GPT13B, CLUSTER, dp, tp, pp)
print(f"cheapest that fits: dp={dp} tp={tp} pp={pp}, "
      f"{human_seconds(iteration_time(costs))} per iteration, "
      f"{costs['memory'] / GB:.1f} GB per GPU")
smaller = cheapest_layout(GPT13B, {**CLUSTER, "memory": 60 * GB})
print("with 60 GB per GPU: " + ("nothing fits" if smaller is None
                                else "dp={} tp={} pp={}".format(*smaller)))

# %% [markdown]
# Every layout side by side, cheapest first among those that fit:

# %%
rows = sorted(((f"dp{dp} tp{tp} pp{pp}", iteration_costs(GPT13B, CLUSTER, dp, tp, pp))
               for dp, tp, pp in layouts(GPT13B, CLUSTER)),
              key=lambda row: (not row[1]["fits"], iteration_time(row[1])))
print(f"{'layout':>16} {'iteration':>10} {'compute':>9} {'bubble':>9} {'DP':>9} {'TP':>9} "
      f"{'PP':>9} {'memory':>9}")
for label, c in rows:
    print(f"{label:>16} {human_seconds(iteration_time(c)):>10} "
          + " ".join(f"{human_seconds(c[k]):>9}" for k in ("compute", "bubble", "dp", "tp", "pp"))
          + f" {c['memory'] / GB:7.1f} GB" + ("" if c["fits"] else "  does not fit"))
show_iteration_costs(rows, CLUSTER["memory"], highlight="dp{} tp{} pp{}".format(*choice))


# %% [markdown]
# Read the bars (compute, the same 3.09 s for every layout here, is left out of them):
#
# * TP pays many small all-reduces: cheap on NVLink for small TP, ruinous once a TP group
#   spans two nodes (TP 16 and 32).
# * PP pays little communication (one activation each way per micro-batch) but a bubble that
#   grows with the number of stages.
# * DP pays one big all-reduce per iteration, smaller when TP and PP have already divided the
#   parameters.
# * Memory, not speed, rules out the layouts that split the model least.
#
# ## Wrap-up
#
# * A step costs $\alpha + m/B$; an algorithm's time is its steps times that, so counting steps
#   and bytes per step is all a cost model needs.
# * Pipelining trades latency for bandwidth: more pieces, less waiting in sequence, more
#   messages; the best number of pieces balances the two.
# * The ring sends the least and takes the most steps; the binomial tree the reverse;
#   halving-doubling keeps the tree's few exchanges and shrinks their messages, on powers of
#   two. Tree for small messages, ring for large.
# * busbw = algbw $\times$ the algorithm's bytes per byte of data: the number to compare with a
#   link.
# * Two numbers fitted to a dozen measurements predict this machine's all-reduce within tens of
#   percent at most sizes, worse where the transport changes behaviour or the cores are shared.
# * Keep the heavy traffic on the fast links and every network card busy: hierarchical
#   all-reduce or one ring per card, TP inside a node; a hierarchy's gain is bounded by its own
#   phases inside the node.
#
# **Next.** Notebook 03 uses the all-reduce for what it is for: data-parallel training.
#
# ## Challenge (not graded): as fast as gloo
#
# §5 timed notebook 01's ring beside `dist.all_reduce`: the same bytes over the same loopback,
# and the library is faster on large messages. Your model says where a ring's time can go: the
# $2(N-1)$ steps of $\alpha$ each, the bytes at $\beta$ each, and, not in the model, the adds,
# which the ring of §5 does only after a whole chunk has arrived, sending nothing meanwhile.
#
# Write `fast_all_reduce(tensor)`: sum `tensor` in place over the default group, with
# `dist.send`, `dist.recv`, `dist.isend` and `dist.irecv` only, and make it as fast as
# `dist.all_reduce`. The cell below starts from §5's ring. `race` first checks your function
# against `dist.all_reduce` at each size (a library collective inside it is refused), then runs
# the two alternately, 20 pairs on 2 ranks (one per core), at 1, 4 and 16 MiB, and scores each
# size by gloo's time over yours, the median of the pairs' ratios (your bus bandwidth over
# gloo's): 1.00 is a tie. The chart puts both bus bandwidths (your `bus_bandwidth`) beside the
# one your fit of §5 predicts.
#
# Questions worth asking of your code: what does a rank do while a chunk is in flight? Could
# the add of one part overlap the transfer of the next? Does a 1 MiB message need as many
# messages as a 16 MiB one?
#
# This is not graded: timings on a shared grading machine are not fair. On the 2-core machine
# this notebook was written on, with other work running, one unchanged program's score moved by
# 0.1 to 0.3 between races (the middle half of 20 races), and by more at 1 MiB: compare the
# medians of several runs, and read a difference under about 0.15 as noise. On a
# cluster, `python -m distlab.export 02_cost_models.ipynb fast_all_reduce -o torchrun/` writes a
# script that checks your function and prints the same score against NCCL (or gloo).

# %%
def fast_all_reduce(tensor):
    """Sum `tensor` in place over the default group with send/recv only; returns it."""
    return ring_all_reduce(tensor)  # §5's ring: make it faster


results = race(fast_all_reduce)
alpha, beta = fits[("all_reduce", 2)]  # §5's fit of dist.all_reduce on 2 ranks
show_race(results, busbw=lambda nbytes, s, n: bus_bandwidth(nbytes, s, n, "all_reduce")[1],
          model=lambda nbytes, n: allreduce_time_ring(nbytes, n, alpha, 1 / beta))
