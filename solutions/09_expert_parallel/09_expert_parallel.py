# %% [markdown]
# # 09 · Expert parallelism: a mixture of experts on real ranks
#
# A **mixture-of-experts** (MoE) layer replaces a transformer's one MLP with $E$ MLPs, the
# *experts*, and a small **router** that sends each token to $k$ of them (Shazeer et al. 2017,
# "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer"). A token
# pays for $k$ MLPs while the layer holds $E$: GShard (Lepikhin et al. 2020) routes to $k = 2$,
# the Switch Transformer (Fedus et al. 2021) to $k = 1$.
#
# The experts do not fit on one GPU, so **expert parallelism** (EP) puts $E/N$ of them on each
# of $N$ ranks. The tokens then travel: each rank sends every token to the rank of its expert
# and gets the expert's output back, with all-to-alls (notebook 01 built one): two of token
# rows in forward (one to the experts, one back) and two in backward.
#
# **What you will build**
#
# 1. The router: each token's top-$k$ experts, a capacity per expert with the overflow
#    dropped, and the loss that balances the experts' loads.
# 2. Dispatch and combine on real gloo ranks with `all_to_all_single`, against one process.
# 3. A demo (no blank): the load per rank, before and after your balancing loss trains the
#    router.
# 4. EP beside data parallelism: which ranks reduce which gradients.
# 5. The bytes of dispatch and combine: predicted, then measured.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your code works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import math
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.nn.functional import all_to_all_single

from distlab import require_filled, reveal, run
from distlab.expert_parallel import count_all_to_all, ep_group, show_bytes, show_loads

# %% [markdown]
# ## 1. The router
#
# The router is one matrix $W_r$ of shape (hidden, $E$): a token $x$ gets the probabilities
# $p(x) = \mathrm{softmax}(x W_r)$ over the experts and goes to the $k$ most probable ones. Its
# output is the sum of those experts' outputs, each weighted by its probability, the token's
# **gate** for that expert (Switch uses $p_i(x)$ itself; GShard divides its two gates by their
# sum; this notebook keeps the probabilities).
#
# **Capacity.** An expert processes at most $C$ tokens of a batch: its buffers have a fixed
# shape (compiled code on TPUs and GPUs wants static shapes) and a rank must not wait for one
# overloaded expert. Switch sets $C = (\text{tokens per batch} / \text{experts}) \times$
# **capacity factor**; with $k$ choices a token makes $k$ assignments, so here
# $C = \lceil \text{factor} \cdot k \cdot T / E \rceil$ (DeepSpeed-MoE's top-2 gate doubles the
# factor the same way). An assignment beyond its expert's $C$ is **dropped**: it contributes
# nothing (the residual connection around the layer carries the token on).
#
# Which assignments are dropped must be decided the same way on every run, first come first
# served in the batch's token order, and with one more requirement: a token's second choice
# may never take a place that another token's first choice needs. Decide, for each token and
# choice, whether it is kept.
#
# ```
#  T = 5 tokens, E = 3 experts, k = 2, capacity 2
#  token:          0    1    2    3    4
#  first choice:   e0   e0   e1   e2   e2
#  second choice:  e1   e2   e0   e1   e1
# ```
#
# The API, on other examples: `torch.topk(v, k, dim=-1)` gives the $k$ largest values along
# the last dimension and their indices; `F.one_hot(t, n)` turns a vector of class indices into
# rows of 0s with one 1; `t.cumsum(0)` is the running sum along dim 0; `t.T` is the transpose;
# `t.reshape(...)` reads and writes the entries row by row:
#
# ```python
# >>> F.one_hot(torch.tensor([1, 0, 1]), 2)
# tensor([[0, 1], [1, 0], [0, 1]])
# >>> torch.tensor([3, 1, 2]).cumsum(0)
# tensor([3, 4, 6])
# >>> torch.arange(6).reshape(2, 3)
# tensor([[0, 1, 2], [3, 4, 5]])
# ```

# %%
def capacity(tokens, experts, k, factor):
    """Switch's expert capacity for k choices a token: the most assignments an expert takes."""
    return math.ceil(factor * k * tokens / experts)


# %% solution="route_top_k" drill
def route_top_k(logits, k, cap):
    """logits (T, E): the router's scores. Returns experts (T, k), the chosen experts, most
    probable first; gates (T, k), their probabilities; keep (T, k), True where the assignment
    fits its expert's capacity cap."""
    T, E = logits.shape
    gates, experts = torch.topk(logits.softmax(-1), k, dim=-1)
    queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place < cap).reshape(k, T).T  # BLANK `queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place < cap).reshape(k, T).T` keep # ACCEPT `queue = experts.t().flatten(); place = (F.one_hot(queue, E).cumsum(0) - 1)[torch.arange(k * T), queue]; keep = (place < cap).view(k, T).t()` `queue = experts.T.flatten(); onehot = F.one_hot(queue, E); place = onehot.cumsum(0).gather(1, queue[:, None]).squeeze(1) - 1; keep = (place < cap).reshape(k, T).T` # REJECT `queue = experts.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place < cap).reshape(T, k)` `queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1); keep = (place < cap).reshape(k, T).T` `queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place <= cap).reshape(k, T).T` `queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place < cap).reshape(T, k)` `queue = experts.T.reshape(-1); onehot = F.one_hot(queue, E); place = onehot.cumsum(0).sum(1) - 1; keep = (place < cap).reshape(k, T).T`
    return experts, gates, keep


# %% [markdown]
# The check routes the picture's five tokens and prints, for each token and choice, the expert
# and whether the assignment was kept.

# %%
require_filled(route_top_k)
picture = torch.full((5, 3), -4.0)  # the picture's choices as scores: 3 for first, 1 for second
for token, (first, second) in enumerate([(0, 1), (0, 2), (1, 0), (2, 1), (2, 1)]):
    picture[token, first], picture[token, second] = 3.0, 1.0
experts, gates, keep = route_top_k(picture, 2, 2)
for token in range(5):
    print(f"token {token}: " + ", ".join(f"e{int(e)} {'kept' if kept else 'dropped'}"
                                          for e, kept in zip(experts[token], keep[token])))
assert experts.tolist() == [[0, 1], [0, 2], [1, 0], [2, 1], [2, 1]], "the experts chosen"
assert keep.tolist() == [[True, True], [True, False], [True, False], [True, False],
                         [True, False]], "which assignments are kept"
assert torch.allclose(gates.sum(1), torch.full((5,), 0.99920), atol=1e-5), "the gates"
print("✓ the picture's assignments are kept and dropped in the right order")
reveal("route_top_k")

# %% tests="route_top_k_tests" points=1
# Hidden tests (1 point): random scores, 1 to 5 experts, k = 1 and 2 (k at most the number
# of experts), capacities that drop.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(route_top_k)
### END HIDDEN TESTS

# %% [markdown] why="route_top_k"
# **Why.** The rule is GShard's top-2 gate, as DeepSpeed-MoE and Tutel implement it: **every
# token's first choice comes before any token's second choice** (DeepSpeed-MoE: `locations2 +=
# sum(mask1)`), so that a token loses its second expert before another token loses its first.
# Flattening the (T, k) choices column by column lists every first choice, token by token,
# then every second choice. A running count of each expert's one-hot column numbers its
# assignments 1, 2, 3, ... in that order; the count in the assignment's own column, minus one,
# is its place, and the places below the capacity are kept; reshaping back undoes the column
# order. In the picture every first choice is kept (e0: tokens 0 and 1, e1: token 2, e2:
# tokens 3 and 4); then only token 0's second choice finds a free place (e1's second). In the
# order token by token, token 1's second choice would take one of e2's two places before
# token 4's first choice comes, and token 4 would lose both its choices.

# %% [markdown]
# ### The load-balancing loss
#
# A router left alone learns to favour a few experts: they train more, get better, get more
# tokens. With capacity, an overloaded expert drops tokens; with expert parallelism, its rank
# works while the others wait. So a small loss is added to the model's loss: exactly 1 when the
# experts' loads are equal, whatever the router's probabilities, and with a gradient for the
# router's scores that makes descent move tokens away from the loaded experts.
#
# The **load** of expert $i$ in a batch of $T$ tokens, `first_share[i]`: the fraction of the
# tokens whose first choice is $i$ (Switch's $k = 1$ routing; DeepSpeed-MoE's top-2 gate also
# counts first choices only). A first version of the loss:
#
# ```python
#     return E * (first_share * first_share).sum()
# ```
#
# It is 1 when the loads are equal and larger when they are not, yet `backward()` on it
# raises an error: no optimizer step can lower it. Write the loss that works.

# %% solution="balance_loss"
def balance_loss(logits, experts):
    """The load-balancing loss of a batch: logits (T, E) the router's scores, experts (T, k)
    the chosen experts (first choice in column 0). A scalar tensor with a gradient."""
    T, E = logits.shape
    first_share = torch.bincount(experts[:, 0], minlength=E).to(logits.dtype) / T
    return E * torch.dot(first_share, logits.softmax(-1).mean(0))  # BLANK the loss, fixed # ACCEPT `E * torch.dot(first_share, logits.softmax(1).mean(0))` `E * torch.dot(logits.softmax(-1).mean(0), first_share)` `E * (first_share * logits.softmax(-1).mean(0)).sum()` `E * (first_share * logits.softmax(dim=1).sum(0) / T).sum()` # REJECT `E * (first_share * first_share).sum()` `torch.dot(first_share, logits.softmax(-1).mean(0))` `E * torch.dot(first_share, logits.softmax(-1).sum(0))` `E * torch.dot(first_share, logits.mean(0))` `E * (logits.softmax(-1).mean(0) ** 2).sum()`


# %% [markdown]
# The check: a batch routed evenly, a batch with equal loads but confident about one expert,
# a batch where one expert takes every token, and the gradient of the last one's loss for the
# scores.

# %%
require_filled(balance_loss)
even = torch.zeros(8, 4)  # every expert equally probable ...
even_experts = torch.arange(8).remainder(4).unsqueeze(1)  # ... and as many tokens to each
skewed = torch.zeros(8, 4)
skewed[:, 2] += 3.0  # expert 2 the most probable for every token
skewed = skewed.requires_grad_()
skewed_experts = torch.full((8, 1), 2)
lopsided = torch.zeros(8, 4)
lopsided[torch.arange(8), even_experts[:, 0]] = torch.tensor([4.0, 0.5, 0.5, 0.5]).repeat(2)
loss_even, loss_skewed = balance_loss(even, even_experts), balance_loss(skewed, skewed_experts)
loss_lopsided = balance_loss(lopsided, even_experts)  # the same loads, unequal probabilities
print(f"even routing: {loss_even.item():.3f}; equal loads, expert 0 the most probable: "
      f"{loss_lopsided.item():.3f}; every token to expert 2: {loss_skewed.item():.3f}")
assert abs(loss_even.item() - 1) < 1e-6, "uniform routing gives 1"
assert abs(loss_lopsided.item() - 1) < 1e-6, "equal loads give 1, whatever the probabilities"
assert loss_skewed.item() > 2, "one expert loaded with everything costs more"
assert loss_skewed.requires_grad, "the loss is not connected to the router's scores: no gradient"
loss_skewed.backward()
print("d loss / d score of expert 2, token 0:", round(skewed.grad[0, 2].item(), 4))
assert skewed.grad[0, 2] > 0, "descent must lower the overloaded expert's score"
print("✓ the loss is 1 when the loads are equal, larger with one expert taking every token, "
      "and pushes the router away from that expert")
reveal("balance_loss")

# %% tests="balance_loss_tests" points=1
# Hidden tests (1 point): random scores and choices, its value and its gradient.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(balance_loss)
### END HIDDEN TESTS

# %% [markdown] why="balance_loss"
# **Why.** A count has no gradient: `bincount` is not differentiable (moving the router a
# little changes no token's choice), so the first version's loss is not connected to the
# scores at all, and `backward()` has no graph to follow. The router's **probabilities** do
# have one. This is the Switch Transformer's auxiliary loss (Fedus et al. 2021, §2.2):
# $\alpha \cdot E \cdot \sum_i f_i P_i$ with $f_i$ the fraction of tokens dispatched to expert
# $i$, $P_i$ the fraction of the router probability allocated to it (its **mean probability**
# over the batch), and $\alpha = 10^{-2}$ in their experiments. $f$ carries the load, $P$ the
# gradient: the derivative with respect to $P_i$ is $E f_i$, largest for the most loaded
# expert, so descent moves probability away from it. With equal loads, $f_i = 1/E$, the loss
# is $E \cdot \frac{1}{E} \sum_i P_i = 1$ whatever the probabilities and the number of experts
# (the factor $E$ is there for that). With unequal loads it is not a measure of the imbalance
# by itself (it can even fall below 1, when the mean probabilities lean away from the loaded
# experts): its job is the gradient. Shazeer et al. (2017) used two losses (importance and
# load, with noisy gates); Switch combined them into this one.

# %% [markdown]
# ## 2. Dispatch and combine on real ranks
#
# $N$ ranks, $E$ experts, $E/N$ on each: rank $r$ holds experts $r E/N, \ldots, (r+1)E/N - 1$
# (`w1[j]`, `w2[j]` is its $j$-th, the expert $r E/N + j$). An expert is an MLP,
# $\mathrm{gelu}(x W_1) W_2$. The router is small and whole on every rank. Each rank holds its
# own $T$ tokens (its part of the batch) and routes them with its own capacity (GShard's
# *groups*: each rank's batch is one group).
#
# ```
#  N = 2 ranks, E = 4 experts: rank 0 holds e0 e1, rank 1 holds e2 e3
#  rank 0's kept assignments, sorted by expert:  e0 e0 e1 e2 e3 e3
#  rank 1's kept assignments, sorted by expert:  e1 e2 e2 e3
# ```
#
# At the end, each rank's output must equal what one process computes for its tokens with all
# $E$ experts (the same routing, the same drops), and backward must give every tensor the
# gradient one process gives. The budget: only the kept assignments' rows travel, each to
# the one rank that holds its expert, and back; the experts' weights never move; each rank
# runs its own experts only.
#
# The API, on other examples than yours:
#
# * `dist.all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
#   group=None)`: `input` is cut along dim 0 into consecutive pieces, the $j$-th to rank $j$;
#   `output` receives the piece from each rank, rank by rank. Without split sizes the pieces
#   are equal; with them, `input_split_sizes[j]` rows go to rank $j$ and
#   `output_split_sizes[j]` rows come from rank $j$ (lists of ints). Not differentiable.
#   For example, $N$ ranks, rank $r$ holding row $r$ of an $N \times N$ matrix as `row` and
#   a buffer `col` of $N$ floats, transpose the matrix with `dist.all_to_all_single(col, row)`:
#   then `col[j]` is entry $(j, r)$ of the matrix.
# * `all_rows(x, send_splits, recv_splits, group)` (below) is the same exchange of rows with
#   split sizes, and differentiable (`torch.distributed.nn`).
# * `run_experts(rows, which, w1, w2)` (below) runs row $i$ through this rank's expert
#   `which[i]`.
# * `torch.repeat_interleave(v, counts)` repeats `v[i]` `counts[i]` times, and
#   `out.index_add(0, index, rows)` adds `rows[i]` into `out[index[i]]`:
#   ```python
#   >>> torch.repeat_interleave(torch.tensor([7, 8]), torch.tensor([1, 3]))
#   tensor([7, 8, 8, 8])
#   >>> torch.zeros(3).index_add(0, torch.tensor([2, 0, 2]), torch.ones(3))  # a histogram
#   tensor([1., 0., 2.])
#   ```

# %%
def all_rows(x, send_splits, recv_splits, group=None):
    """The rows of x, send_splits[j] of them to rank j, rank by rank; returns the rows that
    came, recv_splits[j] from rank j. Differentiable (torch.distributed.nn)."""
    out = x.new_empty((sum(recv_splits), *x.shape[1:]))
    with warnings.catch_warnings():  # torch marks it deprecated for a private successor
        warnings.simplefilter("ignore", FutureWarning)
        return all_to_all_single(out, x, recv_splits, send_splits, group=group)


def expert_mlp(x, w1, w2):
    """One expert: gelu(x W1) W2."""
    return F.gelu(x @ w1) @ w2


def run_experts(rows, which, w1, w2):
    """Row i through this rank's expert which[i] (w1[which[i]], w2[which[i]])."""
    out = torch.zeros_like(rows)
    for j in range(len(w1)):
        out[which == j] = expert_mlp(rows[which == j], w1[j], w2[j])
    return out


# %% solution="ep_moe" drill
def ep_moe(x, router, w1, w2, k, cap, group=None):
    """The MoE layer on this rank's tokens x (T, h), with expert parallelism over group: the
    router (h, E) whole, w1 (E/N, h, f) and w2 (E/N, f, h) this rank's experts. Returns (T, h)."""
    N, local = dist.get_world_size(group), w1.shape[0]
    E = N * local
    experts, gates, keep = route_top_k(x @ router, k, cap)
    token = torch.arange(len(x)).unsqueeze(1).expand_as(experts)[keep]  # kept assignments
    expert, gate = experts[keep], gates[keep]
    order = torch.argsort(expert, stable=True)  # sorted by expert, so by the rank holding it
    token, expert, gate = token[order], expert[order], gate[order]
    send_counts = torch.bincount(expert, minlength=E)  # rows for each expert
    with torch.no_grad():
        recv_counts = torch.empty_like(send_counts); dist.all_to_all_single(recv_counts, send_counts, group=group)  # BLANK `recv_counts = torch.empty_like(send_counts); dist.all_to_all_single(recv_counts, send_counts, group=group)` before any row moves # ACCEPT `recv_counts = torch.zeros_like(send_counts); dist.all_to_all_single(output=recv_counts, input=send_counts, group=group)` # REJECT `recv_counts = send_counts.clone()` `recv_counts = send_counts.clone(); dist.all_reduce(recv_counts, group=group)` `recv_counts = torch.empty_like(send_counts); dist.all_to_all_single(send_counts, recv_counts, group=group)`
    send_splits, recv_splits, which = send_counts.view(N, local).sum(1).tolist(), recv_counts.view(N, local).sum(1).tolist(), torch.arange(local).repeat(N).repeat_interleave(recv_counts)  # BLANK the split sizes (lists of ints), and which for run_experts # ACCEPT `(send_counts.view(N, local).sum(1), recv_counts.view(N, local).sum(1).tolist(), torch.arange(local).repeat(N).repeat_interleave(recv_counts))` `(send_counts.view(N, local).sum(1).tolist(), recv_counts.view(N, local).sum(1), torch.arange(local).repeat(N).repeat_interleave(recv_counts))` `send_counts.view(N, -1).sum(1).tolist(), recv_counts.view(N, -1).sum(1).tolist(), torch.repeat_interleave(torch.arange(E) % local, recv_counts)` `send_counts.reshape(N, local).sum(-1), recv_counts.reshape(N, local).sum(-1), (torch.arange(E) % local).repeat_interleave(recv_counts)` # REJECT `send_counts.tolist(), recv_counts.tolist(), torch.arange(local).repeat(N).repeat_interleave(recv_counts)` `send_counts.view(local, N).sum(0).tolist(), recv_counts.view(local, N).sum(0).tolist(), torch.arange(local).repeat(N).repeat_interleave(recv_counts)` `recv_counts.view(N, local).sum(1).tolist(), send_counts.view(N, local).sum(1).tolist(), torch.arange(local).repeat(N).repeat_interleave(recv_counts)` `send_counts.view(N, local).sum(1).tolist(), recv_counts.view(N, local).sum(1).tolist(), torch.arange(local).repeat_interleave(N).repeat_interleave(recv_counts)` `send_counts.view(N, local).sum(1).tolist(), recv_counts.view(N, local).sum(1).tolist(), torch.arange(E).repeat_interleave(recv_counts)` `send_counts.view(N, local).sum(1).tolist(), recv_counts.view(N, local).sum(1).tolist(), torch.arange(local).repeat(N).repeat_interleave(send_counts)`
    received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, token, gate.unsqueeze(1) * back)  # BLANK `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, token, gate.unsqueeze(1) * back)` the layer's output # ACCEPT `back = all_rows(run_experts(all_rows(x[token], send_splits, recv_splits, group), which, w1, w2), recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, token, back * gate[:, None])` `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, send_splits=recv_splits, recv_splits=send_splits, group=group); return torch.zeros_like(x).index_add(0, token, gate.view(-1, 1) * back)` # REJECT `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, send_splits, recv_splits, group); return torch.zeros_like(x).index_add(0, token, gate.unsqueeze(1) * back)` `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, token, back)` `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, order, gate.unsqueeze(1) * back)` `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_copy(0, token, gate.unsqueeze(1) * back)` `received = all_rows(x, send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return torch.zeros_like(x).index_add(0, token, gate.unsqueeze(1) * back)` `received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts(received, which, w1, w2); back = all_rows(y, recv_splits, send_splits, group); return gate.unsqueeze(1) * back`


# %% [markdown]
# The check: 2 ranks, 4 experts, $k = 2$, a capacity that drops some assignments; each rank's
# output and every gradient against one process holding all four experts, and the rows each
# all-to-all gave each rank.

# %%
HIDDEN = 6  # the tokens' width
FFN = 8  # the experts' inner width


def make_moe(experts, tokens, world_size, seed=0):
    """The router (h, E), every expert's w1 (E, h, f) and w2 (E, f, h), and each rank's tokens
    (world_size, tokens, h): float64, so that rounding cannot hide a mistake."""
    g = torch.Generator().manual_seed(seed)
    router = torch.randn(HIDDEN, experts, generator=g, dtype=torch.float64)
    w1 = torch.randn(experts, HIDDEN, FFN, generator=g, dtype=torch.float64) / HIDDEN**0.5
    w2 = torch.randn(experts, FFN, HIDDEN, generator=g, dtype=torch.float64) / FFN**0.5
    xs = torch.randn(world_size, tokens, HIDDEN, generator=g, dtype=torch.float64)
    return router, w1, w2, xs


def one_process(router, w1, w2, x, k, cap):
    """The MoE layer on one process, all experts local: each kept assignment, one at a time."""
    experts, gates, keep = route_top_k(x @ router, k, cap)
    rows = [torch.zeros(HIDDEN, dtype=x.dtype) for _ in range(len(x))]
    for t, s in keep.nonzero().tolist():
        e = experts[t, s]
        rows[t] = rows[t] + gates[t, s] * expert_mlp(x[t], w1[e], w2[e])
    return torch.stack(rows)


def ep_moe_on_ranks(rank, world_size, experts, tokens, k, factor):
    router, w1, w2, xs = make_moe(experts, tokens, world_size)
    local = experts // world_size
    mine = slice(rank * local, (rank + 1) * local)
    router, x = router.requires_grad_(), xs[rank].requires_grad_()
    w1, w2 = w1[mine].clone().requires_grad_(), w2[mine].clone().requires_grad_()
    with count_all_to_all() as calls:
        out = ep_moe(x, router, w1, w2, k, capacity(tokens, experts, k, factor))
    (out * torch.cos(out)).sum().backward()  # any loss with a gradient that depends on out
    return out.detach(), x.grad, router.grad, w1.grad, w2.grad, calls.rows


require_filled(ep_moe)
EXPERTS, TOKENS, K, FACTOR = 4, 9, 2, 1.0
cap = capacity(TOKENS, EXPERTS, K, FACTOR)
results = run(ep_moe_on_ranks, EXPERTS, TOKENS, K, FACTOR, world_size=2)
router, w1, w2, xs = (t.requires_grad_() for t in make_moe(EXPERTS, TOKENS, 2))
outs = [one_process(router, w1, w2, xs[r], K, cap) for r in range(2)]
sum((o * torch.cos(o)).sum() for o in outs).backward()
for rank, (out, x_grad, router_grad, w1_grad, w2_grad, rows) in enumerate(results):
    mine = slice(rank * 2, rank * 2 + 2)
    print(f"rank {rank}: rows given to ranks 0, 1 by each all-to-all: {rows}")
    assert torch.allclose(out, outs[rank].detach(), atol=1e-12), f"rank {rank}: the output"
    assert torch.allclose(x_grad, xs.grad[rank], atol=1e-12), f"rank {rank}: the tokens' grad"
    assert torch.allclose(w1_grad, w1.grad[mine], atol=1e-12), f"rank {rank}: its w1's grad"
    assert torch.allclose(w2_grad, w2.grad[mine], atol=1e-12), f"rank {rank}: its w2's grad"
total_router = sum(r[2] for r in results)
assert torch.allclose(total_router, router.grad, atol=1e-12), "the router's gradient, summed"
print(f"capacity {cap}: {sum(int(k.sum()) for k in [route_top_k(xs[r] @ router, K, cap)[2] for r in range(2)])}"
      f" of {2 * TOKENS * K} assignments kept")
print("✓ outputs and gradients equal one process's, on both ranks")
reveal("ep_moe")


# %% tests="ep_moe_tests" points=3
# Hidden tests (3 points): 2 and 4 ranks, 1 to 3 experts a rank, k = 1 and 2, capacities
# that drop; values and gradients against one process, and what each all-to-all carried.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(ep_moe)
### END HIDDEN TESTS

# %% [markdown] why="ep_moe"
# **Why.** Before rows can move, each rank must size its output buffer: `all_to_all_single`
# with split sizes needs, on every rank, how many rows will arrive from each rank. So the
# per-expert counts travel first, by an all-to-all of equal pieces ($E/N$ counts to each rank:
# entry $e$ goes to the rank holding $e$), and tell every rank how many rows each rank will
# send it for each of its experts. Summing a rank's $E/N$ consecutive counts gives the split
# sizes of the dispatch; the counts that came give those of the combine. The rows arrive
# sender by sender, and within a sender's piece expert by expert, because each sender sorted
# by expert: so the local expert of the received rows cycles $0, \ldots, E/N - 1$ once per
# sender, each repeated by its count. The combine runs the dispatch backwards, its splits
# swapped: each output goes back to the rank its row came from, in the same order, so it lands
# where its token's row left. Backward runs both again in reverse (the gradient of the rows
# that came goes to the ranks they came from): forward makes three all-to-alls (the counts,
# the dispatch, the combine), backward two. Finally the gate weights each output and
# `index_add` sums a token's $k$ outputs: a gate is a function of the router, so the router's
# gradient comes through it (GShard's *combine weights*).
#
# Megatron-Core's all-to-all token dispatcher and DeepSpeed-MoE do the same steps; production
# code fuses the sort, the count exchange and the padding in custom kernels, and some overlap
# the all-to-all with the experts' compute.

# %% [markdown]
# ## 3. Load imbalance made visible
#
# A layer's step ends when its slowest rank is done: the rank whose experts got the most
# rows. Below, a router whose scores favour the experts of rank 0 routes a batch on 4 ranks
# (8 experts, $k = 1$, no capacity limit). Then the router trains a few steps on your balancing
# loss alone (scaled by Switch's $\alpha = 10^{-2}$ it would be one term of the model's loss;
# here it is the only one), and routes the same batch again. The rank's time is modelled by
# its rows (each row costs one expert MLP).

# %%
def loads(router, x, experts, k):
    chosen = route_top_k(x @ router, k, len(x) * k)[0]
    return torch.bincount(chosen.reshape(-1), minlength=experts)


g = torch.Generator().manual_seed(5)
EXPERTS, N_RANKS, TOKENS = 8, 4, 256
x = torch.randn(TOKENS, HIDDEN, generator=g, dtype=torch.float64) + 0.5  # tokens share a direction
router = torch.randn(HIDDEN, EXPERTS, generator=g, dtype=torch.float64) * 0.3
router[:, :2] += 0.4  # ... that favours the experts of rank 0
before = loads(router, x, EXPERTS, 1)
router = router.requires_grad_()
optimizer = torch.optim.SGD([router], lr=0.5)
for step in range(30):
    optimizer.zero_grad()
    logits = x @ router
    balance_loss(logits, route_top_k(logits, 1, TOKENS)[0]).backward()
    optimizer.step()
after = loads(router.detach(), x, EXPERTS, 1)
panels = [("before", before), ("after 30 steps of the balancing loss", after)]
per_rank = show_loads(panels, EXPERTS // N_RANKS, "Rows per expert, coloured by rank")
for (label, _), rows in zip(panels, per_rank):
    print(f"{label}: rows per rank {rows}, slowest rank {max(rows)} rows, "
          f"{max(rows) / (sum(rows) / len(rows)):.2f}x the mean")

# %% [markdown]
# ## 4. Expert parallelism beside data parallelism
#
# With more ranks than it takes to hold the experts once, the experts are copied: $N$ ranks
# in a grid of shape (DP, EP), EP the fastest dimension (`rank = d * ep + e`). Each row of the
# grid, ranks $d \cdot ep, \ldots, d \cdot ep + ep - 1$, is one EP group holding all $E$
# experts once and dispatching among itself; every rank routes its own tokens. The router (and
# in a real model attention and the norms: every *dense* parameter) is whole on every rank.
#
# ```
#  N = 4, ep = 2:   EP group {0, 1}: rank 0 holds e0 e1, rank 1 holds e2 e3
#                   EP group {2, 3}: rank 2 holds e0 e1, rank 3 holds e2 e3
# ```
#
# One training step: each rank's loss is the mean over its own tokens, and the step must equal
# one process's step on the mean loss over **all** $N T$ tokens. After backward, each rank
# holds the gradient of its own loss for the router, and for its experts whatever backward
# left in their `.grad`. A first version reduced every gradient as the router's is reduced:
#
# ```python
# for p in (router, w1, w2):
#     dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)   # over every rank
# ```
#
# The router's came out right; with the experts split over more than one rank (EP > 1) the
# experts' did not. Fix the experts' reduction: the group their gradients are summed in, and
# what the sum is then divided by.
#
# The API: `dist.new_subgroups_by_enumeration(lists)`, called by every rank with the same lists
# of ranks, makes one group per list and returns (the group this rank is in, all the groups);
# distlab's `ep_group(ep)` makes the EP groups (the grid's rows) with it, for `ep_moe`.
# `dist.ReduceOp.AVG` divides the sum by the group's size; `dist.get_world_size(group)` is a
# group's size.

# %% solution="sync_ep_dp_grads"
def sync_ep_dp_grads(router, w1, w2, ep):
    """After backward, on every rank of an (N // ep, ep) grid: every gradient as one process's
    on the mean loss of all the ranks' tokens. router: whole on every rank; w1, w2: this
    rank's experts."""
    dist.all_reduce(router.grad, op=dist.ReduceOp.AVG)
    N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = N  # BLANK `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = N` group, divisor # ACCEPT `N = dist.get_world_size(); group = dist.new_subgroups_by_enumeration([[d * ep + e for d in range(N // ep)] for e in range(ep)])[0]; divisor = dist.get_world_size()` `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = dist.get_world_size(group) * ep` # REJECT `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = dist.get_world_size(group)` `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(d * ep, d * ep + ep)) for d in range(N // ep)]); divisor = N` `N = dist.get_world_size(); group = None; divisor = N` `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = 1` `N = dist.get_world_size(); group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); divisor = ep`
    for p in (w1, w2):
        dist.all_reduce(p.grad, group=group); p.grad /= divisor


# %% [markdown]
# The check: 4 ranks, 4 experts, two grids: EP 4 x DP 1 (each expert on one rank) and EP 1 x
# DP 4 (every expert on every rank). One step of backward and your reduction on each rank,
# against one process's gradients of the mean loss over all 4 ranks' tokens.

# %%
def ep_dp_step(rank, world_size, ep, experts, tokens, k):
    router, w1, w2, xs = make_moe(experts, tokens, world_size)
    local, e = experts // ep, rank % ep
    router = router.requires_grad_()
    w1, w2 = (w[e * local:(e + 1) * local].clone().requires_grad_() for w in (w1, w2))
    out = ep_moe(xs[rank], router, w1, w2, k, capacity(tokens, experts, k, 1.25),
                 group=ep_group(ep))
    (out * torch.cos(out)).sum(1).mean().backward()  # this rank's loss: a mean over its tokens
    sync_ep_dp_grads(router, w1, w2, ep)
    return router.grad, w1.grad, w2.grad


require_filled(sync_ep_dp_grads)
EXPERTS, TOKENS, K = 4, 6, 2
cap = capacity(TOKENS, EXPERTS, K, 1.25)
router, w1, w2, xs = (t.requires_grad_() for t in make_moe(EXPERTS, TOKENS, 4))
outs = [one_process(router, w1, w2, xs[r], K, cap) for r in range(4)]
(sum((o * torch.cos(o)).sum(1).mean() for o in outs) / 4).backward()
for EP in (4, 1):
    local = EXPERTS // EP
    for rank, (router_grad, w1_grad, w2_grad) in enumerate(
            run(ep_dp_step, EP, EXPERTS, TOKENS, K, world_size=4)):
        mine = slice(rank % EP * local, (rank % EP + 1) * local)
        assert torch.allclose(router_grad, router.grad, atol=1e-12), f"rank {rank}: the router's"
        same = {name: torch.allclose(got, want[mine], atol=1e-12)
                for name, got, want in (("w1", w1_grad, w1.grad), ("w2", w2_grad, w2.grad))}
        print(f"EP {EP} x DP {4 // EP}, rank {rank}: router ✓, " + ", ".join(
            f"its experts' {name} {'✓' if ok else '✗ differs from one process'}"
            for name, ok in same.items()))
        assert all(same.values()), f"EP {EP}, rank {rank}: its experts' gradients"
print("✓ every rank's gradients are one process's, on both grids")
reveal("sync_ep_dp_grads")

# %% tests="sync_ep_dp_grads_tests" points=1
# Hidden tests (1 point): 2 and 4 ranks, EP 1, 2 and 4, random models; gradients against one
# process and the groups each rank reduced in.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(sync_ep_dp_grads)
### END HIDDEN TESTS

# %% [markdown] why="sync_ep_dp_grads"
# **Why.** The ranks holding copies of an expert are the ranks with the same place in their EP
# group: a column of the grid, one rank per DP replica. Notebook 07 built one group for each
# set of ranks that hold copies of one tensor; this is that rule again, for a tensor that is
# split one way (over EP) and copied the other (over DP); DeepSpeed-MoE calls this the
# *expert-data-parallel* group. The divisor is where the two kinds of parameters part. A
# router's gradient on a rank comes from that rank's loss only, so the mean over the $N$
# ranks' losses is the average of $N$ copies. An expert's copy already holds, after the
# combine's backward, the sum over the $ep$ ranks of its EP group of their losses' gradients
# (their rows came to it, and their gradients came back through the combine): summing over the
# $N/ep$ copies gives the sum over all $N$ ranks, and the mean loss divides it by $N$, not by
# the $N/ep$ copies. Averaging over the copies leaves it $ep$ times too large (4x on EP 4 x
# DP 1); on EP 1 x DP 4 the two agree, which is why a check on one grid cannot tell them apart.

# %% [markdown]
# ## 5. The bytes of dispatch and combine
#
# The recorder-style counter `count_all_to_all` records, on a rank, each `all_to_all_single`
# and the rows it gives each rank. Predict, from the routing alone, the bytes each rank sends
# to the other ranks in one forward of `ep_moe`: in the dispatch and in the combine. For rank
# $r$, `experts[r]` and `keep[r]` are what `route_top_k` returned there; `local` experts a
# rank, placed as in section 2; one token's row of $h$ values is `row_bytes` bytes.

# %% solution="predict_a2a_bytes"
def predict_a2a_bytes(experts, keep, local, row_bytes):
    """experts[r], keep[r]: rank r's routing, (T, k) each, as route_top_k returns them.
    Returns (dispatch, combine): a list each, one number of bytes a rank."""
    N = len(experts)
    dispatch = [row_bytes * int((keep[r] & (experts[r] // local != r)).sum()) for r in range(N)]  # BLANK dispatch # ACCEPT `[row_bytes * (keep[r] & (experts[r] // local != r)).sum() for r in range(N)]` `[row_bytes * int((experts[r][keep[r]] // local != r).sum()) for r in range(N)]` `[row_bytes * sum(int(e) // local != r for e in experts[r][keep[r]]) for r in range(N)]` `[row_bytes * (int(keep[r].sum()) - int((keep[r] & (experts[r] // local == r)).sum())) for r in range(N)]` # REJECT `[row_bytes * int((experts[r] // local != r).sum()) for r in range(N)]` `[row_bytes * int(keep[r].sum()) for r in range(N)]` `[row_bytes * int((keep[r] & (experts[r] // local != r)).any(1).sum()) for r in range(N)]` `[row_bytes * sum(int((keep[q] & (experts[q] // local == r)).sum()) for q in range(N) if q != r) for r in range(N)]` `[row_bytes * int((keep[r] & (experts[r] % local != r)).sum()) for r in range(N)]` `[row_bytes * int((keep[r] & (experts[r] != r)).sum()) for r in range(N)]`
    combine = [row_bytes * sum(int((keep[q] & (experts[q] // local == r)).sum()) for q in range(N) if q != r) for r in range(N)]  # BLANK combine # ACCEPT `[row_bytes * sum((keep[q] & (experts[q] // local == r)).sum() for q in range(N) if q != r) for r in range(N)]` `[row_bytes * sum(int((experts[q][keep[q]] // local == r).sum()) for q in range(N) if q != r) for r in range(N)]` # REJECT `dispatch` `[row_bytes * sum(int((keep[q] & (experts[q] // local == r)).sum()) for q in range(N)) for r in range(N)]` `[row_bytes * sum(int((experts[q] // local == r).sum()) for q in range(N) if q != r) for r in range(N)]` `[row_bytes * sum(int((keep[q] & (experts[q] // local != r)).sum()) for q in range(N) if q != r) for r in range(N)]` `[row_bytes * sum(int((keep[r] & (experts[r] // local == q)).sum()) for q in range(N) if q != r) for r in range(N)]`
    return dispatch, combine


# %% [markdown]
# The check: 4 ranks, 8 experts, $k = 2$, a capacity factor of 1.25; each rank's routing is
# computed here first, then the layer runs and the counter measures.

# %%
def measured_forward(rank, world_size, experts, tokens, k, factor):
    router, w1, w2, xs = make_moe(experts, tokens, world_size, seed=3)
    local = experts // world_size
    mine = slice(rank * local, (rank + 1) * local)
    with count_all_to_all() as calls:
        ep_moe(xs[rank], router, w1[mine], w2[mine], k, capacity(tokens, experts, k, factor))
    return calls.off_rank_bytes(rank)


require_filled(predict_a2a_bytes)
EXPERTS, TOKENS, K, FACTOR, N_RANKS = 8, 16, 2, 1.25, 4
router, w1, w2, xs = make_moe(EXPERTS, TOKENS, N_RANKS, seed=3)
cap = capacity(TOKENS, EXPERTS, K, FACTOR)
routings = [route_top_k(xs[r] @ router, K, cap) for r in range(N_RANKS)]  # as each rank routes
chosen, kept = [routing[0] for routing in routings], [routing[2] for routing in routings]
row_bytes = HIDDEN * xs.element_size()
dispatch, combine = predict_a2a_bytes(chosen, kept, EXPERTS // N_RANKS, row_bytes)
measured = run(measured_forward, EXPERTS, TOKENS, K, FACTOR, world_size=N_RANKS)
rows = []
for r, per_call in enumerate(measured):  # one entry per call
    sent_dispatch, sent_combine = per_call[-2:]
    print(f"rank {r}: dispatch predicted {dispatch[r]} B, measured {sent_dispatch} B; "
          f"combine predicted {combine[r]} B, measured {sent_combine} B")
    assert (dispatch[r], combine[r]) == (sent_dispatch, sent_combine), f"rank {r}'s bytes"
    rows.append((f"rank {r}", {"dispatch, yours": dispatch[r], "dispatch, measured": sent_dispatch,
                               "combine, yours": combine[r], "combine, measured": sent_combine}))
show_bytes(rows, "One forward on 4 ranks: bytes each rank sends to the others")
print("✓ your prediction is what every rank sent")
reveal("predict_a2a_bytes")

# %% tests="predict_a2a_bytes_tests" points=2
# Hidden tests (2 points): random routings on 1 to 4 ranks, 1 to 3 experts a rank.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(predict_a2a_bytes)
### END HIDDEN TESTS

# %% [markdown] why="predict_a2a_bytes"
# **Why.** `ep_moe` sends one row per **kept assignment**: a dropped assignment sends nothing,
# and a token whose two kept choices both sit on one other rank goes there twice, once for
# each expert. A rank's dispatch sends the kept rows whose expert another rank holds
# (expert $e$ lives on rank $e / \mathrm{local}$, rounded down); the rows for its own experts
# stay in its own piece of the all-to-all and never leave it. Its combine sends back the
# outputs of the rows it *received*: the other ranks' kept assignments to its experts, so it
# depends on everyone's routing, not on its own. The two are equal on every rank when the
# routing is balanced, and differ in general. With every assignment kept and spread evenly,
# each way moves $\frac{N-1}{N} k T h$ values a rank: the all-to-all of notebook 01, twice per
# MoE layer in forward (dispatch and combine) and twice in backward. Capacity bounds the bytes
# from above (an expert receives at most its capacity from each rank), and dropping turns the
# bound into lost tokens.

# %% [markdown]
# ## Wrap-up
#
# Questions to answer for yourself:
#
# * What would a fixed buffer of capacity rows per expert (GShard's dense dispatch) cost in
#   bytes instead of the exchanged counts and rows?
# * Which tensors of a MoE transformer are split, which copied, and over which ranks is each
#   one's gradient reduced?
# * The balancing loss trades quality for speed: what happens to the step time, and to the
#   dropped tokens, when $\alpha$ is too small?
#
# **Next.** The drills re-mask random pieces of every notebook's code.
