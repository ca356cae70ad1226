# %% [markdown]
# # 04 · Tensor parallelism: one layer, many GPUs
#
# Data parallelism gives every GPU a whole copy of the model. When one layer's weights, or the
# work of one layer, are too much for one GPU, cut the **layer** instead: every GPU holds a
# slice of each weight matrix and computes a slice of the result, and a collective puts the
# slices together. This is **tensor parallelism**, as Megatron-LM does it (Shoeybi et al.,
# 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
# Parallelism").
#
# **What you will build**
#
# 1. A column-parallel and a row-parallel linear layer on real gloo ranks, each equal to
#    `nn.Linear`.
# 2. Their backward pass by hand: which gradients need a collective, and which need none.
# 3. Megatron's operators *f* and *g* as `torch.autograd.Function`s, and with them a
#    tensor-parallel MLP and a tensor-parallel attention layer that autograd differentiates,
#    checked against the single-device layers: output, input gradient, every weight gradient.
# 4. The communication, measured: the collectives your code calls and the bytes each rank
#    sends, against the formulas; why a column-parallel layer is followed by a row-parallel
#    one; the collectives of a transformer layer.
# 5. Sequence parallelism: the all-reduce split into a reduce-scatter and an all-gather, and
#    its own conjugate pair of autograd Functions.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your function works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from distlab import RankError, require_filled, run
from distlab.tensor_parallel import count_collectives, format_calls, show_comm_table, show_split

# %% [markdown]
# ## 0. Who holds what
#
# Every function of this notebook runs on each of $N$ ranks and gets **only its own part** of
# each split weight, as a real tensor-parallel rank would: the whole weight is never in its
# memory. The helper below cuts a tensor into $N$ equal parts along one dimension and returns
# rank $r$'s part (a view, so gradients flow through it); the checks use it to hand each rank
# its shard. A dimension that does not divide is refused: `torch.chunk` would not refuse, it
# returns *fewer* pieces than asked, so a rank would get nothing, or a collective would hang
# on pieces of different sizes.

# %%
def shard(t, rank, world_size, dim):
    """Rank `rank`'s part of t, cut into world_size equal parts along dimension `dim`."""
    if t.shape[dim] % world_size != 0:
        raise ValueError(f"dimension {dim} of a {tuple(t.shape)} tensor cannot be split "
                         f"evenly over {world_size} ranks")
    return t.chunk(world_size, dim=dim)[rank]


print([piece.tolist() for piece in torch.arange(6).chunk(4)], "<- torch.chunk(4) of 6 features")

# %% [markdown]
# ## 1. Column-parallel linear layer
#
# A linear layer computes $y = xW^\top + b$. Mind how PyTorch stores it: `nn.Linear(in, out)`
# keeps `weight` as an **out × in** matrix, one row per output feature, and computes
# `x @ weight.T + bias`. (Papers often write $Y = XA$ with $A$ in × out, the transpose, and
# speak of its *columns*: those are the rows of `nn.Linear.weight`.)
#
# Output feature $j$ needs only row $j$ of the weight and entry $j$ of the bias. So split the
# **output features** over the $N$ ranks: rank $r$ keeps $\frac{out}{N}$ consecutive rows of
# the weight and the matching entries of the bias (its shard along dimension 0), and computes
# its own columns of $y$ from the whole input $x$, with no communication at all. Whoever needs
# the whole $y$ then collects every rank's columns.
#
# In the picture each colour is a rank; grey is held whole by every rank.

# %%
show_split("column", world_size=4)

# %% [markdown]
# What you need:
#
# * `dist.all_gather(tensor_list, tensor)`: `tensor_list` is a list of `world_size` tensors
#   shaped like `tensor`; afterwards `tensor_list[q]` holds rank $q$'s `tensor`, on every rank.
# * `torch.cat(tensors, dim=d)` joins tensors along dimension `d`; a negative `d` counts from
#   the end (`-1` is the last dimension, whatever the number of dimensions before it).
#
# The input may have any number of leading dimensions, as for `nn.Linear`: `(batch,
# in_features)` or `(batch, sequence, in_features)`.

# %% solution="column_parallel_forward" drill
def column_parallel_forward(rank, world_size, x, w_shard, b_shard):
    """nn.Linear's x @ weight.T + bias, with the output features split over the ranks.

    x: (..., in_features), the same on every rank. w_shard: (out_features / N, in_features)
    and b_shard: (out_features / N,), this rank's rows of the weight and entries of the bias.
    Returns the whole output, (..., out_features), on every rank.
    """
    y_shard = x @ w_shard.t() + b_shard  # BLANK this rank's columns of the output, without any communication # ACCEPT `x @ w_shard.t_() + b_shard` # REJECT `x @ w_shard + b_shard` # REJECT `x @ w_shard.t()` # ACCEPT `F.linear(x, w_shard, b_shard)`
    pieces = [torch.empty_like(y_shard) for _ in range(world_size)]
    dist.all_gather(pieces, y_shard)  # BLANK every rank's columns of the output, on every rank # SHAPE `the collective is the idea; its general form is the one API box of section 1` # REJECT `pass` # REJECT `dist.all_reduce(y_shard)` # ACCEPT `dist.all_gather(pieces, y_shard.contiguous())`
    return torch.cat(pieces, dim=-1)  # BLANK the whole output: every rank's columns, in rank order # REJECT `torch.cat(pieces, dim=0)` # REJECT `torch.cat(pieces, dim=1)` # REJECT `y_shard` # ACCEPT `torch.cat(pieces, dim=x.dim() - 1)`


# %% [markdown]
# The check: `nn.Linear(512, 256)`, a batch of 4, on 4 ranks, each given its shard; then a
# 3-D input.

# %%
require_filled(column_parallel_forward)  # names any blank still empty


def column_on_ranks(rank, world_size, x, weight, bias):
    """What a rank of a column-parallel layer gets: x, and its rows of the weight and bias."""
    return column_parallel_forward(rank, world_size, x, shard(weight, rank, world_size, dim=0),
                                   shard(bias, rank, world_size, dim=0))


torch.manual_seed(42)
linear = nn.Linear(512, 256)
x = torch.randn(4, 512)
weight, bias = linear.weight.detach(), linear.bias.detach()
expected = linear(x).detach()
outputs = run(column_on_ranks, x, weight, bias, world_size=4)
error = max((y - expected).abs().max().item() for y in outputs)
print(f"4 ranks, largest difference from nn.Linear: {error:.2e}")
assert all(y.shape == expected.shape for y in outputs), "every rank returns the whole output"
assert error < 1e-5, "the column-parallel output differs from nn.Linear's"

x3 = torch.randn(2, 3, 512)  # (batch, sequence, features)
for y in run(column_on_ranks, x3, weight, bias, world_size=4):
    assert torch.allclose(y, linear(x3), atol=1e-5), "a 3-D input: the output differs"
print("✓ column_parallel_forward equals nn.Linear")

# %% tests="column_parallel_forward_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, random shapes (2-D and 3-D inputs), float32 and
# float64, each rank given only its shard, against nn.Linear's formula; and what each rank did:
# one all-gather of the output, about 1/N of the layer's matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 000 exercise 3, changed here: its weight is in x out (`weight[:, start:end]`), here it
# is nn.Linear's out x in; its hints gave each answer (`weight[:, start:end]`,
# `bias[start:end]`, `x @ w_chunk + b_chunk`, `torch.cat, dim=-1`): the slicing is given (the
# rank receives its shard), the rest rewritten as questions; its `assert d_out % num_gpus == 0`
# is shard()'s ValueError; its loop over GPUs is real ranks.
from autograder.grade_cell import grade
grade(column_parallel_forward)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Row-parallel linear layer
#
# The dual cut: split the **input features**. Rank $r$ keeps $\frac{in}{N}$ consecutive
# *columns* of the weight (out × in: its shard along dimension 1), and needs only the
# matching features of the input. Writing $x_r$ and $W_r$ for those parts,
#
# $$ y = xW^\top + b = \sum_{r=0}^{N-1} x_r W_r^\top + b. $$
#
# Every rank computes a full-size $x_r W_r^\top$, but it is only a **partial sum**: the ranks'
# partial sums must be added, and every rank needs the result. Which collective of notebook 01
# does that? The bias is not split: every rank holds it whole. Where is it added? A bias added
# by every rank before the sum would be counted $N$ times.

# %%
show_split("row", world_size=4)

# %% [markdown]
# Here each rank receives its features of the input, $x_r$, and its columns of the weight
# (section 3 and the MLP show where such a split input comes from).

# %% solution="row_parallel_forward" drill
def row_parallel_forward(rank, world_size, x_shard, w_shard, bias):
    """nn.Linear's x @ weight.T + bias, with the input features split over the ranks.

    x_shard: (..., in_features / N), this rank's features of the input. w_shard:
    (out_features, in_features / N), this rank's columns of the weight. bias: (out_features,),
    whole. Returns the whole output, (..., out_features), on every rank.
    """
    partial = x_shard @ w_shard.t()  # BLANK this rank's contribution to the output # ACCEPT `x_shard @ w_shard.t_()` # REJECT `x_shard @ w_shard.t() + bias` # REJECT `x_shard @ w_shard` # ACCEPT `F.linear(x_shard, w_shard)`
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)  # BLANK `dist.all_reduce(partial, op=dist.ReduceOp.SUM)` turn the contributions into the output, on every rank # REJECT `pass` # REJECT `dist.all_reduce(partial, op=dist.ReduceOp.MAX)` # ACCEPT `dist.all_reduce(partial)`
    return partial + bias  # BLANK the output, with its bias # REJECT `partial` # REJECT `partial + bias * world_size` # ACCEPT `bias + partial`


# %% [markdown]
# The same check. With floats, the sum of four partial products is rounded differently from
# one long dot product, so expect a difference of about $10^{-7}$ in float32, not 0. (Neither
# layer is guaranteed to match `nn.Linear` to the last bit: even the column-parallel layer's
# smaller matmul may be blocked and summed in another order by the CPU's matmul kernel.)

# %%
require_filled(row_parallel_forward)  # names any blank still empty


def row_on_ranks(rank, world_size, x, weight, bias):
    """What a rank of a row-parallel layer gets: its features of x, its columns of the weight,
    and the whole bias."""
    return row_parallel_forward(rank, world_size, shard(x, rank, world_size, dim=-1),
                                shard(weight, rank, world_size, 1), bias)


outputs = run(row_on_ranks, x, weight, bias, world_size=4)
error = max((y - expected).abs().max().item() for y in outputs)
print(f"4 ranks, largest difference from nn.Linear: {error:.2e}")
assert error < 1e-5, "the row-parallel output differs from nn.Linear's"
for y in run(row_on_ranks, x3, weight, bias, world_size=4):
    assert torch.allclose(y, linear(x3), atol=1e-5), "a 3-D input: the output differs"
print("✓ row_parallel_forward equals nn.Linear")

# %% tests="row_parallel_forward_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, random shapes (2-D and 3-D inputs), float32 and
# float64, each rank given only its features and columns, against nn.Linear's formula; and
# what each rank did: one all-reduce of the output, about 1/N of the matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 000 exercise 4, changed here: weight in x out there, nn.Linear's out x in here; its
# hints gave each answer (`weight[start:end, :]`, `x[:, start:end]`, `x_chunk @ w_chunk`,
# the sum of the outputs): the slicing is given, the rest rewritten as questions; its sum over
# a Python list is a real dist.all_reduce; its "max error 0.00e+00" is about 1e-7 in float32
# (rounding). Seed 002's RowParallelLinear gives every rank's nn.Linear the bias, so the
# all-reduce adds it N times: here it is added once, after the sum.
from autograder.grade_cell import grade
grade(row_parallel_forward)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The backward pass, by hand
#
# `dist.all_gather` and `dist.all_reduce` are not differentiable: autograd cannot see through
# them. So first work out the gradients by hand. For $y = xW^\top + b$ and a loss $L$, with
# $\bar y = \partial L / \partial y$ (shape batch × out):
#
# $$ \frac{\partial L}{\partial x} = \bar y\, W, \qquad
#    \frac{\partial L}{\partial W} = \bar y^\top x, \qquad
#    \frac{\partial L}{\partial b} = \textstyle\sum_{\text{batch}} \bar y. $$
#
# Every rank runs the same loss on the same (whole) $y$, so every rank holds the whole
# $\bar y$.
#
# **Column-parallel.** Rank $r$ produced only its columns $y_r = x W_r^\top + b_r$; the
# all-gather merely copied them, so what flows back to rank $r$ is its columns $\bar y_r$ of
# $\bar y$. Its weight and bias gradients, $\bar y_r^\top x$ and $\sum \bar y_r$, involve only
# its own rows: **no communication**. But $x$ reached *every* output feature, through every
# rank's rows, so $\partial L/\partial x = \sum_r \bar y_r W_r$: each rank holds one term, and
# every rank needs the sum.
#
# **Row-parallel.** $y = \sum_r x_r W_r^\top + b$, so $\partial y / \partial (x_r W_r^\top)$ is
# the identity: every rank's partial product receives the whole $\bar y$. Its weight gradient
# $\bar y^\top x_r$ is again local. The input gradient of rank $r$'s features is
# $\bar y\, W_r$, which is just the part of $\partial L/\partial x$ that belongs to rank $r$.
# If the input arrived **already split** (rank $r$ only ever had $x_r$, from a column-parallel
# layer before it), that part is all rank $r$ needs: **no communication**. If the input was
# **whole** (each rank cut its features out of it), every rank needs all of
# $\partial L/\partial x$: every rank's part, side by side.
#
# Write the gradients of the column-parallel layer. `grad_y_shard` is $\bar y_r$, this rank's
# columns of $\bar y$; for the products, `a.t()` is the transpose of a matrix `a` (2-D inputs
# here).

# %% solution="column_parallel_backward"
def column_parallel_backward(rank, world_size, x, w_shard, grad_y_shard):
    """The gradients of column_parallel_forward, by hand, on this rank.

    x: (batch, in_features), whole; w_shard: (out_features / N, in_features), this rank's rows
    of the weight; grad_y_shard: (batch, out_features / N), this rank's columns of dL/dy.
    Returns (grad_x, grad_w, grad_b): dL/dx, whole, on every rank, and the gradients of this
    rank's rows of the weight and entries of the bias.
    """
    grad_w = grad_y_shard.t() @ x  # BLANK the gradient of this rank's rows of the weight # REJECT `x.t() @ grad_y_shard` # REJECT `grad_y_shard @ x.t()` # ACCEPT `(x.t() @ grad_y_shard).t()`
    grad_b = grad_y_shard.sum(dim=0)
    grad_x = grad_y_shard @ w_shard  # BLANK this rank's term of dL/dx # REJECT `grad_y_shard @ w_shard.t()`
    dist.all_reduce(grad_x, op=dist.ReduceOp.SUM)  # BLANK `dist.all_reduce(grad_x, op=dist.ReduceOp.SUM)` the whole dL/dx, on every rank # REJECT `pass` # REJECT `dist.all_reduce(grad_w)` # ACCEPT `dist.all_reduce(grad_x)`
    return grad_x, grad_w, grad_b


# %% [markdown]
# The check compares with autograd on one process. Then it does what Megatron-style code
# sometimes gets wrong: all-reduce the weight gradients of the shards as well. That adds the
# gradients of *different* rows together: every rank ends up with a wrong gradient for its own
# rows. Shard weight gradients need no communication within tensor parallelism.

# %%
require_filled(column_parallel_backward)  # names any blank still empty


def grads_on_ranks(rank, world_size, x, weight, grad_y, also_all_reduce_grad_w):
    grad_x, grad_w, grad_b = column_parallel_backward(
        rank, world_size, x, shard(weight, rank, world_size, dim=0),
        shard(grad_y, rank, world_size, 1))
    if also_all_reduce_grad_w:  # the mistake
        dist.all_reduce(grad_w)
    return grad_x, grad_w, grad_b


torch.manual_seed(0)
x, grad_y = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 12, dtype=torch.float64)
layer = nn.Linear(8, 12, dtype=torch.float64)
x_leaf = x.clone().requires_grad_()
layer(x_leaf).backward(grad_y)  # autograd, on one process
weight = layer.weight.detach()
for mistake in (False, True):
    results = run(grads_on_ranks, x, weight, grad_y, mistake, world_size=2)
    right = []
    for rank, (grad_x, grad_w, grad_b) in enumerate(results):
        assert torch.allclose(grad_x, x_leaf.grad), f"rank {rank}: dL/dx differs from autograd"
        assert torch.allclose(grad_b, layer.bias.grad.chunk(2)[rank]), f"rank {rank}: dL/db"
        right.append(torch.allclose(grad_w, layer.weight.grad.chunk(2)[rank]))
    print(f"all-reduce the shard weight gradients too: {mistake!s:5}  "
          f"-> weight gradients right on ranks {[r for r in range(2) if right[r]]}")
    assert all(right) != mistake
print("✓ column_parallel_backward equals autograd (and all-reducing grad_w would break it)")

# %% tests="column_parallel_backward_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, random shapes, float32 and float64, each rank given
# its rows of the weight and columns of dL/dy, against autograd on one process; and what each
# rank did: one all-reduce of dL/dx, about 1/N of the backward's matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 002's ColumnParallelLinear.backward all-reduces the weight and bias gradients of the
# shards: wrong (different rows' gradients get added), shown in the check above. Seed 003
# section 8 first calls the input gradient's sum a ReduceScatter, then an AllReduce: it is an
# AllReduce (every rank needs all of dL/dx).
from autograder.grade_cell import grade
grade(column_parallel_backward)
### END HIDDEN TESTS

# %% [markdown]
# Now the row-parallel layer. `input_is_split` says whether the input arrived split (return
# only this rank's columns of $\partial L/\partial x$) or whole (return all of it, on every
# rank, built as in section 1).

# %% solution="row_parallel_backward"
def row_parallel_backward(rank, world_size, x_shard, w_shard, grad_y, input_is_split):
    """The gradients of row_parallel_forward, by hand, on this rank.

    x_shard: (batch, in_features / N), this rank's features of the input; w_shard:
    (out_features, in_features / N), this rank's columns of the weight; grad_y: dL/dy,
    (batch, out_features), the same on every rank.
    Returns (grad_x, grad_w, grad_b): dL/dx, only this rank's columns (batch, in_features / N)
    if input_is_split, else the whole (batch, in_features) on every rank; the gradient of this
    rank's columns of the weight; and the bias gradient (whole: the bias is not split).
    """
    grad_w = grad_y.t() @ x_shard  # BLANK the gradient of this rank's columns of the weight # REJECT `x_shard.t() @ grad_y`
    grad_b = grad_y.sum(dim=0)
    grad_x_shard = grad_y @ w_shard  # BLANK dL/dx for this rank's input features # REJECT `grad_y @ w_shard.t()`
    if input_is_split:
        return grad_x_shard, grad_w, grad_b
    pieces = [torch.empty_like(grad_x_shard) for _ in range(world_size)]
    dist.all_gather(pieces, grad_x_shard)  # BLANK every rank's columns of dL/dx, on every rank # SHAPE `which collective a whole input needs is the idea; its call form is section 1's API box` # REJECT `pass` # REJECT `dist.all_reduce(grad_x_shard)` # ACCEPT `dist.all_gather(pieces, grad_x_shard.contiguous())`
    return torch.cat(pieces, dim=-1), grad_w, grad_b


# %%
require_filled(row_parallel_backward)  # names any blank still empty


def row_grads_on_ranks(rank, world_size, x, weight, grad_y):
    x_shard, w_shard = shard(x, rank, world_size, 1), shard(weight, rank, world_size, 1)
    return [row_parallel_backward(rank, world_size, x_shard, w_shard, grad_y, split)
            for split in (True, False)]


layer = nn.Linear(12, 8, dtype=torch.float64)
x = torch.randn(3, 12, dtype=torch.float64)
x_leaf = x.clone().requires_grad_()
layer(x_leaf).backward(grad_y[:, :8])
for rank, (split, whole) in enumerate(
        run(row_grads_on_ranks, x, layer.weight.detach(), grad_y[:, :8], world_size=2)):
    assert torch.allclose(split[0], x_leaf.grad.chunk(2, dim=1)[rank]), "split input: dL/dx_r"
    assert torch.allclose(whole[0], x_leaf.grad), f"whole input: rank {rank}'s dL/dx"
    for grad_w, grad_b in (split[1:], whole[1:]):
        assert torch.allclose(grad_w, layer.weight.grad.chunk(2, dim=1)[rank]), "dL/dW_r"
        assert torch.allclose(grad_b, layer.bias.grad), "dL/db"
print("✓ row_parallel_backward equals autograd, for a split and for a whole input")

# %% tests="row_parallel_backward_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, random shapes, float32 and float64, inputs split
# and whole, each rank given its features and columns, against autograd on one process; and
# what each rank did: nothing for a split input, one all-gather of dL/dx for a whole one,
# about 1/N of the backward's matmul FLOPs.
### BEGIN HIDDEN TESTS
# Seed 002's RowParallelLinear.backward all-reduces the shard weight gradients: wrong, as for
# the column-parallel layer. Seed 003 section 9.3 returns per-device input gradients without
# saying that a whole input needs them all-gathered (seed 002's formula says so).
from autograder.grade_cell import grade
grade(row_parallel_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Megatron's f and g
#
# Put a column-parallel layer first and a row-parallel layer second, and the activation
# between them is *already split* the way the second layer wants it: no communication in the
# middle. Only two places talk, and Megatron-LM names them:
#
# * **f**, where the parallel region begins: the input $x$ is whole on every rank. Forward:
#   nothing to do. Backward: every rank holds one term of $\partial L/\partial x$ (section 3):
#   they must be summed.
# * **g**, where the region ends: every rank holds a partial sum of the output. Forward: they
#   must be summed. Backward: the whole $\bar y$ goes back to every rank's partial product
#   unchanged.
#
# f and g are **conjugate**: each is the other with forward and backward swapped. As
# `torch.autograd.Function`s, autograd calls them for you in both directions. Such a Function
# has two static methods: `forward(ctx, inputs...)` returns the output, and `backward(ctx,
# grad_output)` returns the gradient with respect to each input; `ctx` carries anything
# the backward needs from the forward (`ctx.save_for_backward(t)`, then `ctx.saved_tensors`;
# f and g need nothing). You call it as `Scale.apply(x)`:

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
    """The sum of t over every rank, in a new tensor (t itself is left as it was)."""
    total = t.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


x = torch.ones(2, requires_grad=True)
Scale.apply(x).sum().backward()
print("Scale: x.grad =", x.grad.tolist())

# %% [markdown]
# `megatron_f_g()` returns the two classes. (They are made by a function so that every
# function below can get them with one call, on whatever rank it runs.)

# %% solution="megatron_f_g" drill
def megatron_f_g():
    """(f, g): Megatron-LM's conjugate operators, as autograd Functions on the default group."""

    class f(torch.autograd.Function):
        """Where a tensor-parallel region begins: x is whole on every rank."""

        @staticmethod
        def forward(ctx, x):
            return x  # BLANK what f does in the forward pass # REJECT `all_reduce_sum(x)` # ACCEPT `x.clone()`

        @staticmethod
        def backward(ctx, grad):
            return all_reduce_sum(grad)  # BLANK what f does in the backward pass # REJECT `grad`

    class g(torch.autograd.Function):
        """Where a tensor-parallel region ends: every rank holds a partial sum."""

        @staticmethod
        def forward(ctx, partial):
            return all_reduce_sum(partial)  # BLANK what g does in the forward pass # REJECT `partial`

        @staticmethod
        def backward(ctx, grad):
            return grad  # BLANK what g does in the backward pass # REJECT `all_reduce_sum(grad)` # ACCEPT `grad.clone()`

    return f, g


# %% [markdown]
# The check: on 2 ranks, rank $r$ feeds $x_r = r + 1$ through f and through g, and backward a
# gradient of $10(r + 1)$.

# %%
require_filled(megatron_f_g)  # names any blank still empty


def try_f_g(rank, world_size):
    f, g = megatron_f_g()
    seen = {}
    for name, op in (("f", f), ("g", g)):
        x = torch.full((2,), rank + 1.0, requires_grad=True)
        y = op.apply(x)
        y.backward(torch.full((2,), 10.0 * (rank + 1)))
        seen[name] = (y[0].item(), x.grad[0].item())
    return seen


for rank, seen in enumerate(run(try_f_g, world_size=2)):
    print(f"rank {rank}: f forward {seen['f'][0]:g}, backward {seen['f'][1]:g} | "
          f"g forward {seen['g'][0]:g}, backward {seen['g'][1]:g}")
    assert seen["f"] == (rank + 1, 30.0), "f: identity forward, sum over the ranks backward"
    assert seen["g"] == (3.0, 10.0 * (rank + 1)), "g: sum over the ranks forward, identity backward"
print("✓ f and g are conjugate")

# %% tests="megatron_f_g_tests" points=4
# Hidden tests (4 points): 1, 2 and 4 ranks, random tensors and gradients, float32 and float64:
# each direction of f and g against the sum over the ranks computed here.
### BEGIN HIDDEN TESTS
# Seed 002 gives the conjugate operators as hand-written forward/backward methods of
# nn.Modules, which autograd never calls; here they are torch.autograd.Functions.
from autograder.grade_cell import grade
grade(megatron_f_g)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The tensor-parallel MLP
#
# A transformer's MLP is $y = \mathrm{GeLU}(x W_1^\top + b_1)\, W_2^\top + b_2$, with $h$
# hidden units ($h = 4d$ usually). Split the hidden units: rank $r$ holds rows of $W_1$ (a
# column-parallel layer), and the **same** hidden units' columns of $W_2$ (a row-parallel
# layer). GeLU acts on each hidden unit alone, so it runs on the split activation as it is.
# That is why GeLU goes between a column- and a row-parallel layer: a non-linearity of the
# whole row (a softmax over the hidden units, say) would need the whole activation.

# %%
show_split("mlp", world_size=4)

# %% [markdown]
# `F.linear(x, w, b)` is `x @ w.T + b`, and `F.gelu` the GeLU. The function gets the full
# parameters here: which part of each a rank uses is the exercise. Use f and g where the
# region begins and ends; autograd does the rest: it calls their backward in the backward
# pass, and no gradient needs writing by hand.

# %% solution="tp_mlp"
def tp_mlp(rank, world_size, x, w1, b1, w2, b2):
    """GeLU(x @ w1.T + b1) @ w2.T + b2 with the hidden units split over the ranks.

    x: (..., d); w1: (h, d), b1: (h,), w2: (d, h), b2: (d,): the full parameters (they may
    require grad: gradients flow into this rank's parts of them). Returns the whole output,
    (..., d), on every rank.
    """
    f, g = megatron_f_g()
    w1_shard = shard(w1, rank, world_size, dim=0)  # column-parallel: this rank's hidden units
    b1_shard = shard(b1, rank, world_size, dim=0)
    w2_shard = shard(w2, rank, world_size, dim=1)  # BLANK this rank's part of w2 (d x h): the one that reads its hidden units # ACCEPT `shard(w2, rank, world_size, dim=-1)` # REJECT `shard(w2, rank, world_size, dim=0)` # ACCEPT `w2.chunk(world_size, dim=1)[rank]`
    hidden = F.gelu(F.linear(f.apply(x), w1_shard, b1_shard))  # BLANK this rank's hidden units, after GeLU (where does the parallel region begin?) # ACCEPT `F.gelu(f.apply(x) @ w1_shard.t() + b1_shard)` # REJECT `F.gelu(F.linear(x, w1_shard, b1_shard))` # REJECT `F.gelu(F.linear(g.apply(x), w1_shard, b1_shard))`
    return g.apply(F.linear(hidden, w2_shard)) + b2  # BLANK the whole output, with its bias (where does the region end?) # ACCEPT `g.apply(hidden @ w2_shard.t()) + b2` # REJECT `F.linear(hidden, w2_shard) + b2` # REJECT `g.apply(F.linear(hidden, w2_shard, b2))`


# %% [markdown]
# The check runs one forward and backward on 2 and on 4 ranks and compares with the
# single-device MLP: the output and $\partial L/\partial x$ on every rank, and every weight
# gradient. Each rank's gradient of $W_1$ is zero outside its own rows, so adding the ranks'
# gradients must give the single-device gradient.

# %%
require_filled(megatron_f_g)  # names any blank still empty
require_filled(tp_mlp)


def mlp_step(rank, world_size, x, w1, b1, w2, b2, grad_y):
    """tp_mlp forward and backward on this rank: the output, then every gradient it holds."""
    leaves = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    y = tp_mlp(rank, world_size, *leaves)
    y.backward(grad_y)
    return [y.detach()] + [leaf.grad for leaf in leaves]


D, H = 16, 64
torch.manual_seed(1)
mlp = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, D)).double()
x, grad_y = torch.randn(3, D, dtype=torch.float64), torch.randn(3, D, dtype=torch.float64)
x_leaf = x.clone().requires_grad_()
y = mlp(x_leaf)
y.backward(grad_y)
params = [p.detach() for p in mlp.parameters()]  # w1, b1, w2, b2
for n in (2, 4):
    results = run(mlp_step, x, *params, grad_y, world_size=n)
    for rank, (y_r, grad_x, *grads) in enumerate(results):
        assert torch.allclose(y_r, y), f"{n} ranks: rank {rank}'s output"
        assert torch.allclose(grad_x, x_leaf.grad), f"{n} ranks: rank {rank}'s dL/dx"
        own = grads[0].chunk(n, dim=0)[rank]
        assert torch.allclose(own, mlp[0].weight.grad.chunk(n, dim=0)[rank]), "its rows of W1"
    names = ["W1", "b1", "W2", "b2"]
    for k, param in enumerate(mlp.parameters()):
        total = sum(result[2 + k] for result in results)
        if names[k] == "b2":  # not split: every rank holds the whole gradient
            total = total / n
        assert torch.allclose(total, param.grad), f"{n} ranks: the gradient of {names[k]}"
    print(f"{n} ranks: output, dL/dx and every weight gradient equal the single-device MLP's")
print("✓ tp_mlp is the MLP, forward and backward")

# %% tests="tp_mlp_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, random shapes, float32 and float64: output, input
# gradient and every weight gradient against autograd on one process (with a correct f and g).
### BEGIN HIDDEN TESTS
# Seed 003 section 10's title asks for the AllReduce and ReduceScatter calls of the MLP: it
# has none of the second kind (one all-reduce forward, one backward, as its own text says).
from autograder.grade_cell import grade
grade(tp_mlp)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Attention with its heads split
#
# Multi-head attention runs $H$ heads side by side, and each head works alone: its queries,
# keys and values are its own $d_h = d/H$ rows of $W_q$, $W_k$, $W_v$ (heads in order:
# head $i$ owns rows $i\,d_h$ to $(i+1)\,d_h - 1$), and its output meets only its own $d_h$
# columns of the output projection $W_o$. So give each rank whole heads: $H/N$ of them, $W_q$,
# $W_k$, $W_v$ column-parallel and $W_o$ row-parallel, with f before and g after, as in the
# MLP. The attention itself (the softmax over the sequence) runs on each rank for its heads,
# with no communication.

# %%
show_split("attention", world_size=4, num_heads=8)

# %% [markdown]
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


def attention(x, wq, wk, wv, wo, bo, num_heads):
    """Single-device causal multi-head attention: x (batch, seq, d), the weights d x d."""
    q, k, v = (split_heads(F.linear(x, w), num_heads) for w in (wq, wk, wv))
    return F.linear(merge_heads(attend(q, k, v)), wo, bo)


# %% solution="tp_attention"
def tp_attention(rank, world_size, x, wq, wk, wv, wo, bo, num_heads):
    """attention(x, wq, wk, wv, wo, bo, num_heads) with the heads split over the ranks.

    x: (batch, seq, d), whole on every rank; wq, wk, wv, wo: (d, d), bo: (d,), the full
    parameters. Returns the whole output, (batch, seq, d), on every rank.
    """
    if num_heads % world_size != 0:
        raise ValueError(f"{num_heads} heads cannot be split evenly over {world_size} ranks")
    f, g = megatron_f_g()
    head_dim = x.shape[-1] // num_heads
    local_heads = num_heads // world_size  # on this rank
    rows = slice(rank * local_heads * head_dim, (rank + 1) * local_heads * head_dim)  # BLANK the rows of wq, wk and wv that compute this rank's heads # REJECT `slice(rank * local_heads, (rank + 1) * local_heads)` # REJECT `slice((rank + 1) * local_heads * head_dim, (rank + 2) * local_heads * head_dim)` # ACCEPT `slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size)`
    xf = f.apply(x)
    q, k, v = (split_heads(F.linear(xf, w[rows]), local_heads) for w in (wq, wk, wv))
    out = merge_heads(attend(q, k, v))
    partial = F.linear(out, wo[:, rows])  # BLANK `wo[:, rows]` the part of the output projection that reads these heads # REJECT `wo[rows]` # REJECT `wo`
    return g.apply(partial) + bo


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
weights = [torch.randn(D, D, dtype=torch.float64) / D**0.5 for _ in range(4)]
weights.append(torch.randn(D, dtype=torch.float64))  # bo
leaves = [t.clone().requires_grad_() for t in (x, *weights)]
y = attention(*leaves, num_heads=HEADS)
y.backward(grad_y)
for n in (2, 4):
    results = run(attention_step, x, weights, grad_y, HEADS, world_size=n)
    for rank, (y_r, grad_x, *_) in enumerate(results):
        assert torch.allclose(y_r, y), f"{n} ranks: rank {rank}'s output"
        assert torch.allclose(grad_x, leaves[0].grad), f"{n} ranks: rank {rank}'s dL/dx"
    for k, name in enumerate(["Wq", "Wk", "Wv", "Wo"]):
        total = sum(result[2 + k] for result in results)
        assert torch.allclose(total, leaves[1 + k].grad), f"{n} ranks: the gradient of {name}"
    for rank, result in enumerate(results):
        assert torch.allclose(result[6], leaves[5].grad), f"rank {rank}: the gradient of bo"
    print(f"{n} ranks, {HEADS // n} of the {HEADS} heads on each: output, dL/dx and every weight "
          "gradient match")
print("✓ tp_attention is the attention layer, forward and backward")

# %% tests="tp_attention_tests" points=2
# Hidden tests (2 points): 1, 2 and 4 ranks, random shapes and head counts, float32 and
# float64: output, input gradient and every weight gradient against autograd on one process
# (with a correct f and g).
### BEGIN HIDDEN TESTS
# Seed 003 section 11's sketch uses Q_weights_parts, K_weights_parts and V_weights_parts that
# it never defines (it is given QKV_weights_parts); here the heads' rows are derived.
from autograder.grade_cell import grade
grade(tp_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. What it costs, measured
#
# `count_collectives()` (from `distlab.tensor_parallel`) records, on a rank, every collective
# that the code inside it calls: its name, whether autograd's backward pass called it, the
# size $S$ of the whole tensor it reduces or gathers, and the bytes one rank sends if the
# collective runs as a ring (notebook 01): $2\frac{N-1}{N}S$ for an all-reduce,
# $\frac{N-1}{N}S$ for an all-gather or a reduce-scatter. Here is one step of your MLP, with
# a batch of $b$ rows of $d$ float32 numbers:

# %%
require_filled(tp_mlp)  # names any blank still empty


def count_mlp(rank, world_size, x, w1, b1, w2, b2, grad_y):
    leaves = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    with count_collectives() as calls:
        y = tp_mlp(rank, world_size, *leaves)
        y.backward(grad_y)
    return calls


ROWS = 8  # b
params32 = [p.float() for p in params]
x32, grad_y32 = torch.randn(ROWS, D), torch.randn(ROWS, D)
for n in (2, 4):
    calls = run(count_mlp, x32, *params32, grad_y32, world_size=n)[0]
    print(f"--- {n} ranks\n{format_calls(calls)}")
    formula = 2 * (2 * (n - 1) / n * ROWS * D * 4)  # two all-reduces of b x d float32
    assert [(c.name, c.backward) for c in calls] == [("all_reduce", False), ("all_reduce", True)]
    assert sum(c.sent for c in calls) == formula
    print(f"formula: 2 all-reduces x 2(N-1)/N x {ROWS}x{D}x4 bytes = {formula:g} bytes ✓")

# %% [markdown]
# ### Why column then row?
#
# The alternative is two column-parallel layers: the first one's output must then be
# all-gathered, because the second needs its whole input, and the second's output too.
# It is often said that this *doubles* the communication. Count it. Per rank, for a batch of $b$
# rows, $s$ bytes per number, forward pass:
#
# * column + row: one all-reduce of $b \times d$: $\;2\frac{N-1}{N}\, b\,d\,s$;
# * column + column: all-gathers of $b \times h$ and $b \times d$:
#   $\;\frac{N-1}{N}\, b\,(h + d)\,s$.
#
# The ratio is $\frac{h + d}{2d}$: **2.5** for the usual $h = 4d$, 1 for $h = d$, so "double"
# is right only for $h = 3d$. (Column + column also sends two messages instead of one, and in
# the backward pass each column-parallel layer needs its own input-gradient all-reduce, one of
# them $b \times h$.) Measured with your functions, forward only:

# %%
require_filled(column_parallel_forward)  # names any blank still empty


def forward_bytes(rank, world_size, x, w1, b1, w2, b2):
    with torch.no_grad(), count_collectives() as column_row:
        y = tp_mlp(rank, world_size, x, w1, b1, w2, b2)
    with count_collectives() as column_column:
        hidden = column_parallel_forward(rank, world_size, x, shard(w1, rank, world_size, 0),
                                         shard(b1, rank, world_size, 0))
        y2 = column_parallel_forward(rank, world_size, F.gelu(hidden),
                                     shard(w2, rank, world_size, 0), shard(b2, rank, world_size, 0))
    assert torch.allclose(y, y2, atol=1e-5), "both layouts compute the same MLP"
    return column_row, column_column


n = 4
for hidden_units in (4 * D, D):
    w1, b1 = torch.randn(hidden_units, D) / D**0.5, torch.randn(hidden_units)
    w2, b2 = torch.randn(D, hidden_units) / hidden_units**0.5, torch.randn(D)
    column_row, column_column = run(forward_bytes, x32, w1, b1, w2, b2, world_size=n)[0]
    sent_cr, sent_cc = (sum(c.sent for c in calls) for calls in (column_row, column_column))
    h = "4d" if hidden_units == 4 * D else "d"
    print(f"h = {h}, {n} ranks: column+row {len(column_row)} collective ({sent_cr:g} B), "
          f"column+column {len(column_column)} collectives ({sent_cc:g} B): "
          f"ratio {sent_cc / sent_cr:g}")
    assert sent_cr == 2 * (n - 1) / n * ROWS * D * 4
    assert sent_cc == (n - 1) / n * ROWS * (hidden_units + D) * 4
    assert abs(sent_cc / sent_cr - (hidden_units + D) / (2 * D)) < 1e-12
print("✓ measured bytes equal the formulas; the ratio is (h + d) / 2d, not 2")

# %% [markdown]
# ### One transformer layer
#
# A layer is attention then the MLP, each with a residual and a layer norm (which every rank
# computes whole, on the whole activation). Count its collectives in one training step, then
# with **full activation recomputation**: the layer keeps only its input, and its forward pass
# runs again during the backward pass, g and its all-reduces included (Megatron-LM's
# `--recompute-granularity full`). With `torch.utils.checkpoint` that takes one more switch:
# by default PyTorch stops the rerun as soon as it has recomputed every tensor the backward
# needs (`set_checkpoint_early_stop`), and nothing after the MLP's g is needed, so that last
# all-reduce is skipped. The table shows both.

# %%
require_filled(tp_attention)  # names any blank still empty


def tp_layer(rank, world_size, x, p):
    h = x + tp_attention(rank, world_size, F.layer_norm(x, (D,)), p["wq"], p["wk"], p["wv"],
                         p["wo"], p["bo"], num_heads=HEADS)
    return h + tp_mlp(rank, world_size, F.layer_norm(h, (D,)), p["w1"], p["b1"], p["w2"],
                      p["b2"])


def count_layer(rank, world_size, x, p, grad_y, recompute, early_stop):
    x = x.clone().requires_grad_()
    p = {name: t.clone().requires_grad_() for name, t in p.items()}
    with count_collectives() as calls, set_checkpoint_early_stop(early_stop):
        if recompute:
            y = checkpoint(tp_layer, rank, world_size, x, p, use_reentrant=False)
        else:
            y = tp_layer(rank, world_size, x, p)
        y.backward(grad_y)
    return calls


p = dict(zip(["wq", "wk", "wv", "wo", "bo"], [w.float() for w in weights], strict=True))
p.update(zip(["w1", "b1", "w2", "b2"], params32, strict=True))
x_layer, grad_layer = torch.randn(B, L, D), torch.randn(B, L, D)
rows = []
for what, recompute, early_stop, expected in (
        ("tensor parallel", False, False, (2, 2)),
        ("+ full recomputation", True, False, (2, 4)),
        ("+ checkpoint with early stop", True, True, (2, 3))):
    calls = run(count_layer, x_layer, p, grad_layer, recompute, early_stop, world_size=2)[0]
    forward = [c for c in calls if not c.backward]
    backward = [c for c in calls if c.backward]
    assert {c.name for c in calls} == {"all_reduce"}
    assert all(c.shape == (B, L, D) for c in calls), "every all-reduce is batch x seq x d"
    assert (len(forward), len(backward)) == expected, (what, len(forward), len(backward))
    rerun = {2: "", 3: ", g (the MLP's g skipped)", 4: ", g, g (the rerun)"}[len(backward)]
    rows.append((what, f"{len(forward)} all-reduce: g, g",
                 f"{len(backward)} all-reduce: f, f{rerun}"))
show_comm_table(rows, title=f"all-reduces per transformer layer, each of b x s x d = {B}x{L}x{D} "
                            "numbers (measured, 2 ranks)")
print("✓ 2 all-reduces forward, 2 backward, 2 more when the whole forward is recomputed")

# %% [markdown]
# Every one of these all-reduces is on the critical path: the next layer cannot start before
# it ends. That is why tensor parallelism stays inside a node, on the fastest links (NVLink),
# typically $N \le 8$, while data and pipeline parallelism cross nodes.
#
# ## 8. Sequence parallelism
#
# Look again at the layer: between the row-parallel layer of one block and the
# column-parallel layer of the next, every rank computes the *same* residual add, dropout and
# layer norm on the *whole* activation, and keeps the whole activation for the backward pass.
# Megatron-LM's sequence parallelism (Korthikanti et al., 2022, "Reducing Activation
# Recomputation in Large Transformer Models") splits that region along the **sequence**
# instead: each rank handles $s/N$ positions, which layer norm and dropout allow, as they
# treat each position alone.
#
# The all-reduce of g becomes its two halves (notebook 01): a **reduce-scatter**, after which
# rank $r$ holds its positions of the sum, then the norm region on those positions, then an
# **all-gather** of every rank's positions before the next column-parallel layer. A ring
# reduce-scatter and a ring all-gather each send $\frac{N-1}{N}S$ per rank: together exactly
# the all-reduce's $2\frac{N-1}{N}S$. Same bytes, and the activations of the norm region are
# $N$ times smaller.
#
# Megatron orders activations as **(sequence, batch, d)**, so the sequence is dimension 0,
# and the single-tensor collectives split and join along dimension 0:
#
# * `dist.reduce_scatter_single(output, input, op=dist.ReduceOp.SUM)`: `input` is the whole
#   tensor on every rank; `output`, $\frac{1}{N}$ of its rows, receives on rank $r$ the sum
#   over the ranks of rows $r\frac{s}{N}$ to $(r+1)\frac{s}{N} - 1$.
# * `dist.all_gather_single(output, input)`: `output` receives every rank's `input` stacked
#   along dimension 0, in rank order.
#
# (In torch 2.13 the older names `reduce_scatter_tensor` and `all_gather_into_tensor` warn
# that they are deprecated; gloo runs both `_single` forms.)

# %% solution="sp_all_reduce"
def sp_all_reduce(rank, world_size, t):
    """The sum of t over the ranks, as a reduce-scatter then an all-gather along dimension 0.

    t: (seq, ...), seq a multiple of world_size. Returns (total, part): the sum, whole, on
    every rank; and this rank's rows of it, which it held in between (where the layer norm
    would run).
    """
    if t.shape[0] % world_size != 0:
        raise ValueError(f"{t.shape[0]} positions cannot be split evenly over {world_size} "
                         "ranks")
    part = t.new_zeros((t.shape[0] // world_size, *t.shape[1:]))
    dist.reduce_scatter_single(part, t, op=dist.ReduceOp.SUM)  # BLANK `dist.reduce_scatter_single(part, t, op=dist.ReduceOp.SUM)` this rank's positions of the sum # REJECT `dist.all_reduce(t)` # REJECT `dist.reduce_scatter_single(part, t, op=dist.ReduceOp.MAX)` # ACCEPT `dist.reduce_scatter_single(part, t)`
    total = torch.empty_like(t)
    dist.all_gather_single(total, part)  # BLANK every rank's positions, on every rank # REJECT `dist.all_reduce(part)` # REJECT `total.copy_(t)`
    return total, part


# %%
require_filled(sp_all_reduce)  # names any blank still empty


def sp_versus_all_reduce(rank, world_size, t):
    """sp_all_reduce and dist.all_reduce of the same tensor (rank r adds (r + 1) t): do they
    agree, and what does each send?"""
    mine = t * (rank + 1)
    with count_collectives() as split:
        total, part = sp_all_reduce(rank, world_size, mine)
    expected = mine.clone()
    with count_collectives() as whole:
        dist.all_reduce(expected)
    assert torch.allclose(total, expected), f"rank {rank}: the sum"
    assert torch.allclose(part, expected.chunk(world_size)[rank]), f"rank {rank}: its rows"
    return sum(c.sent for c in split), sum(c.sent for c in whole), tuple(part.shape)


t = torch.randn(8, B, D)  # (seq, batch, d)
for n in (2, 4):
    sent_split, sent_whole, part_shape = run(sp_versus_all_reduce, t, world_size=n)[0]
    print(f"{n} ranks: reduce-scatter + all-gather send {sent_split:g} B, the all-reduce "
          f"{sent_whole:g} B; in between each rank holds {part_shape} of {tuple(t.shape)}")
    assert sent_split == sent_whole
print("✓ sp_all_reduce is an all-reduce, with the same bytes, and 1/N of the rows in between")

# %% tests="sp_all_reduce_tests" points=2
# Hidden tests (2 points): 1, 2 and 4 ranks, random shapes, float32 and float64: the sum and
# this rank's rows, against the sum computed here; a length the world size does not divide.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(sp_all_reduce)
### END HIDDEN TESTS

# %% [markdown]
# ### The sequence-parallel f and g
#
# In a sequence-parallel layer, the pair around each tensor-parallel block changes. Where the
# block **begins**, each rank holds only its positions (after the sharded layer norm), but the
# column-parallel layer needs every position. Where it **ends**, each rank holds a partial sum
# over every position (after the row-parallel layer), and the sharded region that follows
# wants only this rank's positions of the sum. Korthikanti et al. call the two operators
# $g$ and $\bar g$; here they are `enter` and `leave`, conjugate as f and g were: each is the
# other with forward and backward swapped. Their forward passes are written for you: what
# does each send in the backward pass? Think of what the gradient of a copied tensor is, and
# of a summed one (sections 3 and 4).
#
# Two helpers, built from the collectives of `sp_all_reduce`:
# `gather_rows(t)` returns every rank's `t`, stacked along dimension 0 in rank order;
# `scatter_rows(t)` returns this rank's rows of the sum of every rank's `t`.

# %%
def gather_rows(t):
    """Every rank's t, stacked along dimension 0 in rank order (an all-gather)."""
    out = t.new_empty((dist.get_world_size() * t.shape[0], *t.shape[1:]))
    dist.all_gather_single(out, t.contiguous())
    return out


def scatter_rows(t):
    """This rank's rows of the sum over the ranks of t (a reduce-scatter)."""
    out = t.new_empty((t.shape[0] // dist.get_world_size(), *t.shape[1:]))
    dist.reduce_scatter_single(out, t.contiguous(), op=dist.ReduceOp.SUM)
    return out


# %% solution="sp_f_g"
def sp_f_g():
    """(enter, leave): the sequence-parallel pair, as autograd Functions on the default group."""

    class enter(torch.autograd.Function):
        """Where a tensor-parallel block begins: each rank holds its positions, (s / N, ...)."""

        @staticmethod
        def forward(ctx, part):
            return gather_rows(part)  # every position, for the column-parallel layer: (s, ...)

        @staticmethod
        def backward(ctx, grad):
            return scatter_rows(grad)  # BLANK the gradient of this rank's positions, (s / N, ...) # REJECT `grad` # REJECT `all_reduce_sum(grad)` # ACCEPT `scatter_rows(grad.clone())`

    class leave(torch.autograd.Function):
        """Where it ends: each rank holds a partial sum over every position, (s, ...)."""

        @staticmethod
        def forward(ctx, partial):
            return scatter_rows(partial)  # this rank's positions of the sum: (s / N, ...)

        @staticmethod
        def backward(ctx, grad):
            return gather_rows(grad)  # BLANK the gradient of this rank's partial sum, (s, ...) # REJECT `grad` # REJECT `scatter_rows(grad)`

    return enter, leave


# %% [markdown]
# The check: on 2 ranks, forward and backward through each, against the sums worked out here.

# %%
require_filled(sp_f_g)  # names any blank still empty


def try_sp_f_g(rank, world_size):
    enter, leave = sp_f_g()
    part = torch.full((1, 2), rank + 1.0, requires_grad=True)
    y = enter.apply(part)
    y.backward(torch.full((2, 2), 10.0 * (rank + 1)))
    whole = torch.full((2, 2), rank + 1.0, requires_grad=True)
    z = leave.apply(whole)
    z.backward(torch.full((1, 2), 10.0 * (rank + 1)))
    return y[:, 0].tolist(), part.grad[0, 0].item(), z[0, 0].item(), whole.grad[:, 0].tolist()


for rank, (y, grad_part, z, grad_whole) in enumerate(run(try_sp_f_g, world_size=2)):
    print(f"rank {rank}: enter forward {y}, backward {grad_part:g} | "
          f"leave forward {z:g}, backward {grad_whole}")
    assert y == [1.0, 2.0] and grad_part == 30.0, "enter: its positions, then the summed gradient"
    assert z == 3.0 and grad_whole == [10.0, 20.0], "leave: the summed positions, then every rank's"
print("✓ enter and leave are conjugate")

# %% tests="sp_f_g_tests" points=2
# Hidden tests (2 points): 1, 2 and 4 ranks, random shapes, float32 and float64: each
# direction of enter and leave against the values computed here; and what each rank did: one
# all-gather or one reduce-scatter per direction, no all-reduce.
### BEGIN HIDDEN TESTS
# The seeds only describe this pair in words; it is an exercise here (issue 23).
from autograder.grade_cell import grade
grade(sp_f_g)
### END HIDDEN TESTS

# %% [markdown]
# The pair around the MLP block of a sequence-parallel layer: its input arrives as this rank's
# positions; layer norm on those; `enter`; the column-parallel layer, GeLU, the row-parallel
# layer; `leave`; this rank's positions of the output. It equals the tensor-parallel block on
# the same positions and sends the same bytes (forward only here; in the backward pass the two
# swap, again the bytes of one all-reduce).

# %%
require_filled(tp_mlp)  # names any blank still empty


def sp_mlp_block(rank, world_size, x, w1, b1, w2, b2):
    """x: (seq, batch, d), of which this rank reads only its positions. Returns its positions
    of the output, and the collectives it called."""
    enter, leave = sp_f_g()
    x_mine = shard(x, rank, world_size, dim=0)  # (seq / N, batch, d): all this rank gets
    with torch.no_grad(), count_collectives() as calls:
        normed = F.layer_norm(x_mine, (D,))  # on seq / N positions only
        hidden = F.gelu(F.linear(enter.apply(normed), shard(w1, rank, world_size, dim=0),
                                 shard(b1, rank, world_size, dim=0)))
        out = leave.apply(F.linear(hidden, shard(w2, rank, world_size, dim=1)))
    return out + b2, calls


def tp_mlp_block(rank, world_size, x, w1, b1, w2, b2):
    """The tensor-parallel block: layer norm on every position, on every rank."""
    with torch.no_grad(), count_collectives() as calls:
        y = tp_mlp(rank, world_size, F.layer_norm(x, (D,)), w1, b1, w2, b2)
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
print("✓ the sequence-parallel block equals the tensor-parallel one, for the same bytes")

# %% [markdown]
# ## Wrap-up
#
# * Column-parallel: split the output features (rows of `nn.Linear.weight`, and the bias);
#   no communication forward; the input gradient needs an all-reduce.
# * Row-parallel: split the input features (columns of the weight); the partial sums need an
#   all-reduce forward, and the bias is added once, after it; no communication backward when
#   the input arrived split.
# * The weight gradients of the shards never need communication within tensor parallelism.
# * f (identity / all-reduce) and g (all-reduce / identity) around a column-then-row pair:
#   one all-reduce forward and one backward per MLP and per attention block; 2 + 2 per layer,
#   2 more with full recomputation. Two column-parallel layers would send $\frac{h+d}{2d}$
#   times as many bytes (2.5 for $h = 4d$).
# * Sequence parallelism: the same bytes as reduce-scatter + all-gather, with the norm region
#   sharded along the sequence; its pair gathers forward and reduce-scatters backward where a
#   block begins, and the reverse where it ends.
#
# **Next.** Notebook 05 cuts the model the other way, into consecutive stages: pipeline
# parallelism.
