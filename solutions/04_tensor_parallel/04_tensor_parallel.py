# %% [markdown]
# # 04 · Tensor parallelism: one layer, many GPUs
#
# Data parallelism gives every GPU a whole copy of the model. When one layer's weights, or the
# work of one layer, are too much for one GPU, cut the **layer** instead: every GPU holds a
# slice of each weight matrix and computes a slice of the work, and collectives put the slices
# together. This is **tensor parallelism**, as Megatron-LM does it (Shoeybi et al., 2019,
# "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism").
#
# **What you will build**
#
# 1. A linear layer whose weight is cut into bands of rows, then one cut into bands of
#    columns, on real gloo ranks, each equal to `nn.Linear`: which collective each needs.
# 2. Their backward pass: a hand-written one that goes wrong, why autograd cannot be left
#    alone with a collective, and Megatron's operators *f* and *g* as
#    `torch.autograd.Function`s.
# 3. A tensor-parallel MLP and attention layer: which way to cut each weight, checked against
#    the single-device layers: output, input gradient, every weight gradient.
# 4. The communication of two MLP layouts, predicted as formulas, then measured; and sequence
#    parallelism.
#
# **How to use this notebook.** As in 01 and 02: replace each `_____` with code (the comment
# after it, `# [n] ...`, is a hint for blank *n*), run the cell, then the check below it, which
# prints what your function did and a ✓ when it works. The cell after each check holds the
# hidden tests (press **Validate** to run them all). Run the cells top to bottom; every other
# cell is locked.

# %%
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from distlab import require_filled, reveal, run
from distlab.tensor_parallel import (
    count_collectives,
    format_calls,
    region_gradients,
    show_comm_table,
    show_split,
)

# %% [markdown]
# ## 0. Who holds what
#
# Every function of this notebook runs on each of $N$ ranks. In sections 1 to 3 a rank is
# handed **only its own part** of each split weight, as a real tensor-parallel rank would be.
# In sections 5 and 6 it is handed the whole weights, because *which* part it takes is the
# exercise there; a real rank would load only that part, and the hidden tests check that each
# rank reads and computes with no more than its own.
#
# The helper below cuts a tensor into $N$ equal parts along one dimension and returns rank
# $r$'s part (a view, so gradients flow through it). A dimension that does not divide is
# refused: `torch.chunk` would not refuse. It cuts pieces of $\lceil size/N \rceil$, so the
# last may be shorter and there may be fewer than $N$: 6 features into 4 give 3 equal pieces
# (a rank would get nothing), 7 give 4 pieces of different sizes (a collective cannot join
# them).

# %%
def shard(t, rank, world_size, dim):
    """Rank `rank`'s part of t, cut into world_size equal parts along dimension `dim`."""
    if t.shape[dim] % world_size != 0:
        raise ValueError(f"dimension {dim} of a {tuple(t.shape)} tensor cannot be split "
                         f"evenly over {world_size} ranks")
    return t.chunk(world_size, dim=dim)[rank]


for size in (6, 7):
    print([piece.tolist() for piece in torch.arange(size).chunk(4)],
          f"<- torch.chunk(4) of {size} features")

# %% [markdown]
# **The collectives** of notebook 01, as `torch.distributed` calls them. Each is shown on a
# small example of its own; every rank calls the same line.
#
# ```python
# t = torch.tensor([1.0, 2.0]) * (rank + 1)      # rank r holds (r+1) * [1, 2]
# dist.all_reduce(t, op=dist.ReduceOp.SUM)       # in place; op=SUM is the default
# # now t == [3, 6] on both of 2 ranks
#
# w = torch.tensor([10.0 * rank, 10.0 * rank])  # rank r holds [10 r, 10 r]
# dist.broadcast(w, src=1)                       # now w == [10, 10] on every rank: rank 1's
#
# s = torch.tensor([float(rank + 1)])            # rank r holds [r + 1]
# dist.reduce(s, dst=0)                          # now s == [3] on rank 0 (2 ranks); the
#                                                # other ranks' s is left undefined
#
# u = torch.full((1, 3), float(rank))            # rank r holds [[r, r, r]]
# out = torch.empty(world_size, 3)               # room for every rank's u
# dist.all_gather_single(out, u)                 # out[q] == rank q's u, on every rank:
# # on 2 ranks out == [[0., 0., 0.], [1., 1., 1.]]
# ```
#
# (`all_gather_single` is the name in torch 2.13, which this course pins; older releases call
# it `dist.all_gather_into_tensor`, a name that 2.13 keeps but marks deprecated.)
#
# `F.linear(x, w, b)` is `x @ w.T + b`, as `nn.Linear` computes it (`b` may be left out).
#
# ## 1. A weight cut into bands of rows
#
# A linear layer computes $y = xW^\top + b$. Mind how PyTorch stores it: `nn.Linear(in, out)`
# keeps `weight` as an **out × in** matrix, one row per output feature. (Papers often write
# $Y = XA$ with $A$ in × out, the transpose, and speak of its *columns*: those are the rows of
# `nn.Linear.weight`. Megatron calls this cut **column-parallel**.)
#
# **The situation.** Rank $r$ holds $\frac{out}{N}$ consecutive rows of the weight and the
# matching entries of the bias, and the whole input $x$ (the same on every rank). The picture
# shows who holds what: each colour a rank, grey held whole by every rank. **At the end** every
# rank must hold the whole output $y$, `(..., out)`. The input may have any number of leading
# dimensions, as for `nn.Linear`: `(batch, in)` or `(batch, sequence, in)`. **The budget**:
# each rank multiplies only by its own rows, and sends, counted as a ring would send (notebook 01),
# *less* than $S$ bytes, $S$ the bytes of $y$, whatever $N$.

# %%
show_split("column", world_size=4)

# %% [markdown]
# The cut is made for you: rank $r$ receives its rows, and what it computes alone with them is
# given, `y_mine`, its output features. The blank is the communication: what makes every rank
# hold `y`, within the budget.

# %% solution="column_parallel_forward" drill
def column_parallel_forward(rank, world_size, x, w_shard, b_shard):
    """nn.Linear's x @ weight.T + bias, with the weight cut into bands of rows.

    x: (..., in_features), the same on every rank. w_shard: (out_features / N, in_features)
    and b_shard: (out_features / N,), this rank's rows of the weight and entries of the bias.
    Returns the whole output, (..., out_features), on every rank.
    """
    y_mine = F.linear(x, w_shard, b_shard)  # (..., out_features / N): this rank's outputs
    stacked = y_mine.new_empty((world_size * y_mine.shape[0], *y_mine.shape[1:])); dist.all_gather_single(stacked, y_mine.contiguous()); y = torch.cat(stacked.chunk(world_size), dim=-1)  # BLANK `stacked = y_mine.new_empty((world_size * y_mine.shape[0], *y_mine.shape[1:])); dist.all_gather_single(stacked, y_mine.contiguous()); y = torch.cat(stacked.chunk(world_size), dim=-1)` the whole output y, on every rank (a few statements) # ACCEPT `pieces = [torch.empty_like(y_mine) for _ in range(world_size)]; dist.all_gather(pieces, y_mine.contiguous()); y = torch.cat(pieces, dim=x.dim() - 1)` # REJECT `y = y_mine` `dist.all_reduce(y_mine); y = y_mine` `stacked = y_mine.new_empty((world_size * y_mine.shape[0], *y_mine.shape[1:])); dist.all_gather_single(stacked, y_mine.contiguous()); y = stacked` `stacked = y_mine.new_empty((world_size * y_mine.shape[0], *y_mine.shape[1:])); dist.all_gather_single(stacked, y_mine.contiguous()); y = torch.cat(stacked.chunk(world_size), dim=0)`
    return y


# %% [markdown]
# The check: `nn.Linear(512, 256)`, a batch of 4, on 4 ranks, each given its rows; then a
# 3-D input. It prints the collectives your function called on rank 0 (`count_collectives`
# from `distlab.tensor_parallel` records them; section 7 uses it again).

# %%
require_filled(column_parallel_forward)  # names any blank still empty


def column_on_ranks(rank, world_size, x, weight, bias):
    """What a rank gets: x, and its rows of the weight and bias."""
    with count_collectives() as calls:
        y = column_parallel_forward(rank, world_size, x, shard(weight, rank, world_size, dim=0),
                                    shard(bias, rank, world_size, dim=0))
    return y, calls


torch.manual_seed(42)
linear = nn.Linear(512, 256)
x = torch.randn(4, 512)
weight, bias = linear.weight.detach(), linear.bias.detach()
expected = linear(x).detach()
outputs = run(column_on_ranks, x, weight, bias, world_size=4)
print(format_calls(outputs[0][1]))
sent = sum(c.sent for c in outputs[0][1])
assert sent < expected.nbytes, \
    f"rank 0 sent {sent:g} B; the budget is less than the {expected.nbytes} B of y"
assert all(y.shape == expected.shape for y, _ in outputs), \
    f"rank 0 returned {tuple(outputs[0][0].shape)}, expected {tuple(expected.shape)} on every rank"
error = max((y - expected).abs().max().item() for y, _ in outputs)
print(f"4 ranks, largest difference from nn.Linear: {error:.2e}")
assert error < 1e-5, "the output differs from nn.Linear's"
x3 = torch.randn(2, 3, 512)  # (batch, sequence, features)
for y, _ in run(column_on_ranks, x3, weight, bias, world_size=4):
    assert torch.allclose(y, linear(x3), atol=1e-5), "a 3-D input: the output differs"
print("✓ column_parallel_forward equals nn.Linear")
reveal("column_parallel_forward")

# %% tests="column_parallel_forward_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random shapes (2-D and 3-D inputs), float32 and
# float64, each rank given only its rows, against nn.Linear's formula; and what each rank did:
# its collectives and bytes, and about 1/N of the layer's matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 000 exercise 3, changed here: its weight is in x out (`weight[:, start:end]`), here it
# is nn.Linear's out x in; its hints gave each answer (`weight[:, start:end]`,
# `bias[start:end]`, `x @ w_chunk + b_chunk`, `torch.cat, dim=-1`): the slicing is given (the
# rank receives its shard), the local product and the collective are the blank; its
# `assert d_out % num_gpus == 0` is shard()'s ValueError; its loop over GPUs is real ranks.
from autograder.grade_cell import grade
grade(column_parallel_forward)
### END HIDDEN TESTS

# %% [markdown] why="column_parallel_forward"
# **Why.** Output feature $j$ needs only row $j$ of the weight and entry $j$ of the bias, so
# rank $r$'s rows give it complete **columns** of $y$, with no communication; the ranks then
# only have to put the columns side by side: an **all-gather**. A ring all-gather sends
# $\frac{N-1}{N}S$ per rank, $S$ the bytes of $y$.

# %% [markdown]
# ## 2. A weight cut into bands of columns
#
# **The situation.** The dual cut: rank $r$ holds $\frac{in}{N}$ consecutive *columns* of the
# weight (its shard along dimension 1) and only the matching features $x_r$ of the input. The
# bias is not split: every rank holds it whole. **At the end** every rank must hold the whole
# $y = xW^\top + b$. **The budget**: each rank multiplies only by its own columns, and sends,
# counted as a ring would send, no more than $2S$ bytes, $S$ the bytes of $y$, whatever $N$.

# %%
show_split("row", world_size=4)

# %% [markdown]
# Here each rank receives its features of the input. Write the whole body.

# %% solution="row_parallel_forward" drill
def row_parallel_forward(rank, world_size, x_shard, w_shard, bias):
    """nn.Linear's x @ weight.T + bias, with the weight cut into bands of columns.

    x_shard: (..., in_features / N), this rank's features of the input. w_shard:
    (out_features, in_features / N), this rank's columns of the weight. bias: (out_features,),
    whole. Returns the whole output, (..., out_features), on every rank.
    """
    partial = F.linear(x_shard, w_shard); dist.all_reduce(partial); y = partial + bias  # BLANK `partial = F.linear(x_shard, w_shard); dist.all_reduce(partial); y = partial + bias` the whole output y, on every rank (a few statements) # ACCEPT `partial = x_shard @ w_shard.t(); dist.all_reduce(partial, op=dist.ReduceOp.SUM); y = bias + partial` # REJECT `partial = F.linear(x_shard, w_shard, bias); dist.all_reduce(partial); y = partial` `partial = F.linear(x_shard, w_shard); y = partial + bias` `partial = F.linear(x_shard, w_shard); dist.all_reduce(partial, op=dist.ReduceOp.MAX); y = partial + bias`
    return y


# %% [markdown]
# The same check.

# %%
require_filled(row_parallel_forward)  # names any blank still empty


def row_on_ranks(rank, world_size, x, weight, bias):
    """What a rank gets: its features of x, its columns of the weight, and the whole bias."""
    with count_collectives() as calls:
        y = row_parallel_forward(rank, world_size, shard(x, rank, world_size, dim=-1),
                                 shard(weight, rank, world_size, 1), bias)
    return y, calls


outputs = run(row_on_ranks, x, weight, bias, world_size=4)
print(format_calls(outputs[0][1]))
sent = sum(c.sent for c in outputs[0][1])
assert sent <= 2 * expected.nbytes, \
    f"rank 0 sent {sent:g} B; the budget is 2 x the {expected.nbytes} B of y"
error = max((y - expected).abs().max().item() for y, _ in outputs)
print(f"4 ranks, largest difference from nn.Linear: {error:.2e}")
assert error < 1e-5, "the output differs from nn.Linear's"
for y, _ in run(row_on_ranks, x3, weight, bias, world_size=4):
    assert torch.allclose(y, linear(x3), atol=1e-5), "a 3-D input: the output differs"
print("✓ row_parallel_forward equals nn.Linear")
reveal("row_parallel_forward")

# %% tests="row_parallel_forward_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random shapes (2-D and 3-D inputs), float32 and
# float64, each rank given only its features and columns, against nn.Linear's formula; and
# what each rank did: its collectives and bytes, and about 1/N of the matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 000 exercise 4, changed here: weight in x out there, nn.Linear's out x in here; its
# hints gave each answer (`weight[start:end, :]`, `x[:, start:end]`, `x_chunk @ w_chunk`,
# the sum of the outputs): the slicing is given, the body is one blank; its sum over a Python
# list is a real dist.all_reduce; its "max error 0.00e+00" is not 0 in float32 (rounding: the
# check above prints it). Seed 002's RowParallelLinear gives every rank's nn.Linear the bias,
# so the all-reduce adds it N times: here it is added once, after the sum.
from autograder.grade_cell import grade
grade(row_parallel_forward)
### END HIDDEN TESTS

# %% [markdown] why="row_parallel_forward"
# **Why.** $y = xW^\top + b = \sum_{r=0}^{N-1} x_r W_r^\top + b$: every rank computes a
# full-size $x_r W_r^\top$, but only a **partial sum**. An **all-reduce** adds the partial sums
# and leaves the total on every rank ($2\frac{N-1}{N}S$ per rank in a ring). Sum, then the bias
# once: a bias added by every rank before the sum would be counted $N$ times (seed code of this
# course makes that mistake).
#
# The difference the check printed is not 0 (3.6e-07 when this notebook was written, on a
# CPU; your CPU's matmul kernel may print another value of that order): with floats, four
# partial dot products of 128 terms, then their sum, round differently from one dot product of
# 512 terms, and float32 keeps about 7 significant digits. The first layer printed 0.00e+00
# there, but neither layer is guaranteed to match `nn.Linear` to the last bit: even its smaller
# matmul may be blocked and summed in another order by the matmul kernel.

# %% [markdown]
# ## 3. The backward pass, by hand
#
# Training needs the gradients too. For $y = xW^\top + b$ and a loss $L$, with
# $\bar y = \partial L / \partial y$, a single device computes
# $\partial L/\partial x = \bar y\, W$, $\partial L/\partial W = \bar y^\top x$ and
# $\partial L/\partial b = \sum_{\text{batch}} \bar y$. Every rank computes the same loss on
# $y$; rank $r$ of section 1's layer
# produced only its columns of $y$, so $\bar y_r$, its columns of $\bar y$, is what flows back
# to it. Every rank must end with $\partial L/\partial x$ whole, and the gradients of its own
# rows of the weight and entries of the bias.
#
# Seed code of this course writes this backward as the function below. Run it against autograd
# on one process:

# %%
def seed_column_backward(rank, world_size, x, w_shard, grad_y_shard):
    """Seed code's backward of section 1's layer (x whole, w_shard this rank's rows, grad_y_shard
    this rank's columns of dL/dy): (grad_x, grad_w, grad_b)."""
    grad_w = grad_y_shard.t() @ x
    dist.all_reduce(grad_w)
    grad_b = grad_y_shard.sum(dim=0)
    dist.all_reduce(grad_b)
    grad_x = grad_y_shard @ w_shard
    return grad_x, grad_w, grad_b


def seed_on_ranks(rank, world_size, x, weight, grad_y):
    return seed_column_backward(rank, world_size, x, shard(weight, rank, world_size, 0),
                                shard(grad_y, rank, world_size, 1))


torch.manual_seed(0)
x, grad_y = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 12, dtype=torch.float64)
layer = nn.Linear(8, 12, dtype=torch.float64)
x_leaf = x.clone().requires_grad_()
layer(x_leaf).backward(grad_y)  # autograd, on one process
for rank, grads in enumerate(run(seed_on_ranks, x, layer.weight.detach(), grad_y, world_size=2)):
    wanted = (x_leaf.grad, layer.weight.grad.chunk(2)[rank], layer.bias.grad.chunk(2)[rank])
    verdicts = ["equals" if torch.allclose(got, want) else "DIFFERS from"
                for got, want in zip(grads, wanted, strict=True)]
    print(f"rank {rank}: dL/dx {verdicts[0]} autograd's, its dL/dW_r {verdicts[1]} autograd's, "
          f"its dL/db_r {verdicts[2]} autograd's")

# %% [markdown]
# All three are wrong. Section 4 fixes them without writing any layer's backward by hand: you
# write the backward pass of two small operators only, and autograd does the rest.

# %% [markdown]
# ## 4. Autograd and a collective
#
# Writing every backward by hand does not scale to a transformer (and, as the seed shows, is
# easy to get wrong): we want autograd to do it.
# But can autograd differentiate through `dist.all_reduce`? Try it. On 2 ranks, every rank
# holds the same $x = 2$ and its own weight $a_r = r + 1$, and computes $y = \sum_q a_q x$ with
# an all-reduce; then every rank computes the **same** loss from $y$, $L = y$ (one loss,
# computed by the same code on every rank, as in training). $L = y = 3x$, so
# $\partial L/\partial x = 3$. What does autograd say, on each rank? (The demo then all-gathers
# every rank's term $a_r x$ into a list, and asks whether what arrives requires grad.)

# %%
def autograd_through_all_reduce(rank, world_size):
    x = torch.tensor([2.0], requires_grad=True)  # the same x on every rank
    y = (rank + 1.0) * x  # this rank's term, a_r x
    dist.all_reduce(y)  # y = a_0 x + a_1 x, on both ranks
    with warnings.catch_warnings(record=True) as caught:  # kept, to print below
        warnings.simplefilter("always")
        y.sum().backward()  # L = y, the same on every rank
        terms = [torch.empty(1) for _ in range(world_size)]
        dist.all_gather(terms, (rank + 1.0) * x)  # every rank's a_r x, into a list
    return (y.item(), x.grad.item(), [str(w.message).split(". ")[0] for w in caught],
            [term.requires_grad for term in terms])


for rank, (y, grad, said, gathered) in enumerate(run(autograd_through_all_reduce,
                                                     world_size=2)):
    print(f"rank {rank}: y = {y:g}, autograd's dL/dx = {grad:g} (the loss's: 3); torch said: "
          f"{said}; the all-gathered terms require grad: {gathered}")

# %% [markdown]
# On torch 2.13 autograd printed 1 and 2 where the loss's gradient is 3. `dist.all_reduce`,
# which writes its result into the tensor it is given, has no gradient formula: autograd passes
# the gradient through it unchanged, and says so in a `UserWarning`. The warning goes to the
# rank's stderr, and only once: Python's default filter prints a warning once per line of code
# that raises it, and torch raises this one from a line of its
# own (in `torch/autograd/graph.py`), whichever line calls `backward()`, so a rank process
# prints it at its first backward through an all-reduce and never again. distlab sends the
# ranks' stderr to a log file (you see it above only because the demo records it), and a
# training script's many ranks often bury it. An all-gather into a list is worse in another
# way: as each rank's line ends, its outputs do not require grad at all (and torch says
# nothing), so the graph is cut there. The gradients of x are wrong, and nothing fails.
#
# Megatron-LM therefore puts every collective inside a `torch.autograd.Function`, which states
# its backward explicitly. Such a Function has two static methods: `forward(ctx, inputs...)`
# returns the output, and `backward(ctx, grad_output)` returns the gradient with respect to each
# input (`ctx` carries what the backward needs from the forward; nothing here). You call it as
# `Scale.apply(x)`:

# %%
class Scale(torch.autograd.Function):
    """y = 3x, so dL/dx = 3 dL/dy."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad_y):
        return 3 * grad_y


def all_reduce_sum(t):
    """A new tensor: dist.all_reduce (SUM) of a copy of t."""
    total = t.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


x = torch.ones(2, requires_grad=True)
Scale.apply(x).sum().backward()
print("Scale: x.grad =", x.grad.tolist())

# %% [markdown]
# Megatron needs two such operators, for the two places where a tensor-parallel region meets
# the rest of the model (a region is one or more split layers):
#
# * **f**, where a region **begins**: its input $x$ is whole and the same on every rank. Its
#   forward passes $x$ on unchanged.
# * **g**, where a region **ends**: rank $r$ holds a tensor $z_r$, and g's forward returns
#   $\sum_r z_r$ on every rank: `all_reduce_sum`. Every rank's layers after it are the same on
#   every rank, with the same loss.
#
# **At the end** of each backward the gradient it returns must be the gradient of the training
# loss (computed once, by the same code on every rank) with respect to its input, on every
# rank. The forwards are given; write the two backward passes, as functions of a tensor (the
# classes call them).
# (`megatron_f_g()` returns the two classes: made by a function, so that every function below
# can get them with one call, on whatever rank it runs.)

# %% solution="megatron_f_g"
def megatron_f_g():
    """(f, g): Megatron-LM's operators, as autograd Functions on the default group."""
    f_backward, g_backward = all_reduce_sum, (lambda grad: grad)  # BLANK `f_backward, g_backward = all_reduce_sum, (lambda grad: grad)` f's backward pass, then g's: two functions of the gradient # ACCEPT `f_backward, g_backward = (lambda grad: all_reduce_sum(grad)), (lambda grad: grad.clone())` `f_backward = all_reduce_sum; g_backward = lambda grad: grad` # REJECT `f_backward, g_backward = (lambda grad: grad), all_reduce_sum` `f_backward, g_backward = (lambda grad: grad), (lambda grad: grad)` `f_backward, g_backward = all_reduce_sum, all_reduce_sum` `f_backward, g_backward = all_reduce_sum, (lambda grad: grad / dist.get_world_size())`

    class f(torch.autograd.Function):
        """Where a tensor-parallel region begins: x is whole on every rank."""

        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return f_backward(grad)

    class g(torch.autograd.Function):
        """Where a tensor-parallel region ends."""

        @staticmethod
        def forward(ctx, z):
            return all_reduce_sum(z)

        @staticmethod
        def backward(ctx, grad):
            return g_backward(grad)

    return f, g


# %% [markdown]
# The check, on 2 ranks, with random numbers: every rank holds the same whole $x$ and its own
# weight $a_r$, and its region computes $g(a_r \odot f(x))$; then every rank computes the same
# loss from g's output. It compares $\partial L/\partial x$ and each $\partial L/\partial a_r$
# on every rank with autograd on one process, running the whole computation there
# (`region_gradients` from `distlab.tensor_parallel`), and gives one verdict for both.

# %%
require_filled(megatron_f_g)  # names any blank still empty


def try_f_g(rank, world_size, x, weights, c):
    f, g = megatron_f_g()
    x, a = x.clone().requires_grad_(), weights[rank].clone().requires_grad_()
    out = g.apply(a * f.apply(x))
    (c * out).sum().backward()
    return x.grad, a.grad


torch.manual_seed(3)
x, c = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
weights = torch.randn(2, 4, dtype=torch.float64)
want_x, want_a = region_gradients(x, weights, c)  # autograd on one process
for rank, (grad_x, grad_a) in enumerate(run(try_f_g, x, weights, c, world_size=2)):
    right = torch.allclose(grad_x, want_x) and torch.allclose(grad_a, want_a[rank])
    print(f"rank {rank}: dL/dx and dL/da_r {'right' if right else 'WRONG'}")
    assert right, f"rank {rank}: the gradients are not the loss's"
print("✓ f and g give the gradients of the loss")
reveal("megatron_f_g")

# %% tests="megatron_f_g_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random tensors and gradients, float32 and float64:
# each direction of f and g against values computed here, and what each rank did in each.
### BEGIN HIDDEN TESTS
# Seed 002 gives the conjugate operators as hand-written forward/backward methods of
# nn.Modules, which autograd never calls; here they are torch.autograd.Functions, and the
# reason (autograd runs dist.all_reduce's backward as the identity, with a warning) is shown.
from autograder.grade_cell import grade
grade(megatron_f_g)
### END HIDDEN TESTS

# %% [markdown] why="megatron_f_g"
# **Why.** f's forward hands one $x$ to every rank's branch, so the loss depends on $x$ through
# every rank: its gradient is the **sum** of the ranks' gradients, an all-reduce in the
# backward pass. g's forward sums; each partial sum enters the total with weight 1, and every
# rank already holds the same $\partial L/\partial y$ (one loss, computed the same on every
# rank), so its backward is the **identity**: the very pass-through that autograd ran for the
# demo's in-place all-reduce, which was right there too. What the demo lacked is f. Each rank's
# graph holds only its own term, so its x gets $a_r$, while the loss depends on x through every
# rank's term: nothing summed x's gradient over the ranks. Under another convention, where each
# rank computes its own loss $L_r$ and training minimises their sum, the gradient of a summed
# tensor is the sum of the ranks' gradients, an all-reduce: PyTorch's
# `torch.distributed.nn.functional.all_reduce` follows that convention (its backward
# all-reduces the gradient), and used as g under the one-loss convention it multiplies the
# gradients by $N$: in place of `dist.all_reduce` in the demo it gives
# $\partial L/\partial x$ = 2 and 4, and 6 on both ranks with f, where the loss's is 3
# (torch 2.13).
#
# **The seed's backward, fixed.** In section 3's layer $x$ reached every output feature through
# every rank's rows, so $\partial L/\partial x = \sum_r \bar y_r W_r$: each rank holds one term,
# and the all-reduce is f's backward at the layer's input. The weight and bias gradients of a
# rank's rows involve only its rows: no communication (the seed's all-reduces add the gradients
# of *different* rows). Dually, section 2's layer with a whole input needs its input gradient
# all-gathered (each rank holds its features' columns), and none with an input already split.

# %% [markdown]
# ## 5. The tensor-parallel MLP
#
# A transformer's MLP is $y = \mathrm{GeLU}(x W_1^\top)\, W_2^\top$, with $x$ of width $d$,
# $h$ hidden units ($h = 4d$ usually), $W_1$ stored $h \times d$ and $W_2$ stored $d \times h$,
# as `nn.Linear` stores them. Like LLaMA's MLP, this one has no biases.
#
# **The situation.** $x$ is whole on every rank. You may cut each weight in bands of rows or of
# columns. **The budget**: each rank does $\frac{1}{N}$ of the
# multiplications; the forward pass may communicate **once**, and so may the backward, and the
# hidden activation ($b \times h$ numbers, $h/d$ times the output) never crosses the wire; every
# rank ends with the whole $y$, and with the gradient of every parameter it used (each rank's
# optimizer updates its own copy); autograd computes them, through f and g. One fact to plan
# with: GeLU is not linear.

# %%
a, b = torch.tensor(1.0), torch.tensor(-1.0)
print(f"GeLU(a + b) = {F.gelu(a + b).item():.4f}, GeLU(a) + GeLU(b) = "
      f"{(F.gelu(a) + F.gelu(b)).item():.4f}")

# %% [markdown]
# The MLP is written for you, as one tensor-parallel **region** of two layers with GeLU
# between them, which each rank runs alone on what the first layer left it. `tp_region`, yours,
# gives the region's two ends as functions: `region_in(x, w)`, its first layer, and
# `region_out(h, w)`, its last, each handed the full weight of its layer (which part a rank
# uses is the exercise: use `shard`). Section 6's attention layer ends in your
# `region_out` too.

# %%
def tp_mlp(rank, world_size, x, w1, w2, ops=None):
    """GeLU(x @ w1.T) @ w2.T, tensor-parallel over the ranks.

    x: (..., d); w1: (h, d), w2: (d, h): the full weights (they may require grad: gradients
    flow into the parts this rank uses). Returns the whole output,
    (..., d), on every rank. ops: the pair of autograd Functions, Megatron's (f, g) by default
    (section 8 passes another pair).
    """
    region_in, region_out = tp_region(rank, world_size, ops)
    return region_out(F.gelu(region_in(x, w1)), w2)


# %% [markdown]
# `region_out` is given: it passes what your `last(h, w)` returns through g. Write `region_in`
# and `last`: which part of each weight a rank multiplies by (`shard` cuts it), and where
# section 4's operators are needed; autograd does the rest. Both ends are one choice, so they
# are one blank.

# %% solution="tp_region"
def tp_region(rank, world_size, ops=None):
    """(region_in, region_out): the two ends of a tensor-parallel region, on this rank, with
    the autograd Functions ops (Megatron's f and g by default).

    region_in(x, w): the region's first layer, F.linear(x, w), with x whole on every rank;
    returns what this rank computes of it. region_out(h, w): the region's last layer,
    F.linear(h, w), on h as this rank holds it: g of last(h, w). w: the full weight of the
    layer.
    """
    f, g = ops or megatron_f_g()
    region_in = lambda x, w: F.linear(f.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, 1))  # BLANK `region_in = lambda x, w: F.linear(f.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, 1))` region_in, and last: the last layer without g (two functions: def or lambda) # ACCEPT `region_in = lambda x, w: f.apply(x) @ w.chunk(world_size)[rank].t(); last = lambda h, w: h @ w.chunk(world_size, dim=-1)[rank].t()` `region_in = lambda x, w: F.linear(f.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, -1))` # REJECT `region_in = lambda x, w: F.linear(x, shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, 1))` `region_in = lambda x, w: F.linear(f.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, 0))` `region_in = lambda x, w: F.linear(f.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: g.apply(F.linear(h, shard(w, rank, world_size, 1)))` `region_in = lambda x, w: F.linear(f.apply(x), w); last = lambda h, w: F.linear(h, w) / world_size` `region_in = lambda x, w: F.linear(g.apply(x), shard(w, rank, world_size, 0)); last = lambda h, w: F.linear(h, shard(w, rank, world_size, 1))`

    def region_out(h, w):
        return g.apply(last(h, w))

    return region_in, region_out


# %% [markdown]
# The check runs one forward and backward of `tp_mlp` on 2 and on 4 ranks and compares with
# the single-device MLP: the output and $\partial L/\partial x$ on every rank, and every weight
# gradient, compared with the single device's. It fails on torch's warnings, if any. It does
# not measure each rank's work: the hidden tests do (about $\frac{1}{N}$ of the
# multiplications, whatever computes them).

# %%
require_filled(megatron_f_g)  # names any blank still empty
require_filled(tp_region)


def mlp_step(rank, world_size, x, w1, w2, grad_y):
    """tp_mlp forward and backward on this rank: the output, every gradient it holds, the
    collectives it called and the warnings torch gave."""
    leaves = [t.clone().requires_grad_() for t in (x, w1, w2)]
    with count_collectives() as calls, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = tp_mlp(rank, world_size, *leaves)
        y.backward(grad_y)
    said = [str(w.message).split(". ")[0] for w in caught]
    return [y.detach()] + [leaf.grad for leaf in leaves], calls, said


D, H = 16, 64
torch.manual_seed(1)
mlp = nn.Sequential(nn.Linear(D, H, bias=False), nn.GELU(),
                    nn.Linear(H, D, bias=False)).double()
x, grad_y = torch.randn(3, D, dtype=torch.float64), torch.randn(3, D, dtype=torch.float64)
x_leaf = x.clone().requires_grad_()
y = mlp(x_leaf)
y.backward(grad_y)
params = [p.detach() for p in mlp.parameters()]  # w1, w2
names = ["W1", "W2"]
for n in (2, 4):
    results = run(mlp_step, x, *params, grad_y, world_size=n)
    for rank, ((y_r, grad_x, *grads), _, said) in enumerate(results):
        assert not said, f"{n} ranks, rank {rank}: torch warned: {said}"
        assert torch.allclose(y_r, y), f"{n} ranks: rank {rank}'s output"
        assert torch.allclose(grad_x, x_leaf.grad), f"{n} ranks: rank {rank}'s dL/dx"
    for k, param in enumerate(mlp.parameters()):
        each = [values[2 + k] for values, _, _ in results]
        assert None not in each, \
            f"{n} ranks: rank {each.index(None)} holds no gradient of {names[k]}, so its " \
            "optimizer could not update its copy: every rank must use each parameter it holds"
        assert (torch.allclose(sum(each), param.grad)
                or all(torch.allclose(grad, param.grad) for grad in each)), \
            f"{n} ranks: the gradient of {names[k]}"
    print(f"{n} ranks: output, dL/dx and every weight gradient equal the single-device MLP's; "
          "no warning")
print("✓ tp_mlp is the MLP, forward and backward")
reveal("tp_region")

# %% tests="tp_region_tests" points=1
# Hidden tests (1 point): the MLP built on your two ends, on 1, 2 and 4 ranks, random shapes,
# float32 and float64: output, input gradient and every weight gradient against autograd on
# one process (with a correct f and g); what each rank did, forward and backward: its
# collectives, its warnings, and its work.
### BEGIN HIDDEN TESTS
# Seed 003 section 10's title asks for the AllReduce and ReduceScatter calls of the MLP: it
# has none of the second kind (one all-reduce forward, one backward, as its own text says).
# Issue 50, round 7: the ends are the learner's helpers, so that section 6's given attention
# (which ends in region_out) shows neither the cut, nor g, nor where the bias goes. Round 9:
# region_out, which adds the bias after last(h, w), is given: where the bias goes is asked once,
# in row_parallel_forward; here the blank is the cuts and where f and g stand. Round 10: g is
# given too (region_out passes last(h, w) through g): the sum of partial sums is asked in
# row_parallel_forward and megatron_f_g only; the blank is Megatron's pairing of the two cuts
# (and f at the region's start). Round 11: the MLP (and the attention) has no biases, so no
# given code adds a bias after a sum.
from autograder.grade_cell import grade
grade(tp_region)
### END HIDDEN TESTS

# %% [markdown] why="tp_region"
# **Why: Megatron's argument** (Shoeybi et al., 2019, §3). Cut $W_1$ by its input features
# and every rank holds a *partial sum* of each hidden unit's input; since
# $\mathrm{GeLU}(a + b) \ne \mathrm{GeLU}(a) + \mathrm{GeLU}(b)$, those partial sums would have
# to be summed **before** the GeLU, a $b \times h$ message, and the output again after the
# second layer. Cut $W_1$ by its hidden units instead and each rank holds *complete* hidden
# units; GeLU acts on each unit alone, so it runs on the split activation as it is. That split
# activation is exactly what a second layer cut along the same hidden units can read: $W_2$ by
# its columns, section 2's cut, whose products are partial sums of the output. g adds them
# (the one message). f stands where $x$,
# whole on every rank, enters the first layer, so that its gradient is summed over the ranks.
#
# **Where f and g stand in any region.** f where it begins: its input is whole on every rank,
# and every rank's split layers read all of it. g where it ends: each rank holds a tensor
# shaped like the region's output, what its own split layers computed, and the layers after it
# need the output itself, whole. Nothing stands between them: what runs inside the region (the
# GeLU here, the heads' attention in section 6) runs on each rank alone.

# %% [markdown]
# ## 6. Attention with its heads split
#
# Multi-head attention runs $n_h$ heads side by side, and each head works alone. With
# $q = xW_q^\top$, $k = xW_k^\top$, $v = xW_v^\top$ (each of width $d$), head $i$ reads
# features $i\,d_h$ to $(i+1)\,d_h - 1$ of $q$, $k$ and $v$, $d_h = d/n_h$; the heads' outputs
# of width $d_h$ are concatenated, in head order, into the attention output, which the output
# projection $W_o$ ($d \times d$) multiplies. As in nanoGPT, whose `c_attn` is an
# `nn.Linear(d, 3d)`, the three input projections are stored as **one** fused weight `wqkv`
# ($3d \times d$): $W_q$, $W_k$ and $W_v$ stacked along dimension 0, in that order, so that one
# matmul computes $q$, $k$ and $v$ (see `attention` below). (GPT-2's `c_attn` is the same
# fusion stored transposed, a `Conv1D` of weight $d \times 3d$, with $q$, $k$ and $v$ along
# dimension 1.)
#
# **The situation**: $x$ whole on every rank; each rank computes $n_h/N$ whole heads (the
# softmax of a head needs all of its queries and keys), rank $r$ heads $r\frac{n_h}{N}$ to
# $(r+1)\frac{n_h}{N} - 1$, within the MLP's budget: one collective forward, one backward,
# $\frac{1}{N}$ of the work; the whole output on every rank. The layer ends in your
# `region_out`, with the output projection's full weight $W_o$ (no biases here either). The
# blank is its start, up to `qkv`.
#
# The plumbing, written for you: `split_heads` and `merge_heads` reshape between
# `(batch, seq, heads * head_dim)` and `(batch, heads, seq, head_dim)`, `attend` is causal
# attention for every head at once, and `attention` is the single-device layer.

# %%
def split_heads(t, num_heads):
    """(batch, seq, num_heads * head_dim) -> (batch, num_heads, seq, head_dim)"""
    batch, seq, width = t.shape
    return t.view(batch, seq, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(t):
    """(batch, heads, seq, head_dim) -> (batch, seq, heads * head_dim)"""
    batch, heads, seq, head_dim = t.shape
    return t.transpose(1, 2).reshape(batch, seq, heads * head_dim)


def attend(q, k, v):
    """Causal softmax attention of every head: position i looks at positions 0..i."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (batch, heads, seq, seq)
    seq = q.shape[-2]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def attention(x, wqkv, wo, num_heads):
    """Single-device causal multi-head attention: x (batch, seq, d), wqkv (3d, d), wo (d, d)."""
    q, k, v = (split_heads(t, num_heads) for t in F.linear(x, wqkv).chunk(3, dim=-1))
    return F.linear(merge_heads(attend(q, k, v)), wo)


# %% solution="tp_attention"
def tp_attention(rank, world_size, x, wqkv, wo, num_heads):
    """attention(x, wqkv, wo, num_heads) with the heads split over the ranks.

    x: (batch, seq, d), whole on every rank; wqkv: (3d, d), wo: (d, d): the full weights. Returns the whole output, (batch, seq, d), on every rank.
    """
    if num_heads % world_size != 0:
        raise ValueError(f"{num_heads} heads cannot be split evenly over {world_size} ranks")
    _, region_out = tp_region(rank, world_size)
    f, _ = megatron_f_g(); mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); qkv = F.linear(f.apply(x), torch.cat([w[mine] for w in wqkv.chunk(3)]))  # BLANK `f, _ = megatron_f_g(); mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); qkv = F.linear(f.apply(x), torch.cat([w[mine] for w in wqkv.chunk(3)]))` qkv: (batch, seq, 3d/N) (a few statements) # ACCEPT `f = megatron_f_g()[0]; head_dim = x.shape[-1] // num_heads; k = num_heads // world_size * head_dim; mine = slice(rank * k, (rank + 1) * k); wq, wk, wv = wqkv.chunk(3); qkv = f.apply(x) @ torch.cat((wq[mine], wk[mine], wv[mine]), dim=0).t()` # REJECT `f, _ = megatron_f_g(); mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); qkv = F.linear(f.apply(x), shard(wqkv, rank, world_size, 0))` `f, _ = megatron_f_g(); mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); qkv = F.linear(x, torch.cat([w[mine] for w in wqkv.chunk(3)]))` `f, _ = megatron_f_g(); mine = slice(rank * num_heads // world_size, (rank + 1) * num_heads // world_size); qkv = F.linear(f.apply(x), torch.cat([w[mine] for w in wqkv.chunk(3)]))` `f, _ = megatron_f_g(); mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); qkv = F.linear(f.apply(x), wqkv[mine].repeat(3, 1))`
    q, k, v = (split_heads(t, num_heads // world_size) for t in qkv.chunk(3, dim=-1))
    return region_out(merge_heads(attend(q, k, v)), wo)


# %%
require_filled(tp_attention)  # names any blank still empty


def attention_step(rank, world_size, x, weights, grad_y, num_heads):
    leaves = [t.clone().requires_grad_() for t in (x, *weights)]
    y = tp_attention(rank, world_size, *leaves, num_heads=num_heads)
    y.backward(grad_y)
    return [y.detach()] + [leaf.grad for leaf in leaves]


torch.manual_seed(2)
B, L, HEADS = 2, 5, 4
x, grad_y = torch.randn(B, L, D, dtype=torch.float64), torch.randn(B, L, D, dtype=torch.float64)
weights = [torch.randn(3 * D, D, dtype=torch.float64) / D**0.5,  # wqkv
           torch.randn(D, D, dtype=torch.float64) / D**0.5]  # wo
leaves = [t.clone().requires_grad_() for t in (x, *weights)]
y = attention(*leaves, num_heads=HEADS)
y.backward(grad_y)
for n in (2, 4):
    results = run(attention_step, x, weights, grad_y, HEADS, world_size=n)
    for rank, (y_r, grad_x, *_) in enumerate(results):
        assert torch.allclose(y_r, y), f"{n} ranks: rank {rank}'s output"
        assert torch.allclose(grad_x, leaves[0].grad), f"{n} ranks: rank {rank}'s dL/dx"
    for k, name in enumerate(["Wqkv", "Wo"]):
        each = [result[2 + k] for result in results]
        assert None not in each, \
            f"{n} ranks: rank {each.index(None)} holds no gradient of {name}, so its " \
            "optimizer could not update its copy: every rank must use each parameter it holds"
        assert (torch.allclose(sum(each), leaves[1 + k].grad)
                or all(torch.allclose(grad, leaves[1 + k].grad) for grad in each)), \
            f"{n} ranks: the gradient of {name}"
    print(f"{n} ranks, {HEADS // n} of the {HEADS} heads on each: output, dL/dx and every weight "
          "gradient match")
print("✓ tp_attention is the attention layer, forward and backward (each rank's work: the "
      "hidden tests)")
reveal("tp_attention")

# %% tests="tp_attention_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random shapes and head counts, float32 and
# float64: output, input gradient and every weight gradient against autograd on one process
# (with a correct f, g and region_out); what each rank did, and its work.
### BEGIN HIDDEN TESTS
# Seed 003 section 11's sketch uses Q_weights_parts, K_weights_parts and V_weights_parts that
# it never defines (it is given QKV_weights_parts); here the weight is one fused QKV and the
# rank's rows are its heads' band in each third.
from autograder.grade_cell import grade
grade(tp_attention)
### END HIDDEN TESTS

# %% [markdown] why="tp_attention"
# **Why.** A rank's heads need only their own queries, keys and values, so the attention itself
# runs on each rank for its heads with no communication, as the GeLU did for its hidden units;
# their outputs meet only in the output projection, cut by its columns in `region_out`, whose
# partial sums are the one message. $x$ enters through f, as in `region_in`: every rank's heads
# read all of it, so its gradient is summed. The rows a rank needs are its heads' band,
# $r\frac{d}{N}$ to $(r+1)\frac{d}{N} - 1$, **in each third** of the fused `wqkv`: a plain
# `shard(wqkv, rank, N, 0)`
# takes $\frac{3d}{N}$ consecutive rows, which on 2 ranks are all of $W_q$ and half of $W_k$ on
# rank 0, and the output is wrong with no error. This is the fused-QKV pitfall of real
# tensor-parallel code. Megatron-LM's own fused QKV weight is laid out per query group (per
# head when there is no grouped-query attention: each head's $q$, $k$ and $v$ rows together;
# with groups, a group's query heads' rows, then its $k$ and $v$ rows), which is why a plain
# cut of its rows gives each rank its own heads there.

# %% [markdown]
# ## 7. What it costs, measured
#
# `count_collectives()` records, on a rank, every collective that the code inside it calls:
# its name, whether autograd's backward pass called it, the size $S$ of the whole tensor it
# reduces or gathers, and the bytes one rank sends if the collective runs as a ring (notebook
# 01): $2\frac{N-1}{N}S$ for an all-reduce, $\frac{N-1}{N}S$ for an
# all-gather.
#
# **Predict before you run.** Two layouts compute the same MLP on $N$ ranks: yours (`tp_mlp`),
# and section 1's layout twice, `column_parallel_forward` for each layer. For a batch of $b$
# rows of width $d$, $h$ hidden units and $e$ bytes a number, how many bytes does one rank send
# in the **forward** pass of each? Write both as formulas; the check measures them.

# %% solution="mlp_bytes"
def mlp_bytes(world_size, b, d, h, e):
    """(yours, rows_twice): the bytes one rank sends in the forward pass of the MLP, in tp_mlp's
    layout and in section 1's layout twice (ring collectives); e bytes a number."""
    n = world_size
    yours, rows_twice = 2 * (n - 1) / n * b * d * e, (n - 1) / n * b * (h + d) * e  # BLANK `yours, rows_twice = 2 * (n - 1) / n * b * d * e, (n - 1) / n * b * (h + d) * e` both formulas # ACCEPT `yours, rows_twice = 2 * (n - 1) * b * d * e / n, (n - 1) * (b * h * e + b * d * e) / n` # REJECT `yours, rows_twice = 2 * (n - 1) / n * b * h * e, (n - 1) / n * b * (h + d) * e` `yours, rows_twice = 2 * (n - 1) / n * b * d * e, 2 * (n - 1) / n * b * d * e` `yours, rows_twice = 2 * (n - 1) / n * b * d * e, (n - 1) / n * b * h * e` `yours, rows_twice = 4 * (n - 1) / n * b * d * e, (n - 1) / n * b * (h + d) * e`
    return yours, rows_twice


# %% [markdown]
# The check runs both layouts, forward only, on 2 and 4 ranks, for $h = 4d$ and $h = d$, and
# compares what rank 0 sent with your formulas.

# %%
require_filled(mlp_bytes)  # names any blank still empty
require_filled(tp_region)
require_filled(column_parallel_forward)


def forward_bytes(rank, world_size, x, w1, w2):
    with torch.no_grad(), count_collectives() as yours:
        y = tp_mlp(rank, world_size, x, w1, w2)
    def mine(t):  # section 1's cut
        return shard(t, rank, world_size, 0)

    def no_bias(w):  # this rank's entries of a bias of zeros: the MLP has none
        return mine(w.new_zeros(w.shape[0]))

    with count_collectives() as rows_twice:
        hidden = column_parallel_forward(rank, world_size, x, mine(w1), no_bias(w1))
        y2 = column_parallel_forward(rank, world_size, F.gelu(hidden), mine(w2), no_bias(w2))
    assert torch.allclose(y, y2, atol=1e-5), "both layouts compute the same MLP"
    return yours, rows_twice


ROWS = 8  # b
x32 = torch.randn(ROWS, D)
report = []
for n in (2, 4):
    for hidden_units in (4 * D, D):
        w1 = torch.randn(hidden_units, D) / D**0.5
        w2 = torch.randn(D, hidden_units) / hidden_units**0.5
        measured = run(forward_bytes, x32, w1, w2, world_size=n)[0]
        sent = [sum(c.sent for c in calls) for calls in measured]
        predicted = mlp_bytes(n, ROWS, D, hidden_units, 4)
        h = "4d" if hidden_units == 4 * D else "d"
        for got, want, which in zip(sent, predicted, ("yours", "rows twice"), strict=True):
            assert abs(got - want) < 1e-6, f"N = {n}, h = {h}: {which}: the formula is wrong"
        report.append(f"N = {n}, h = {h}: yours {len(measured[0])} collective(s), {sent[0]:g} B "
                      f"(predicted {predicted[0]:g}); rows twice {len(measured[1])}, "
                      f"{sent[1]:g} B (predicted {predicted[1]:g})")
print("\n".join(report))  # the measured bytes, once every formula has matched them
print("✓ your formulas predict what the ranks sent")
reveal("mlp_bytes")

# %% tests="mlp_bytes_tests" points=1
# Hidden tests (1 point): the two formulas for random world sizes, batches, widths, hidden
# sizes and bytes per number, against the ring's bytes of each layout's collectives.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(mlp_bytes)
### END HIDDEN TESTS

# %% [markdown] why="mlp_bytes"
# **Why not two row-cut layers?** Yours sends one all-reduce of $b \times d$; the other
# all-gathers the first layer's output ($b \times h$, because the second layer needs its whole
# input) and then the second's ($b \times d$). The ratio is $\frac{h + d}{2d}$: **2.5** for
# the usual $h = 4d$, 1 for $h = d$, so the "twice the communication" one often reads is right
# only for $h = 3d$; and it is two messages instead of one. In the backward pass yours sends
# one all-reduce of $b \times d$; the other needs one collective per layer: the second layer's
# input was all-gathered, so the gradient of its input is a sum over the ranks of which each
# rank needs only its own hidden units, a collective on $b \times h$ that section 8 comes
# back to (it can send $\frac{N-1}{N}\,b\,h\,e$, half what an all-reduce of it would), and
# the first layer's input gradient an all-reduce of $b \times d$: $\frac{h + 2d}{2d} = 3$
# times yours for $h = 4d$.
#
# One training step of your MLP, forward and backward, on 2 and 4 ranks:

# %%
def count_mlp(rank, world_size, x, w1, w2, grad_y):
    leaves = [t.clone().requires_grad_() for t in (x, w1, w2)]
    with count_collectives() as calls:
        y = tp_mlp(rank, world_size, *leaves)
        y.backward(grad_y)
    return calls


require_filled(mlp_bytes)  # names any blank still empty
params32 = [p.float() for p in params]
grad_y32 = torch.randn(ROWS, D)
for n in (2, 4):
    calls = run(count_mlp, x32, *params32, grad_y32, world_size=n)[0]
    step = sum(c.sent for c in calls)
    assert step == 2 * mlp_bytes(n, ROWS, D, H, 4)[0], "the backward sends what the forward does"
    print(f"--- {n} ranks\n{format_calls(calls)}")
print("✓ one step sends twice the forward's bytes")

# %% [markdown]
# ### One transformer layer
#
# A layer is attention then the MLP, each with a residual and a layer norm (which every rank
# computes whole, on the whole activation). Count its collectives in one training step:

# %%
require_filled(tp_attention)  # names any blank still empty
require_filled(mlp_bytes)


def tp_layer(rank, world_size, x, p):
    h = x + tp_attention(rank, world_size, F.layer_norm(x, (D,)), p["wqkv"], p["wo"],
                         num_heads=HEADS)
    return h + tp_mlp(rank, world_size, F.layer_norm(h, (D,)), p["w1"], p["w2"])


def count_layer(rank, world_size, x, p, grad_y):
    x = x.clone().requires_grad_()
    p = {name: t.clone().requires_grad_() for name, t in p.items()}
    with count_collectives() as calls:
        tp_layer(rank, world_size, x, p).backward(grad_y)
    return calls


p = dict(zip(["wqkv", "wo"], [w.float() for w in weights], strict=True))
p.update(zip(["w1", "w2"], params32, strict=True))
x_layer, grad_layer = torch.randn(B, L, D), torch.randn(B, L, D)
calls = run(count_layer, x_layer, p, grad_layer, world_size=2)[0]
forward = [c for c in calls if not c.backward]
backward = [c for c in calls if c.backward]
assert (len(forward), len(backward)) == (2, 2), (len(forward), len(backward))
assert sum(c.sent for c in forward) == 2 * mlp_bytes(2, B * L, D, H, 4)[0], \
    "each block's forward sends what your formula for tp_mlp's layout predicts"
print(format_calls(calls))
show_comm_table([("tensor parallel", f"{len(forward)} {forward[0].name}",
                  f"{len(backward)} {backward[0].name}")],
                title="collectives per transformer layer (measured, 2 ranks)")
print("✓ 2 collectives forward, 2 backward")

# %% [markdown]
# In this code every one of these collectives blocks: the next layer cannot start before it
# ends. (Production systems such as Megatron-LM and Transformer Engine hide part of it by
# overlapping the communication with matmuls, but a layer still waits on its inputs.) That is
# why tensor parallelism usually stays inside a node, on the fastest links (NVLink), typically
# $N \le 8$, while data and pipeline parallelism cross nodes. (Activation recomputation, which
# notebook 05 teaches in its section 9, reruns a layer's forward pass during the backward pass,
# and with it the forward's collectives: 2 more per layer when the whole layer is recomputed.
# The selective recomputation of Korthikanti et al. (section 8) reruns only the attention core,
# which has no collective inside, and adds none.)
#
# ## 8. Sequence parallelism
#
# Look again at the layer: outside attention and the MLP (between the attention and the MLP of
# a block, and between the MLP of one block and the attention of the next), every rank computes
# the *same* residual add, dropout and layer norm on the *whole* activation, and keeps the whole
# activation for the backward pass. Megatron-LM's sequence parallelism
# (Korthikanti et al., 2022, "Reducing Activation Recomputation in Large Transformer Models")
# splits these regions along the **sequence** instead: each rank handles $s/N$ of the $s$
# positions (here $s$ is the sequence length), which
# layer norm and dropout allow, as they treat each position alone. (Dropout then needs a
# random stream per rank, so that the ranks do not drop the same pattern on different
# positions; Megatron-LM keeps one with its RNG tracker.)
#
# **The situation.** Megatron orders activations as **(sequence, batch, d)**, so the sequence is
# dimension 0. At the end of a block rank $q$ holds a tensor $t_q$ over *every* position, and
# the block's output is $t_0 + \dots + t_{N-1}$, as g would make it. Who must hold what, on 2
# ranks and $s = 4$ positions (rows):
#
# ```text
#                   rank 0 holds                 rank 1 holds
# first             t_0, rows 0-3                t_1, rows 0-3
# in between        rows 0-1 of (t_0 + t_1)      rows 2-3 of (t_0 + t_1)     <- the norm region
# at the end        rows 0-3 of (t_0 + t_1)      rows 0-3 of (t_0 + t_1)     <- the next block
# ```
#
# On $N$ ranks, "in between" rank $r$ holds rows $r\frac{s}{N}$ to $(r+1)\frac{s}{N} - 1$.
# The step to the end is given: `gather_rows(part)` returns every rank's `part`, stacked along
# dimension 0 in rank order (it is defined after your check). Write the step in between,
# `rows_of_sum(t)`. **The budget**: both steps together send, counted as a ring would send, no
# more bytes than one all-reduce of `t`.
#
# Collectives, each on an example of its own (every rank calls the line); any other collective
# of `torch.distributed` that notebook 01 met may be used as well:
#
# ```python
# # 2 ranks; rank r holds v = [r+1, r+1, r+1, r+1]
# dist.all_reduce(v)                      # v == [3, 3, 3, 3] on both
#
# # 2 ranks; rank r holds w = [10 r, 10 r]
# dist.broadcast(w, src=1)                # w == [10, 10] on both: rank 1's
#
# # 2 ranks; rank r holds a = [r, r, 10 + r, 10 + r]
# got = torch.empty(4)
# dist.all_to_all_single(got, a)          # block q of a goes to rank q:
# # rank 0 gets [0, 0, 1, 1], rank 1 gets [10, 10, 11, 11]
#
# # 3 ranks; rank r holds u = [10 r]
# out = torch.empty(3)
# dist.all_gather_single(out, u)          # out == [0, 10, 20] on every rank
# ```

# %% solution="rows_of_sum"
def rows_of_sum(t):
    """This rank's rows of the sum of t over the ranks, on the default group.

    t: (seq, ...), seq a multiple of the world size. Returns (seq / N, ...): rows
    rank * seq / N to (rank + 1) * seq / N - 1 of the sum.
    """
    world_size = dist.get_world_size()
    if t.shape[0] % world_size != 0:
        raise ValueError(f"{t.shape[0]} positions cannot be split evenly over {world_size} "
                         "ranks")
    part = t.new_empty((t.shape[0] // world_size, *t.shape[1:])); dist.reduce_scatter_single(part, t.contiguous())  # BLANK `part = t.new_empty((t.shape[0] // world_size, *t.shape[1:])); dist.reduce_scatter_single(part, t.contiguous())` part, this rank's rows of the sum (a few statements) # ACCEPT `part = torch.empty_like(t.chunk(world_size)[0]); dist.reduce_scatter(part, list(t.contiguous().chunk(world_size)))` `received = torch.empty_like(t); dist.all_to_all_single(received, t.contiguous()); part = sum(received.chunk(world_size))` `received = torch.empty_like(t); dist.all_to_all_single(received, t.contiguous()); part = received.view(world_size, -1, *t.shape[1:]).sum(0)` # REJECT `whole = t.clone(); dist.all_reduce(whole); part = whole.chunk(world_size)[dist.get_rank()]` `part = t.chunk(world_size)[dist.get_rank()]` `received = torch.empty_like(t); dist.all_to_all_single(received, t.contiguous()); part = received.chunk(world_size)[dist.get_rank()]`
    return part


# %% [markdown]
# The check, on 2 and 4 ranks: rank $r$ holds $(r + 1)\,t$; `rows_of_sum`, then the step to
# the end (every rank's part, into a list), against `dist.all_reduce` of the same tensor: the
# values, and the bytes each sends (ring).

# %%
require_filled(rows_of_sum)  # names any blank still empty


def sp_versus_all_reduce(rank, world_size, t):
    """rows_of_sum then the step to the end, and dist.all_reduce, of the same tensor (rank r
    adds (r + 1) t): the values, and what each sends."""
    mine = t * (rank + 1)
    with count_collectives() as split:
        part = rows_of_sum(mine)
        parts = [torch.empty_like(part) for _ in range(world_size)]
        dist.all_gather(parts, part)
    total = torch.cat(parts)
    expected = mine.clone()
    with count_collectives() as whole:
        dist.all_reduce(expected)
    return part, total, expected, split, sum(c.sent for c in whole)


t = torch.randn(8, B, D)  # (seq, batch, d)
for n in (2, 4):
    for rank, (part, total, expected, split, sent_whole) in enumerate(
            run(sp_versus_all_reduce, t, world_size=n)):
        assert torch.allclose(part, expected.chunk(n)[rank], atol=1e-6), \
            f"{n} ranks: rank {rank}'s rows of the sum"
        assert torch.allclose(total, expected, atol=1e-6), f"{n} ranks: rank {rank}'s sum"
        sent_split = sum(c.sent for c in split)
        assert sent_split <= sent_whole + 1e-9, \
            f"{n} ranks: the two steps sent {sent_split:g} B, one all-reduce sends {sent_whole:g} B"
    print(f"{n} ranks: in between each rank holds {tuple(part.shape)} of {tuple(t.shape)}; the "
          f"two steps send {sent_split:g} B, one all-reduce {sent_whole:g} B")
print("✓ rows_of_sum, then the step to the end, give the sum, within one all-reduce's bytes")
reveal("rows_of_sum")

# %% tests="rows_of_sum_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random shapes, float32 and float64: this rank's
# rows of the sum, against the sum computed here; a length the world size does not divide;
# what each rank called, and its bytes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(rows_of_sum)
### END HIDDEN TESTS

# %% [markdown] why="rows_of_sum"
# **Why.** This rank's rows of the sum are a **reduce-scatter** ($\frac{N-1}{N}S$ per rank in
# a ring, as an all-gather), and an all-reduce *is* a
# reduce-scatter followed by an all-gather (notebook 01's ring does exactly that): each sends
# $\frac{N-1}{N}S$ per rank in a ring, together the all-reduce's $2\frac{N-1}{N}S$. Same bytes,
# and the activations of the norm region are $N$ times smaller. An all-reduce followed by a
# slice would give the same rows, but it sends the whole all-reduce's bytes *before* the
# all-gather, and every rank would hold the whole sum where it should hold $\frac{1}{N}$.
# An all-to-all and a local sum of the $N$ blocks received is a reduce-scatter written out: it
# sends the same bytes. (torch 2.13 calls the one-tensor form `dist.reduce_scatter_single`, and
# the all-gather's `dist.all_gather_single`; older releases call them
# `dist.reduce_scatter_tensor` and `dist.all_gather_into_tensor`, names that 2.13 keeps but
# marks deprecated.)

# %% [markdown]
# The step to the end, `gather_rows`, given:

# %%
def gather_rows(t):
    """Every rank's t, stacked along dimension 0 in rank order."""
    out = t.new_empty((dist.get_world_size() * t.shape[0], *t.shape[1:]))
    dist.all_gather_single(out, t.contiguous())
    return out

# %% [markdown]
# ### The sequence-parallel operators
#
# In a sequence-parallel layer, f and g change. Where a tensor-parallel block **begins**, each
# rank holds only its positions (after the sharded layer norm), but the block's first layer
# needs every position: `enter`'s forward is `gather_rows`. Where it **ends**, each rank holds
# a tensor over every position, and the sharded region
# that follows wants only this rank's positions of the sum: `leave`'s forward is your
# `rows_of_sum`. **At the end** of each backward, the gradient it returns must be the gradient
# of the loss (computed once, the same on every rank) with respect to its input, on this rank.
# `leave`'s backward is given: `gather_rows`. Write `enter`'s, with any collective of the box
# above or any helper of this notebook. **The budget**: enter's backward sends less than one
# all-reduce of its gradient.

# %%
def own_rows(t):
    """This rank's rows of its own t (no communication)."""
    return shard(t, dist.get_rank(), dist.get_world_size(), 0).contiguous()


# %% solution="sp_f_g"
def sp_f_g():
    """(enter, leave): the sequence-parallel operators, as autograd Functions on the default
    group."""
    enter_backward = rows_of_sum  # BLANK `enter_backward = rows_of_sum` the backward pass of enter: a function of the gradient # ACCEPT `enter_backward = lambda grad: rows_of_sum(grad.clone())` # REJECT `enter_backward = gather_rows` `enter_backward = own_rows` `enter_backward = lambda grad: own_rows(all_reduce_sum(grad))` `enter_backward = lambda grad: grad`
    leave_backward = gather_rows

    class enter(torch.autograd.Function):
        """Where a tensor-parallel block begins."""

        @staticmethod
        def forward(ctx, part):
            return gather_rows(part)

        @staticmethod
        def backward(ctx, grad):
            return enter_backward(grad)

    class leave(torch.autograd.Function):
        """Where it ends."""

        @staticmethod
        def forward(ctx, t):
            return rows_of_sum(t)

        @staticmethod
        def backward(ctx, grad):
            return leave_backward(grad)

    return enter, leave


# %% [markdown]
# The check, on 2 ranks: rank $r$'s positions go through `enter`, each rank weighs the
# gathered rows in its own way, and the block ends in `leave`; the loss is the same on every
# rank. It compares every gradient with autograd on one process, where the ranks' computations
# are written out side by side, and counts the bytes of enter's backward against one
# all-reduce of its gradient.

# %%
require_filled(sp_f_g)  # names any blank still empty


def try_sp_f_g(rank, world_size, parts, weights, grads):
    """The block's gradient of this rank's positions; then the bytes of enter's backward
    alone, and of one all-reduce of its gradient."""
    enter, leave = sp_f_g()
    part = parts[rank].clone().requires_grad_()
    out = leave.apply(enter.apply(part) * weights[rank])  # (s / N, ...)
    out.backward(grads[rank])
    gathered = enter.apply(parts[rank].clone().requires_grad_())  # (s, ...)
    with count_collectives() as calls:
        gathered.backward(weights[rank].clone())
    with count_collectives() as whole:
        all_reduce_sum(weights[rank])
    return part.grad, sum(c.sent for c in calls), sum(c.sent for c in whole)


def sp_single_device(parts, weights, grads):
    """The same computation on one process: the block's output is the sum of every rank's
    weighted rows; rank r's positions of it meet the loss through grads[r]."""
    leaves = [t.clone().requires_grad_() for t in parts]
    gathered = torch.cat(leaves)
    total = sum(gathered * w for w in weights)
    (total * torch.cat(grads)).sum().backward()
    return [t.grad for t in leaves]


torch.manual_seed(3)
parts = [torch.randn(2, 3, dtype=torch.float64) for _ in range(2)]
sp_weights = [torch.randn(4, 3, dtype=torch.float64) for _ in range(2)]
sp_grads = [torch.randn(2, 3, dtype=torch.float64) for _ in range(2)]
want = sp_single_device(parts, sp_weights, sp_grads)
measured = []
for rank, (got, sent, one_all_reduce) in enumerate(run(try_sp_f_g, parts, sp_weights,
                                                       sp_grads, world_size=2)):
    assert torch.allclose(got, want[rank]), f"rank {rank}: the gradient of its positions"
    assert sent < one_all_reduce, \
        f"rank {rank}: enter's backward sent {sent:g} B, not less than one all-reduce of its " \
        f"gradient ({one_all_reduce:g} B)"
    measured.append(f"rank {rank}: the gradient of its positions is right; enter's backward "
                    f"sent {sent:g} B, one all-reduce of its gradient {one_all_reduce:g} B")
print("\n".join(measured))  # the measured bytes, once every check has passed
print("✓ enter and leave give the gradients of the loss; enter's backward is within budget")
reveal("sp_f_g")

# %% tests="sp_f_g_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, random shapes, float32 and float64: each
# direction of enter and leave against the values computed here, and what each rank did in
# each (with a correct rows_of_sum, so that a mistake there costs its own point only).
### BEGIN HIDDEN TESTS
# The seeds only describe this pair in words; it is an exercise here (issue 23).
from autograder.grade_cell import grade
grade(sp_f_g)
### END HIDDEN TESTS

# %% [markdown] why="sp_f_g"
# **Why.** `enter` hands this rank's positions to every rank's branch, so their gradient is the
# sum of every rank's gradient for those positions: a **reduce-scatter** (each rank gets its own
# positions of the sum: `rows_of_sum`). `leave` takes each rank's partial sum into every rank's
# positions of the total with weight 1, so the gradient of a partial sum is every rank's
# gradient for its own positions, side by side: an **all-gather** (`gather_rows`). In the
# backward pass the two together again send one all-reduce's bytes: a reduce-scatter and an
# all-gather, each half of it. An all-reduce and a slice would give enter's gradient too, for
# twice the bytes of the reduce-scatter.
#
# Names: Korthikanti et al. call the all-gather at the block's start (`enter`) $g$ and the
# reduce-scatter at its end (`leave`) $\bar g$. Mind the clash with section 4: there
# Megatron-LM's (Shoeybi et al.) $g$ is the all-reduce at the block's **end**, and $f$ the one
# at its start.
#
# The pair around the MLP block of a sequence-parallel layer: its input arrives as this rank's
# positions; layer norm on those; then `tp_mlp` on your two ends, with `enter` and `leave` in
# place of f and g; out come this rank's positions of the output. It equals the
# tensor-parallel block on the same positions and sends the same bytes (forward only here).
# That holds for the
# activations: a layer norm with learnable weight and bias gives each rank their gradients from
# its positions only, so a training step adds an all-reduce of those (small) gradients over the
# tensor-parallel ranks, as Megatron-LM does; `F.layer_norm` here has no parameters.

# %%
require_filled(tp_region)  # names any blank still empty
require_filled(sp_f_g)


def sp_mlp_block(rank, world_size, x, w1, w2):
    """x: (seq, batch, d), of which this rank reads only its positions. Returns its positions
    of the output, and the collectives it called."""
    x_mine = shard(x, rank, world_size, dim=0)  # (seq / N, batch, d): all this rank gets
    with torch.no_grad(), count_collectives() as calls:
        normed = F.layer_norm(x_mine, (D,))  # on seq / N positions only
        out = tp_mlp(rank, world_size, normed, w1, w2, ops=sp_f_g())
    return out, calls


def tp_mlp_block(rank, world_size, x, w1, w2):
    """The tensor-parallel block: layer norm on every position, on every rank."""
    with torch.no_grad(), count_collectives() as calls:
        y = tp_mlp(rank, world_size, F.layer_norm(x, (D,)), w1, w2)
    return y, calls


n = 4
sequence_parallel = run(sp_mlp_block, t, *params32, world_size=n)
tensor_parallel = run(tp_mlp_block, t, *params32, world_size=n)
for rank in range(n):
    (y_sp, calls_sp), (y_tp, calls_tp) = sequence_parallel[rank], tensor_parallel[rank]
    assert torch.allclose(y_sp, y_tp.chunk(n)[rank], atol=1e-5), f"rank {rank}: its positions"
    assert sum(c.sent for c in calls_sp) == sum(c.sent for c in calls_tp), "the same bytes"
print(f"{n} ranks: layer norm on {t.shape[0] // n} of {t.shape[0]} positions per rank; "
      f"{[c.name for c in calls_sp]} send what {[c.name for c in calls_tp]} sends")
print("✓ the sequence-parallel block equals the tensor-parallel one, for the same forward bytes")

# %% [markdown]
# ## Wrap-up
#
# Questions to answer in your own words, without looking back:
#
# * For each of the two cuts of a weight: what does a rank hold before the ranks
#   communicate, what must they do, and where does the bias go?
# * In the backward pass, which gradients of a split layer never leave their rank, and why
#   do the others?
# * What does autograd do with an in-place collective, and why is that silently wrong?
# * Which cut did each MLP layer get, and what does that save?
# * How do the bytes of the two MLP layouts grow with $h$? When is one "twice" the other?
# * What does sequence parallelism change, and what does it cost in bytes?
#
# **Next.** Notebook 05 cuts the model the other way, into consecutive stages: pipeline
# parallelism.
