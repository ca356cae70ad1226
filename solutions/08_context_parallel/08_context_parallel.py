# %% [markdown]
# # 08 · Context parallelism: splitting the sequence through attention
#
# Data, tensor and pipeline parallelism (03-05) and ZeRO (06) split the batch, the weights,
# the layers and the optimizer. A long sequence is a fourth thing that can outgrow one GPU:
# attention compares every position with every other, so its activations grow with the
# *square* of the sequence length. **Context parallelism** gives each rank a part of the
# sequence and lets the ranks exchange what attention needs. The HF Ultra-Scale Playbook counts
# it among the five dimensions of its "5-D parallelism"; torchtitan ships it.
#
# **What you will build**
#
# 1. A measurement: one attention layer's memory against the sequence length.
# 2. The online softmax: attention over keys that arrive a block at a time.
# 3. Ring attention (Liu et al., 2023) on real ranks: the key/value blocks go round a ring of
#    point-to-point messages, forward and backward through autograd.
# 4. The causal mask's imbalance, and an assignment of the chunks that removes it.
# 5. DeepSpeed-Ulysses (Jacobs et al., 2023): all-to-alls that swap the sequence split for a
#    head split.
# 6. The bytes of both, predicted, then measured.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your code works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import math

import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode

from distlab import require_filled, reveal, run
from distlab.context_parallel import (
    all_to_all,
    attention,
    check_ring_pass,
    count_bytes,
    ring_shift,
    saved_bytes,
    show_bytes,
    show_memory,
    show_work,
    to_seq,
)

torch.set_default_dtype(torch.float64)  # exact enough to compare ranks with one process

# %% [markdown]
# ## 1. Why the sequence must be split
#
# One attention head of a sequence of $S$ positions, with queries, keys and values $q, k, v$
# of shape $(S, d)$, computes $\mathrm{softmax}(q k^\top / \sqrt d)\, v$. Its score matrix
# $q k^\top$ has $S \times S$ entries, per head and per sequence of the batch. Autograd keeps
# what the backward needs, so the bytes it keeps for one layer grow with $S^2$, while the
# layer's inputs grow with $S$. Measured below (float32, batch 1, 4 heads of 64 values) with
# `saved_bytes`, which counts what autograd keeps while a function runs:

# %%
def layer_memory(length, heads=4, d=64):
    q, k, v = (torch.randn(1, heads, length, d, dtype=torch.float32, requires_grad=True)
               for _ in range(3))
    inputs = 3 * q.numel() * q.element_size()
    return inputs, saved_bytes(lambda a, b, c: attention(a, b, c, causal=True), q, k, v)


lengths = [128, 256, 512, 1024]
measured = [layer_memory(s) for s in lengths]
for s, (inputs, kept) in zip(lengths, measured, strict=True):
    print(f"S={s:5d}: q, k, v {inputs / 2**20:6.2f} MiB, kept for the backward "
          f"{kept / 2**20:7.2f} MiB")
show_memory(lengths, {"q, k, v": [m[0] for m in measured],
                      "kept by autograd": [m[1] for m in measured]},
            "One causal attention layer, 4 heads of 64, float32")

# %% [markdown]
# Doubling $S$ doubles the inputs and quadruples what autograd keeps: everything it keeps
# here (the softmax's output, the mask) has $S \times S$ entries. At $S = 128\text{k}$ with the
# same 4 heads the scores alone would be
# $4 \cdot (2^{17})^2 \cdot 4$ bytes $= 256$ GiB per layer.
#
# Notebook 04's splits do not help here. Tensor parallelism gives each rank some **heads**:
# each rank still builds the full $S \times S$ scores of its heads. Megatron-LM's sequence
# parallelism splits the sequence only in the LayerNorm and dropout regions and all-gathers it
# again before attention. Attention itself, over the whole sequence, stays on every rank.
# Context parallelism splits attention's own work over the sequence.
#
# (FlashAttention, Dao et al. 2022, never writes the scores to memory: it computes them a
# block at a time and keeps only $O(S)$ per head. That takes away the $S^2$ memory, not the
# $S^2$ work, and a sequence's $q, k, v$ and activations still have to fit on one GPU. The
# block-at-a-time softmax it uses is section 2's.)

# %% [markdown]
# ## 2. The online softmax
#
# Split the keys and values of one query's attention into blocks that arrive one at a time.
# Can the output be computed without keeping the earlier blocks? The softmax's denominator
# sums over **all** keys, and the usual safe form subtracts the maximum over **all** scores
# before the exponential (without it, $e^{s}$ overflows for scores past about 710 in float64).
# Neither is known before the last block.
#
# The state after some blocks, per query row: $m$, the largest score seen so far; $\ell =
# \sum_j e^{s_j - m}$ over the keys seen so far; and $a = \sum_j e^{s_j - m} v_j$. Once every
# block is in, the output is $a / \ell$. The start: $m = -\infty$, $\ell = 0$, $a = 0$.
#
# ```
#  keys:    [ block 0 ][ block 1 ][ block 2 ]
#  state:   m, ℓ, a over block 0  --(block 1 arrives)-->  m', ℓ', a' over blocks 0 and 1
# ```
#
# `merge_block` takes the state and one new block, its `scores` (the query rows against the
# block's keys, already scaled; `-inf` where a key is masked) and its values `v`, and returns
# the state over everything seen. Shapes: `m` and `l` are `(..., rows, 1)`, `acc` is
# `(..., rows, d)`, `scores` `(..., rows, cols)`, `v` `(..., cols, d)`. It must never compute
# an exponential of a positive number (that is what overflows). Every row of the first block
# a row meets has at least one score that is not `-inf` (the ring below never hands a row a
# first block that is all masked; the tests do not either).
#
# **API**, on other tensors:
#
# ```python
# torch.maximum(torch.tensor([1., 7.]), torch.tensor([4., 2.]))   # tensor([4., 7.])
# torch.tensor([[1., 9.], [3., 2.]]).amax(0, keepdim=True)        # tensor([[3., 9.]])
# torch.exp(torch.tensor(-math.inf))                              # tensor(0.)
# ```

# %% solution="merge_block" drill
def merge_block(m, l, acc, scores, v):  # noqa: E741 - l is the paper's normaliser
    """The online-softmax state (m, l, acc) after one more block of keys: its scores and v."""
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True); acc = acc * torch.exp(m - m_new) + p @ v  # BLANK `m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True); acc = acc * torch.exp(m - m_new) + p @ v` the new state: m_new, l, acc (3-4 lines) # REJECT `m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); l = l + p.sum(-1, keepdim=True); acc = acc + p @ v` # REJECT `m_new = scores.amax(-1, keepdim=True); p = torch.exp(scores - m_new); l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True); acc = acc * torch.exp(m - m_new) + p @ v` # REJECT `m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); l = l * torch.exp(m_new - m) + p.sum(-1, keepdim=True); acc = acc * torch.exp(m_new - m) + p @ v` # REJECT `m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True); acc = acc + p @ v` # REJECT `m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores); l = l + p.sum(-1, keepdim=True); acc = acc + p @ v` # ACCEPT `m_new = torch.max(m, scores.max(dim=-1, keepdim=True).values); p = torch.exp(scores - m_new); scale = torch.exp(m - m_new); l = scale * l + p.sum(-1, keepdim=True); acc = scale * acc + p @ v`
    return m_new, l, acc


# %% [markdown]
# The check folds the keys in blocks of 3, then 1, then all at once, with scores in the thousands
# (no exponential of a positive number may appear), and compares $a / \ell$ after each block
# with `torch.softmax` over the keys seen so far.

# %%
require_filled(merge_block)
torch.manual_seed(0)
q, k, v = torch.randn(2, 5, 4), torch.randn(2, 11, 4), torch.randn(2, 11, 4)
for size in (3, 1, 11):
    m, l, acc = torch.full((2, 5, 1), -math.inf), torch.zeros(2, 5, 1), torch.zeros(2, 5, 4)
    for start in range(0, 11, size):
        scores = 400 * q @ k[:, start:start + size].transpose(-2, -1)  # large: past exp's range
        m, l, acc = merge_block(m, l, acc, scores, v[:, start:start + size])
        seen = 400 * q @ k[:, :start + size].transpose(-2, -1)
        want = torch.softmax(seen, -1) @ v[:, :start + size]
        assert torch.isfinite(acc / l).all(), f"blocks of {size}: not finite after {start + size} keys"
        assert torch.allclose(acc / l, want), f"blocks of {size}: wrong after {start + size} keys"
    print(f"blocks of {size:2d}: a / ℓ equals softmax attention after every block ✓")
reveal("merge_block")

# %% tests="merge_block_tests" points=1
# Hidden tests (1 point): random shapes, block sizes, score scales and masked keys; the state
# after every block against softmax over the keys seen so far.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(merge_block)
### END HIDDEN TESTS

# %% [markdown] why="merge_block"
# **Why.** When a larger score arrives, every term summed so far was computed against the old
# maximum $m$: multiplying $\ell$ and $a$ by $e^{m - m'}$ (at most 1) moves them to the new
# one, and the new block's terms are computed against $m'$ directly. Nothing else of the
# earlier blocks is needed. This is the **online softmax** of Milakov & Gimelshein (2018,
# "Online normalizer calculation for softmax"), the rescaling FlashAttention (Dao et al.,
# 2022) applies to each block of keys it loads, and the update each rank of ring attention
# applies to each block that arrives.

# %% [markdown]
# ## 3. Ring attention
#
# $N$ ranks, the sequence cut into **chunks** of $L$ positions; chunk $c$ holds positions
# $cL .. cL + L - 1$. Rank $r$ holds the chunks listed in `chunks[r]` (for now one each,
# `chunks = [[0], [1], ..., [N-1]]`): its queries **and** its keys and values of those
# positions, `q, k, v` of shape `(batch, heads, len(chunks[r]) * L, d)`. At the end, rank
# $r$ must hold the attention output of its own query positions, over the **whole** sequence.
#
# The budget, in a forward without gradients (`torch.no_grad()`, as in inference): a rank
# never holds more than two key/value blocks at once besides its inputs (its current one and
# the one arriving), and the whole key/value sequence is never in one place. (With gradients
# on, autograd keeps what the backward needs: the check below measures how much.)
# The picture, $N = 4$, before anything moves:
#
# ```
#            rank 0   rank 1   rank 2   rank 3
#  queries:  Q0       Q1       Q2       Q3      (stay)
#  keys:     KV0      KV1      KV2      KV3     (each rank's block: passed on, a ring)
#            rank r sends to rank r + 1 (mod N), receives from rank r - 1
# ```
#
# The exchange is an autograd `Function`, `RingPass`: `RingPass.apply(x)` sends `x` to the
# next rank and returns the block received from the previous one (its forward calls
# `ring_shift` from `distlab.context_parallel`, which does exactly that). Its backward is yours:
# given the gradient of the loss with respect to the block this rank received (`grad`), return
# the gradient with respect to the `x` this rank sent, with point-to-point messages: one sent,
# one received.
#
# **API** (from 01), on another exchange, rank 0 and rank 2 swapping a tensor:
#
# ```python
# other = 2 - rank                                  # rank 0 <-> rank 2
# request = dist.isend(t.contiguous(), dst=other)   # starts sending; request.wait() until sent
# dist.recv(buf, src=other)                         # fills buf from that rank (blocks)
# request.wait()
# ```

# %% solution="RingPass"
class RingPass(torch.autograd.Function):
    """x to the next rank of the ring; the previous rank's x comes back. Differentiable."""

    @staticmethod
    def forward(ctx, x):
        return ring_shift(x)

    @staticmethod
    def backward(ctx, grad):
        rank, n = dist.get_rank(), dist.get_world_size()
        received = torch.empty_like(grad)
        request = dist.isend(grad.contiguous(), dst=(rank - 1) % n); dist.recv(received, src=(rank + 1) % n); request.wait()  # BLANK `request = dist.isend(grad.contiguous(), dst=(rank - 1) % n); dist.recv(received, src=(rank + 1) % n); request.wait()` send one gradient, receive the other # REJECT `request = dist.isend(grad.contiguous(), dst=(rank + 1) % n); dist.recv(received, src=(rank - 1) % n); request.wait()` # REJECT `received = grad.clone()` # REJECT `dist.send(grad.contiguous(), dst=(rank - 1) % n); dist.recv(received, src=(rank + 1) % n)` # ACCEPT `request = dist.irecv(received, src=(rank + 1) % n); dist.send(grad.contiguous(), dst=(rank - 1) % n); request.wait()`
        return received


# %%
require_filled(RingPass)


def weight(rank):
    return 10.0 + rank  # each rank's loss: (y * weight).sum()


def ring_pass_check(rank, world_size):
    x = torch.full((3,), float(rank), requires_grad=True)
    y = RingPass.apply(x)
    (y * weight(rank)).sum().backward()
    return x.tolist(), y.tolist(), x.grad.tolist()


assert check_ring_pass(run(ring_pass_check, world_size=4), weight), \
    "a gradient differs from what autograd gives for the same sums in one process"
print("✓ every x's gradient equals one process's")
reveal("RingPass")

# %% tests="RingPass_tests" points=1
# Hidden tests (1 point): 2, 3 and 4 ranks, random tensors and output gradients; every
# message's peer and bytes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(RingPass)
### END HIDDEN TESTS

# %% [markdown] why="RingPass"
# **Why.** In the forward this rank's `x` went to rank $r + 1$, and it is rank $r + 1$'s loss
# that used it: the gradient of `x` is there, so the backward sends each gradient to rank
# $r - 1$ and receives its own `x`'s from rank $r + 1$, the other way round the ring. Each
# rank's `x` gradient is the weight of the loss term its copy went into. Autograd, running
# `RingPass` backwards on every rank, turns the forward's ring into the backward's reverse
# ring.

# %% [markdown]
# Now the ring. At step 0 each rank works on its own block; after each step every block moves
# one rank on. Each rank folds each block into its state with your `merge_block`, one state
# per query chunk, and returns $a / \ell$.
#
# **Causal attention** (a decoder's): position $i$ sees positions $0..i$ only. Between a query
# chunk `qc` and a key chunk `kc` of the same length, some pairs need every score, some need
# none (skip them: that is work saved), and some need the mask above the diagonal;
# `diagonal=True` tells `chunk_scores` to mask position pairs `j > i` (query $i$, key $j$)
# inside the pair of chunks.
#
# The questions of the cell: whose block is on this rank at step `step`, so which chunks' keys
# it holds; and which pairs of chunks are skipped or masked.

# %%
def chunk_scores(qc, kc, diagonal):
    scores = qc @ kc.transpose(-2, -1) / math.sqrt(qc.shape[-1])
    if diagonal:
        future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, -math.inf)
    return scores


# %% solution="ring_attention" drill
def ring_attention(q, k, v, chunks, causal=False):
    """This rank's rows of attention over the whole sequence. q, k, v: (batch, heads,
    len(chunks[rank]) * L, d), this rank's chunks in the order chunks[rank] lists them."""
    rank, n = dist.get_rank(), dist.get_world_size()
    L = q.shape[-2] // len(chunks[rank])
    q_chunks = q.split(L, dim=-2)
    states = [(torch.full((*qc.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device),
               torch.zeros(*qc.shape[:-1], 1, dtype=q.dtype, device=q.device),
               torch.zeros_like(qc))
              for qc in q_chunks]  # (m, l, acc) of each query chunk
    kv = torch.stack([k, v])  # the block that travels: keys and values together
    for step in range(n):
        src = (rank - step) % n  # BLANK whose block is here at this step # REJECT `(rank + step) % n` # REJECT `step` # REJECT `rank` # REJECT `(rank - step - 1) % n` # ACCEPT `(rank + n - step) % n` # ACCEPT `rank - step`
        k_chunks, v_chunks = kv[0].split(L, dim=-2), kv[1].split(L, dim=-2)
        for i, qc in enumerate(q_chunks):
            for j, kc in enumerate(k_chunks):
                a, b = chunks[rank][i], chunks[src][j]  # the query chunk, the key chunk
                skip, diagonal = causal and b > a, causal and b == a  # BLANK `causal and b > a, causal and b == a` which pairs of chunks need no scores, which need the mask # REJECT `causal and b < a, causal and b == a` # REJECT `False, causal and b == a` # REJECT `causal and b >= a, causal and b == a` # REJECT `causal and b > a, causal` # REJECT `causal and j > i, causal and j == i` # ACCEPT `(b > a) if causal else False, (b == a) if causal else False` # ACCEPT `causal and a < b, causal and a == b`
                if not skip:
                    scores = chunk_scores(qc, kc, diagonal)
                    states[i] = merge_block(*states[i], scores, v_chunks[j])
        if step < n - 1:
            kv = RingPass.apply(kv)
    out = torch.cat([acc / l for _, l, acc in states], dim=-2)
    return out + 0 * kv.sum()  # every rank's every pass in the graph: each runs its backward


# %% [markdown]
# The check runs it on 4 ranks, causal and not, forward and backward, against `attention` on
# the whole sequence in one process, and measures what autograd keeps on each rank.

# %%
require_filled(ring_attention)
B, H, S, D = 2, 3, 16, 8
torch.manual_seed(1)
Q, K, V = (torch.randn(B, H, S, D) for _ in range(3))


def contiguous_chunks(n):
    return [[r] for r in range(n)]


def rows_of(x, mine, L):
    """The positions of the chunks `mine` of x (sequence on dimension -2), in that order."""
    return torch.cat([x[..., c * L:(c + 1) * L, :] for c in mine], dim=-2)


def ring_check(rank, world_size, chunks, causals):
    """Per causal setting: the output, dq, dk, dv, matmul FLOPs, and what autograd kept for the
    backward on this rank, in units of the rank's own keys and values."""
    L = S // sum(len(c) for c in chunks)
    found = []
    for causal in causals:
        q, k, v = (rows_of(t, chunks[rank], L).requires_grad_() for t in (Q, K, V))
        outs = []
        with FlopCounterMode(display=False) as flops:
            kept = saved_bytes(lambda a, b, c: outs.append(ring_attention(a, b, c, chunks,
                                                                          causal)), q, k, v)
            outs[0].backward(rows_of(Q.sin(), chunks[rank], L))  # a loss weighing every row
        found.append((outs[0].detach(), q.grad, k.grad, v.grad, flops.get_total_flops(),
                      kept / (k.nbytes + v.nbytes)))
    return found


def whole(causal):
    q, k, v = (t.clone().requires_grad_() for t in (Q, K, V))
    out = attention(q, k, v, causal)
    out.backward(Q.sin())
    return out.detach(), q.grad, k.grad, v.grad


N = 4
results = run(ring_check, contiguous_chunks(N), (False, True), world_size=N)
for index, causal in enumerate((False, True)):
    want = whole(causal)
    for rank, found in enumerate(results):
        for name, g, w in zip(("output", "dq", "dk", "dv"), found[index][:4], want, strict=True):
            assert torch.allclose(g, rows_of(w, [rank], S // N)), \
                f"causal={causal}, rank {rank}: its {name} differs from one process"
    print(f"causal={causal}: every rank's output, dq, dk, dv equal one process's ✓")
    print("   kept by autograd for the backward, per rank, in key/value blocks: "
          f"{[round(f[index][5], 2) for f in results]}")
reveal("ring_attention")

# %% tests="ring_attention_tests" points=2
# Hidden tests (2 points): 2, 3 and 4 ranks, random shapes, causal and not, contiguous and
# zig-zag chunks; output and gradients against one process; every message (peer, bytes, count)
# in forward and backward; the key/value blocks a rank holds at once (no_grad forward); each
# rank's matmul FLOPs against the pairs of chunks it needs.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ring_attention)
### END HIDDEN TESTS

# %% [markdown] why="ring_attention"
# **Why.** After $s$ steps each block has moved $s$ ranks on, so rank $r$ holds the block
# that started on rank $r - s$; after $N - 1$ steps every rank has seen every block, and a
# last pass would only bring each block home. A rank never holds more than the block in hand
# and the one arriving.
# The backward is autograd running each `RingPass` backwards: the gradient of a block
# travels the ring the other way, collecting each rank's contribution to its keys and values
# on the way home. This is **Ring Attention** (Liu, Zaharia & Abbeel, 2023, "Ring Attention
# with Blockwise Transformers for Near-Infinite Context"): blockwise attention, the online
# softmax, and the blocks passed round a ring while each rank computes on the one it holds
# (on GPUs the next block's transfer overlaps this block's compute; here each pass waits).
#
# **What autograd keeps.** Through autograd, each `chunk_scores` and `merge_block` keeps its
# inputs for the backward: every block that visits the rank, the whole key/value sequence
# after all, and the scores of every pair of chunks. The two-block budget holds for a forward
# without gradients only. The paper's backward is a hand-written one (FlashAttention's):
# forward keeps only $q, k, v$, the output and the log-sum-exp $m + \log \ell$ per row; the
# backward passes the blocks round the ring again, recomputes each block's scores from $q$
# and the block, and sends each block's key/value gradient along with it. One more pass of
# the ring and the scores computed twice, for memory that no longer grows with $N$.

# %% [markdown]
# ## 4. The causal mask's imbalance
#
# With one contiguous chunk per rank and a causal mask, the ranks do not have the same work.
# Each rank's matmul FLOPs in the causal run above (forward and backward):

# %%
flops_by_layout = {"contiguous": [found[1][4] / 1e6 for found in results]}
print(f"contiguous: MFLOP per rank {[round(f, 3) for f in flops_by_layout['contiguous']]}")

# %% [markdown]
# Every layer waits for its slowest rank: the ring runs at rank $N-1$'s pace while rank 0
# idles. The fix keeps the ring and changes which positions each rank holds: cut the sequence
# into $2N$ chunks and give each rank **two** whose work adds up the same on every rank. Your
# `ring_attention` already takes any `chunks`: write `zigzag_chunks(rank, n)`, the two chunk
# ids rank `rank` of `n` holds, in either order. Any assignment that puts each of the $2N$
# chunks on exactly one rank and gives every rank the same causal work is right; the tests
# accept every such assignment.

# %% solution="zigzag_chunks"
def zigzag_chunks(rank, n):
    """The two of the 2n chunks rank `rank` holds, so that causal attention costs every rank
    the same."""
    return [rank, 2 * n - 1 - rank]  # BLANK two chunk ids # REJECT `[rank, n + rank]` # REJECT `[2 * rank, 2 * rank + 1]` # REJECT `[rank, 2 * n - rank]` # REJECT `[rank, n - 1 - rank]` # ACCEPT `sorted([2 * n - 1 - rank, rank])` # ACCEPT `[2 * n - 1 - rank, rank]`


# %%
require_filled(zigzag_chunks)
zigzag = [zigzag_chunks(r, N) for r in range(N)]
print("zig-zag chunks per rank:", zigzag)
assert sorted(c for pair in zigzag for c in pair) == list(range(2 * N)), "each chunk once"
results = [found[0] for found in run(ring_check, zigzag, (True,), world_size=N)]
want = whole(True)
for rank, got in enumerate(results):
    for name, g, w in zip(("output", "dq", "dk", "dv"), got[:4], want, strict=True):
        assert torch.allclose(g, rows_of(w, zigzag[rank], S // (2 * N))), \
            f"zig-zag, rank {rank}: its {name} differs from one process"
flops_by_layout["zig-zag"] = [r[4] / 1e6 for r in results]
print(f"   zig-zag: MFLOP per rank {[round(f, 3) for f in flops_by_layout['zig-zag']]}")
spread = max(flops_by_layout["zig-zag"]) / min(flops_by_layout["zig-zag"])
assert spread < 1.01, f"the busiest rank does {spread:.2f}x the least busy one's work"
print("✓ the same outputs and gradients; every rank does the same work")
show_work(list(flops_by_layout.items()), f"Causal ring attention on {N} ranks: each rank's "
          "matmul work")
reveal("zigzag_chunks")

# %% tests="zigzag_chunks_tests" points=1
# Hidden tests (1 point): n = 1..12; the causal pairs of chunks each rank computes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(zigzag_chunks)
### END HIDDEN TESTS

# %% [markdown] why="zigzag_chunks"
# **Why.** Under a causal mask, query chunk $a$ needs $a$ key chunks whole and one on the
# diagonal. Chunk $a$ and chunk $2N - 1 - a$ need $a + (2N - 1 - a) = 2N - 1$ whole pairs
# between them, the same for every $a$: pairing the early chunks with the late ones in
# mirror order balances the ranks exactly. This is the **zig-zag** (or striped) assignment
# that context-parallel implementations use (Megatron-LM's and torchtitan's "load balancing"
# for causal context parallelism). It changes nothing in the ring, only which positions each
# rank starts with.

# %% [markdown]
# ## 5. DeepSpeed-Ulysses: swap the split
#
# Ring attention keeps the sequence split and moves the keys and values. Ulysses (Jacobs et
# al., 2023, "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long
# Sequence Transformer Models") changes the split instead. Attention's heads are independent,
# so a rank that holds **all positions of some heads** can run ordinary attention on them.
#
# Rank $r$ holds positions $rL .. rL + L - 1$ of all $H$ heads: `q, k, v` of shape `(batch, H,
# L, d)`; $N$ divides $H$. Rank $j$ **owns** heads $jH/N .. (j+1)H/N - 1$ (one group of $H/N$
# heads). Before attention, each rank must hold all $N L$ positions of its own heads:
# `(batch, H/N, N L, d)`, positions in order; after it, the output goes back to the first
# layout.
#
# ```
#  before:   rank 0: positions 0..L-1 of heads [g0 g1 g2 g3]     (N = 4, g_j = rank j's heads)
#            rank 1: positions L..2L-1 of heads [g0 g1 g2 g3]  ...
#  after:    rank 0: heads g0 of positions [0..L-1, L..2L-1, 2L..3L-1, 3L..4L-1]
# ```
#
# **API.** `all_to_all(x)` (from `distlab.context_parallel`: `dist.all_to_all_single` made
# differentiable, its backward the all-to-all of the gradients) cuts `x` along dimension 0
# into $N$ equal pieces, sends piece $j$ to rank $j$, and returns what arrived: its piece $j$
# (along dimension 0) is what rank $j$ sent. A different example, $N = 2$, moving rows of a
# matrix:
#
# ```python
# x = torch.arange(8.).reshape(4, 2) + 10 * rank     # rows 0-1 go to rank 0, rows 2-3 to rank 1
# out = all_to_all(x)                                # rank 0: rows 0-1 of rank 0, then of rank 1
# ```
#
# `x.reshape(...)`, `x.permute(...)`/`x.transpose(i, j)`, `x.chunk(n, dim)`, `torch.stack`
# and `torch.cat` rearrange a tensor. The way back after attention, `to_seq` (from
# `distlab.context_parallel`), is given. Yours is `to_heads`: one all-to-all, what goes into
# it and how what arrives is put together.

# %% solution="ulysses_attention" drill
def ulysses_attention(q, k, v, causal=False):
    """Attention over the whole sequence for this rank's positions (all heads), through a
    head split: q, k, v and the output are (batch, H, L, d)."""
    n = dist.get_world_size()

    def to_heads(x):  # (batch, H, L, d) -> (batch, H / n, n L, d)
        b, h, length, d = x.shape
        send = x.reshape(b, n, h // n, length, d).transpose(0, 1).contiguous(); got = all_to_all(send); return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)  # BLANK `send = x.reshape(b, n, h // n, length, d).transpose(0, 1).contiguous(); got = all_to_all(send); return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)` one all-to-all: what goes in, what comes out (2-3 lines) # REJECT `send = x.reshape(b, h // n, n, length, d).permute(2, 0, 1, 3, 4).contiguous(); got = all_to_all(send); return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)` # REJECT `send = x.reshape(b, n, h // n, length, d).transpose(0, 1).contiguous(); got = all_to_all(send); return got.permute(1, 2, 3, 0, 4).reshape(b, h // n, n * length, d)` # REJECT `send = x.reshape(b, n, h // n, length, d).transpose(0, 1).contiguous(); got = all_to_all(send); return got.transpose(0, 1).reshape(b, h // n, n * length, d)` # REJECT `send = x.reshape(n, b, h // n, length, d).contiguous(); got = all_to_all(send); return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)` # ACCEPT `return torch.cat(all_to_all(torch.stack(x.chunk(n, dim=1))).unbind(0), dim=-2)` # ACCEPT `send = torch.stack(x.chunk(n, dim=1)); got = all_to_all(send); return torch.cat(list(got), dim=2)`

    out = attention(to_heads(q), to_heads(k), to_heads(v), causal)
    return to_seq(out)


# %%
require_filled(ulysses_attention)


def ulysses_check(rank, world_size, causals):
    L = S // world_size
    found = []
    for causal in causals:
        q, k, v = (t[..., rank * L:(rank + 1) * L, :].clone().requires_grad_()
                   for t in (Q, K, V))
        out = ulysses_attention(q, k, v, causal)
        out.backward(Q.sin()[..., rank * L:(rank + 1) * L, :])
        found.append((out.detach(), q.grad, k.grad, v.grad))
    return found


Q, K, V = (torch.randn(B, 4, S, D) for _ in range(3))  # 4 heads: N must divide them
for n in (2, 4):
    results = run(ulysses_check, (False, True), world_size=n)
    for index, causal in enumerate((False, True)):
        want = whole(causal)
        for rank, found in enumerate(results):
            for name, g, w in zip(("output", "dq", "dk", "dv"), found[index][:4], want,
                                  strict=True):
                L = S // n
                assert torch.allclose(g, w[..., rank * L:(rank + 1) * L, :]), \
                    f"causal={causal}, {n} ranks, rank {rank}: its {name} differs"
        print(f"{n} ranks, causal={causal}: outputs and gradients equal one process's ✓")
reveal("ulysses_attention")

# %% tests="ulysses_attention_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random heads (a multiple of the ranks), lengths
# and sizes, causal and not; the forward's messages, against one process; each rank's matmul
# FLOPs against its share.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ulysses_attention)
### END HIDDEN TESTS

# %% [markdown] why="ulysses_attention"
# **Why.** `all_to_all` sends piece $j$ of dimension 0 to rank $j$, so the heads
# must be grouped by owner on dimension 0 before it: rank $j$'s heads, rank $j$'s piece.
# What arrives is one piece per sender, in rank order, and rank $i$ sent positions $iL ..
# iL + L - 1$: putting the senders side by side along the sequence gives every position in
# order. `to_seq` is the same swap backwards. After the first swap, ordinary attention runs
# on whole sequences: any mask, any attention kernel (FlashAttention included) works
# unchanged, which is Ulysses' strength. Its limit: $N$ must divide $H$, so at most $H$ ranks
# (fewer still with grouped keys and values, as in GQA).

# %% [markdown]
# ## 6. Bytes: predicted, then measured
#
# One training step of one layer, forward **and** backward: how many bytes does one rank
# **send to other ranks**? For ring attention, count each tensor this rank hands to a
# point-to-point send. For Ulysses, count the part of each all-to-all's input that goes to
# other ranks. `seq` is the whole sequence, `heads` all of them, `n` the ranks, `itemsize` the
# bytes of one value; $n$ divides `seq` and `heads`.

# %% solution="predicted_bytes"
def predicted_bytes(batch, heads, seq, head_dim, n, itemsize):
    """Bytes one rank sends to other ranks in one layer's forward and backward: {"ring": ...,
    "ulysses": ...}."""
    local = batch * heads * (seq // n) * head_dim * itemsize  # one of q, k, v on a rank
    return {
        "ring": 2 * (n - 1) * 2 * local,  # BLANK `2 * (n - 1) * 2 * local` ring attention # REJECT `(n - 1) * 2 * local` # REJECT `2 * n * 2 * local` # REJECT `2 * (n - 1) * local` # REJECT `2 * (n - 1) * 2 * local / n` # ACCEPT `4 * local * (n - 1)`
        "ulysses": 8 * local * (n - 1) // n,  # BLANK `8 * local * (n - 1) // n` Ulysses # REJECT `4 * local * (n - 1) // n` # REJECT `8 * local` # REJECT `6 * local * (n - 1) // n` # REJECT `8 * local // n` # ACCEPT `8 * local * (n - 1) / n` # ACCEPT `8 * (local - local // n)`
    }


# %% [markdown]
# The check runs both on 2 and on 4 ranks (batch 2, 4 heads of 8, 16 positions, float64),
# forward and backward, and counts what each rank's calls handed to other ranks
# (`count_bytes`: the tensors given to `isend` and `send`, and what leaves the rank in each
# `dist.all_to_all_single`, which `all_to_all` calls). The measured bytes are shown once your
# prediction matches them.

# %%
require_filled(predicted_bytes)


def step_bytes(rank, world_size):
    L = S // world_size
    sent = {}
    for kind, layer in (("ring", lambda a, b, c: ring_attention(a, b, c,
                                                               contiguous_chunks(world_size))),
                        ("ulysses", ulysses_attention)):
        q, k, v = (t[..., rank * L:(rank + 1) * L, :].clone().requires_grad_()
                   for t in (Q, K, V))
        with count_bytes() as counted:
            layer(q, k, v).sum().backward()
        sent[kind] = counted.total()
    return sent


rows = []
for n in (2, 4):
    predicted = predicted_bytes(B, 4, S, D, n, 8)
    results = run(step_bytes, world_size=n)
    for kind in ("ring", "ulysses"):
        measured = [found[kind] for found in results]
        right = set(measured) == {predicted[kind]}
        print(f"{n} ranks, {kind:>7}: predicted {predicted[kind]:6.0f} B, " +
              (f"measured on every rank {measured[0]} B ✓" if right else
               "✗ not what the ranks sent"))
        rows.append((f"{kind}, N={n}", {"predicted": predicted[kind], "measured": measured[0]}
                     if right else {"predicted": predicted[kind]}))
assert all(len(row) == 2 for _, row in rows), "a prediction differs from what the ranks sent"
print("✓ your predictions are what every rank sent")
show_bytes(rows, "Bytes each rank sends in one layer's forward and backward (batch 2, 4 "
           "heads of 8, 16 positions)")
reveal("predicted_bytes")

# %% tests="predicted_bytes_tests" points=2
# Hidden tests (2 points): random shapes, ranks and value sizes against the bytes the ranks'
# calls hand over.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(predicted_bytes)
### END HIDDEN TESTS

# %% [markdown] why="predicted_bytes"
# **Why.** The ring's forward sends its key/value block, $2 \times$ the local size, $N - 1$
# times, and its backward sends a gradient of the same size back the other way as many times:
# $4 (N-1)$ local tensors. Per rank that is $(N-1)/N$ of the whole sequence's keys and values,
# twice: it does not shrink as $N$ grows. Ulysses makes four all-to-alls in the forward (three
# in, one out) and four in the backward (the gradients going back the way the values came),
# each sending $(N-1)/N$ of one local tensor: $8 (N-1)/N$ local tensors, which *shrink* as
# $N$ grows and the local tensor with it. The DeepSpeed-Ulysses paper (its abstract and
# communication analysis) puts it as a communication volume that stays constant when the
# sequence length and the devices grow in proportion, where the other sequence-parallel
# methods it compares grow with the sequence. The ring's advantages are elsewhere: no limit
# of $H$ ranks, messages between neighbours only (a ring fits any topology), and its
# transfers can hide behind the blocks' compute. Real systems combine them: Ulysses inside a
# node, the ring across nodes (USP, Fang & Zhao 2024).
#
# **Wrap-up.**
#
# * Attention's memory grows with the square of the sequence; tensor parallelism splits heads
#   and Megatron's sequence parallelism splits the rest of the layer, neither attention's own
#   sequence.
# * The online softmax folds blocks of keys in one at a time with a running maximum and
#   normaliser, and no block is needed again.
# * Ring attention passes key/value blocks round the ranks with point-to-point messages,
#   $N - 1$ passes per layer; autograd's backward sends gradients the other way round the
#   ring, at the price of keeping every block it saw (the paper's hand-written backward
#   passes the blocks and their gradients round the ring again instead).
# * A causal mask makes contiguous chunks uneven; the zig-zag assignment balances the ranks
#   without changing the ring.
# * Ulysses swaps a sequence split for a head split with all-to-alls, four per layer forward
#   and four backward, limited by the number of heads ($N$ must divide $H$); its bytes shrink
#   with $N$, the ring's do not.
