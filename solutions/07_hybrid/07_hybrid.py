# %% [markdown]
# # 07 · Hybrid parallelism: DP x TP x PP on one grid of ranks
#
# Notebooks 03-06 used one kind of parallelism at a time. Large runs use all of them at once:
# the GPUs form a **grid**, and each dimension of the grid is one kind of parallelism.
# Narayanan et al. (2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM") call their composition **PTD-P**: pipeline (PP), tensor (TP) and data (DP)
# parallelism together; DeepSpeed calls the same thing "3-D parallelism". picotron builds the
# grid for a small Llama; torchtitan builds it from a PyTorch `DeviceMesh`.
#
# **What you will build**
#
# 1. The grid: which ranks form each TP, DP and PP group, checked against PyTorch's
#    `init_device_mesh`.
# 2. A small transformer MLP block split over a TP group, then 2-D (DP 2 x TP 2) with
#    PyTorch's own `parallelize_module` and `fully_shard`, equal to training on one process.
# 3. 3-D on 8 ranks (PP 2 x DP 2 x TP 2): the blocks as pipeline stages, written by hand;
#    then a weight that two stages share.
# 4. Bytes: each group's messages predicted, then measured on the run.
# 5. Memory, and choosing a layout for a trillion-parameter model.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your code works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import contextlib
import copy
import hashlib
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from distlab import require_filled, reveal, run
from distlab.hybrid import count_by_group, show_bytes, show_grid, show_layouts

# %% [markdown]
# ## 1. The grid
#
# $N = \mathrm{PP} \cdot \mathrm{DP} \cdot \mathrm{TP}$ ranks are laid out as an array of shape
# (PP, DP, TP), filled in rank order with the **last** dimension changing fastest, the way
# `torch.arange(N).reshape(pp, dp, tp)` fills it:
#
# ```
#  shape (2, 2, 2)          tp=0 tp=1
#  stage pp=0   dp=0:        0    1
#               dp=1:        2    3
#  stage pp=1   dp=0:        4    5
#               dp=1:        6    7
# ```
#
# From coordinates to a rank is `rank = (p * DP + d) * TP + t`; `mesh_coords` goes back.

# %%
def mesh_coords(rank, shape):
    """(p, d, t): rank's coordinates in a grid of shape (pp, dp, tp), tp changing fastest."""
    return tuple(int(c) for c in torch.unravel_index(torch.tensor(rank), shape))


# %% [markdown]
# Each rank belongs to three groups, one per dimension of the grid. In the picture above, rank
# 5's TP group is {4, 5}, its DP group {5, 7}, its PP group {1, 5}; rank 2's
# are {2, 3}, {0, 2} and {2, 6}. `group_ranks(shape, dim)` lists every group of one dimension
# (`dim` 0 for PP, 1 for DP, 2 for TP), each as its ranks in increasing order: it files each
# rank under a key, and the ranks filed under one key form one group. What is the key?

# %% solution="group_ranks"
def group_ranks(shape, dim):
    """Every group along dimension dim (0 pp, 1 dp, 2 tp) of a grid of shape (pp, dp, tp): a
    list of lists of ranks, each list in increasing order."""
    groups = {}
    for rank in range(math.prod(shape)):
        coords = mesh_coords(rank, shape)
        key = coords[:dim] + coords[dim + 1:]  # BLANK the key # ACCEPT `tuple(c for i, c in enumerate(coords) if i != dim)` # REJECT `coords[dim]` `coords[:dim]` `coords[dim + 1:]`
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


# %%
assert group_ranks((2, 2, 2), 2) == [[0, 1], [2, 3], [4, 5], [6, 7]], "the TP groups of (2, 2, 2)"
assert group_ranks((2, 2, 2), 1) == [[0, 2], [1, 3], [4, 6], [5, 7]], "the DP groups of (2, 2, 2)"
assert group_ranks((2, 2, 2), 0) == [[0, 4], [1, 5], [2, 6], [3, 7]], "the PP groups of (2, 2, 2)"
print("DP groups of (1, 4, 2):", group_ranks((1, 4, 2), 1))
print("✓ every group of (2, 2, 2) is right")
show_grid((2, 2, 2), group_ranks, mesh_coords)
reveal("group_ranks")

# %% tests="group_ranks_tests" points=1
# Hidden tests (1 point): every dimension of random shapes; each rank in exactly one group.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_ranks)
### END HIDDEN TESTS

# %% [markdown] why="group_ranks"
# **Why.** The members of a group differ in one kind of parallelism only. The picture shows
# where that puts them: with TP the fastest dimension, the TP groups are runs of neighbouring
# ranks. That order is chosen: consecutive ranks sit on one server (ranks 0-7 on the first
# 8-GPU node, ...). A TP group all-reduces activations in every layer, forward and backward:
# the heaviest and most latency-bound traffic, so its ranks must be neighbours on the fast
# links. The other two dimensions communicate far less often (section 4 counts it), so their
# groups can cross servers.

# %% [markdown]
# ### The groups on real ranks
#
# `dist.new_group(ranks)` makes a process group of some ranks; a collective called with
# `group=...` runs among them only. It is collective itself: **every** rank must call it for
# **every** group, in the same order, even for the groups it is not in. `build_groups` does
# that with your `group_ranks` and keeps this rank's three.
#
# PyTorch's `init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))` builds
# the same grid: `mesh["tp"]` is this rank's TP sub-mesh, `.get_group()` its process group,
# `mesh.get_coordinate()` this rank's coordinates. The check compares them on 8 ranks.

# %%
def build_groups(shape):
    """This rank's {"pp": group, "dp": group, "tp": group}, made with dist.new_group."""
    mine = {}
    for dim, name in enumerate(("pp", "dp", "tp")):
        for ranks in group_ranks(shape, dim):
            group = dist.new_group(ranks)  # every rank creates every group
            if dist.get_rank() in ranks:
                mine[name] = group
    return mine


def compare_with_mesh(rank, world_size, shape):
    groups = build_groups(shape)
    names = ("pp", "dp", "tp")
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    ours = {name: dist.get_process_group_ranks(groups[name]) for name in names}
    theirs = {name: dist.get_process_group_ranks(mesh[name].get_group()) for name in names}
    return ours, theirs, mesh_coords(rank, shape), tuple(mesh.get_coordinate())


compared = run(compare_with_mesh, (2, 2, 2), world_size=8)
for rank, (ours, theirs, coords, mesh_coordinate) in enumerate(compared):
    assert ours == theirs, f"rank {rank}: yours {ours}, the DeviceMesh's {theirs}"
    assert coords == mesh_coordinate, f"rank {rank}: {coords}, the DeviceMesh's {mesh_coordinate}"
print("rank 5's groups:", compared[5][0])
print("✓ your groups and coordinates are the DeviceMesh's, on every rank")

# %% [markdown]
# ## 2. TP inside a block, then DP across
#
# The model: pre-norm MLP blocks, the half of a transformer block that follows attention
# (with the usual ff = 4h it holds two thirds of the block's weights; here ff = 2h, half).
# Attention splits the same way, by heads: notebook 04. A block computes
# $x + W_2\,\mathrm{gelu}(W_1\,\mathrm{LN}(x) + b_1) + b_2$, with $W_1$ of shape (ff, hidden)
# and $W_2$ (hidden, ff). Tiny, and in float64, so that rounding cannot hide a mistake.

# %%
HIDDEN = 8  # the blocks' width
FF = 16  # the MLP's inner width
SEQ = 3  # positions per row of the batch


class Block(nn.Module):
    def __init__(self, hidden=HIDDEN, ff=FF):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ff)
        self.fc2 = nn.Linear(ff, hidden)

    def forward(self, x):  # x: (batch, seq, hidden)
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def make_model(blocks=2, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(*[Block() for _ in range(blocks)]).double()


def make_batch(rows=8, seed=1):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, SEQ, HIDDEN, generator=generator, dtype=torch.float64)
    return x, torch.randn(rows, SEQ, HIDDEN, generator=generator, dtype=torch.float64)


def is_part(tensor, whole):
    """Is tensor equal to whole, or to a contiguous slice of it along one dimension?"""
    if tensor.dim() != whole.dim():
        return False
    for dim in range(whole.dim()):
        if any(tensor.shape[k] != whole.shape[k] for k in range(whole.dim()) if k != dim):
            continue
        for start in range(whole.shape[dim] - tensor.shape[dim] + 1):
            if torch.allclose(tensor, whole.narrow(dim, start, tensor.shape[dim]), atol=1e-10):
                return True
    return False


# %% [markdown]
# **TP inside a block** is notebook 04's Megatron MLP, over a TP *group* now instead of all
# ranks: each TP rank of a group of $n$ owns $1/n$ of the ff features, and `TPBlock` below
# keeps what notebook 04 kept of `fc1` and `fc2` (given). `tp_f_g(group)` gives notebook 04's
# two autograd Functions over the group: $f$ is the identity forward and all-reduces the
# gradient backward; $g$ all-reduces forward and is the identity backward.
# `F.linear(x, w, b)` is `x @ w.T + b`.
#
# This block's `LayerNorm` has a weight and a bias, and every TP rank holds a copy of both,
# whole; fc2's bias is whole on every rank too. Yours is the block's forward.
#
# At the end, each TP rank's block must return exactly the plain block's output, and every
# tensor it holds, whole or split, must get the gradient that one process computes for it (for
# a split one, the matching part), with one all-reduce forward and one backward per block, in
# its TP group, and no other communication.

# %%
def tp_f_g(group):
    """Megatron's f and g (notebook 04) as autograd Functions over `group`."""

    def summed(t):
        t = t.clone()
        dist.all_reduce(t, group=group)
        return t

    class f(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return summed(grad)

    class g(torch.autograd.Function):
        @staticmethod
        def forward(ctx, partial):
            return summed(partial)

        @staticmethod
        def backward(ctx, grad):
            return grad

    return f, g


# %% solution="TPBlock" drill
class TPBlock(nn.Module):
    """A Block split over the TP group `group`."""

    def __init__(self, block, group):
        super().__init__()
        t, n = dist.get_rank(group), dist.get_world_size(group)
        ff = block.fc1.out_features
        part = slice(t * ff // n, (t + 1) * ff // n)  # the ff features TP rank t owns
        self.f, self.g = tp_f_g(group)
        self.norm = copy.deepcopy(block.norm)  # replicated
        w1, b1 = block.fc1.weight[part], block.fc1.bias[part]  # notebook 04
        w2, b2 = block.fc2.weight[:, part], block.fc2.bias
        self.w1, self.b1, self.w2, self.b2 = (nn.Parameter(p.detach().clone()) for p in (w1, b1, w2, b2))

    def forward(self, x):
        h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2)) + self.b2  # BLANK `h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2)) + self.b2` the block's forward # ACCEPT `h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1) + self.b1); return x + self.g.apply(F.linear(h, self.w2)) + self.b2` `return x + self.g.apply(F.linear(F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)), self.w2)) + self.b2` # REJECT `h = F.gelu(F.linear(self.norm(self.f.apply(x)), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2)) + self.b2` `h = F.gelu(F.linear(self.norm(x), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2)) + self.b2` `h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); return x + F.linear(h, self.w2) + self.b2` `h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2, self.b2))` `h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); return x + self.g.apply(F.linear(h, self.w2) + self.b2)`


# %% [markdown]
# The check: on 4 ranks, TP groups {0, 1} and {2, 3}, each rank's block on the same input,
# against the plain block: the output, the input's gradient, and each parameter's gradient
# against the matching part of the plain block's.

# %%
def tp_block_grads(rank, world_size):
    groups = build_groups((1, 2, 2))
    layer = TPBlock(make_model(1)[0], groups["tp"])
    x, _ = make_batch(2)
    x = x.requires_grad_()
    out = layer(x)
    out.sum().backward()
    return out.detach(), x.grad, {name: (p.detach(), p.grad) for name, p in
                                  layer.named_parameters()}


require_filled(TPBlock)
plain = make_model(1)[0]
x, _ = make_batch(2)
x = x.requires_grad_()
want = plain(x)
want.sum().backward()
for rank, (out, x_grad, params) in enumerate(run(tp_block_grads, world_size=4)):
    assert torch.allclose(out, want, atol=1e-12), f"rank {rank}: the output"
    assert torch.allclose(x_grad, x.grad, atol=1e-12), f"rank {rank}: the input's gradient"
    held = sum(p.numel() for p, _ in params.values())
    assert held < sum(p.numel() for p in plain.parameters()), f"rank {rank} holds the whole block"
    for name, (param, grad) in params.items():
        source = [q for q in plain.parameters() if is_part(param, q.detach())]
        assert source, f"rank {rank}: {name} is no part of the block's parameters"
        assert any(is_part(grad, q.grad) for q in source), \
            f"rank {rank}: a parameter's gradient differs from the plain block's"
print("✓ on each TP rank: the block's output and input gradient, and its parts' gradients")
reveal("TPBlock")

# %% tests="TPBlock_tests" points=1
# Hidden tests (1 point): 1, 2 and 4 ranks, TP groups of 1, 2 and 4 inside them, random
# widths; values against the plain block, the collectives, and each rank's share of the work.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(TPBlock)
### END HIDDEN TESTS

# %% [markdown] why="TPBlock"
# **Why.** The LayerNorm's weight and bias are whole on every TP rank, and their gradients
# must be whole too, the same on every rank. $f$ marks where the computation that every TP
# rank repeats ends and the split one begins. Backward, each rank's `fc1` part gives only its own features' share of the gradient
# of the LayerNorm's output; $f$ sums the shares over the group, so everything before $f$
# (the LayerNorm, its weight and bias, the block's input) gets the whole gradient, the same on
# every TP rank, with no all-reduce of its own. With $f$ before the LayerNorm the input's
# gradient is still whole ($f$ sums it), but the LayerNorm's weight and bias get this rank's
# share only, and the copies drift apart. Megatron-LM puts $f$ ("copy to the tensor-parallel
# region") at the input of the column-parallel linear, after the norm. (With sequence
# parallelism the norm itself runs split by positions, and Megatron-LM then all-reduces its
# weight's gradient over TP.)
#
# The rest is notebook 04's: `fc1` is **column-parallel** (a rank computes its own ff
# features from the whole input), `fc2` **row-parallel** (a rank's features give a partial sum
# of the output that $g$ completes); fc2's bias, whole on every rank, is added after $g$'s
# sum, or it would be counted $n$ times.

# %% [markdown]
# **DP across.** A TP group is one replica of the model; DP replicas train on different parts
# of the batch, and the copies of each parameter must end every step equal to what one
# process training on the whole batch gets. Notebook 03 did it by hand; here PyTorch does it.
#
# ### DP x TP with PyTorch's API
#
# torchtitan composes the two with PyTorch's own tools: DTensor's tensor parallelism along
# `mesh["tp"]` and FSDP2 (ZeRO-3, notebook 06) along `mesh["dp"]`. The budget of ZeRO-3: a
# block's weights are whole (gathered over DP) only around its own computation. Per step and
# per block: one all-gather before its forward, its weights **freed** after its forward, one
# all-gather before its backward, one reduce-scatter of its gradients. At any moment at most
# two blocks are whole: the one computing and the one whose all-gather is in flight. In
# backward FSDP2 prefetches by default: when a block's backward begins, it issues the
# all-gather of the block before it. In forward it issues a block's all-gather when that
# block's forward is called (on a GPU that still overlaps the compute before it, since the CPU
# runs ahead of the GPU); issuing it earlier, from the block before, is opt-in:
# `block.set_modules_to_forward_prefetch([next_block])`.
#
# The API, on other modules than the blanks':
#
# * `distribute_tensor(t, mesh, placements)` places `t` on a mesh, one placement per mesh
#   dimension: `Shard(0)` splits dimension 0 over it, `Replicate()` copies; `.to_local()` is
#   this rank's piece.
# * `parallelize_module(module, tp_mesh, plan)` splits `module` (or, with a dict
#   `{"name": style}`, its named submodules) over the TP sub-mesh, and inserts the collectives;
#   weights become `DTensor`s. A plan for one projection of attention:
#   `parallelize_module(attention, mesh["tp"], {"q_proj": ColwiseParallel()})`.
#   `ColwiseParallel()` shards an `nn.Linear`'s weight by its output features: the input
#   whole, the output split along its last dimension. `RowwiseParallel()` shards it by its
#   input features: the input split along its last dimension, the partial outputs summed.
# * `fully_shard(module, mesh=dp_mesh)` makes `module` one FSDP unit: the parameters under it
#   that no unit made before holds are sharded over `dp_mesh`, all-gathered before the
#   module's forward and before its backward, and freed after each. Its argument
#   `reshard_after_forward` (the freeing after forward) defaults, in torch 2.13 (this
#   course's), to `None`: true for a unit that another unit holds, false for a **root**
#   state, a unit that no other unit holds, since for training its backward follows at once;
#   an explicit `True` on the root is honoured. Older releases differ (torch 2.4, for one):
#   the default was `True`, and a root was never freed after its forward, whatever it was
#   given.
#
# In `shard_2d` below the TP plan is given (notebook 04's split, in DTensor's words). Yours is
# `units`: the modules that `fully_shard` makes FSDP units over DP, in the order it is called,
# so that a step keeps ZeRO-3's budget above.
#
# The check trains 3 steps on 4 ranks (DP 2 x TP 2), compares what each rank's model computes
# with one process's, and counts the collectives of the first step with `CommDebugMode`.

# %% solution="shard_2d"
def shard_2d(model, mesh):
    """model (a Sequential of Blocks) tensor-parallel over mesh["tp"], then ZeRO-3 over
    mesh["dp"] within ZeRO-3's budget. Returns the model."""
    for block in model:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    units = [*model, model]  # BLANK `[*model, model]` the modules that become units, in order # ACCEPT `list(model) + [model]` `[block for block in model] + [model]` # REJECT `list(model)` `[model]` `[model, *model]` `[*model]` `[model[0], model]`
    for unit in units:
        fully_shard(unit, mesh=mesh["dp"])
    return model


# %%
def run_2d_pytorch(rank, world_size, steps=3, lr=0.1):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = shard_2d(make_model(), mesh)
    placements = [Shard(0), Replicate()]
    x, y = (distribute_tensor(t, mesh, placements, src_data_rank=None).to_local()
            for t in make_batch())
    x = x.clone().requires_grad_()  # CommDebugMode's module hooks want an input with a gradient
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    counts = CommDebugMode()
    for step in range(steps):
        optimizer.zero_grad()
        with counts if step == 0 else contextlib.nullcontext():  # the first step, counted
            F.mse_loss(model(x), y).backward()
        optimizer.step()
    calls = {str(op).split(".")[-1].strip("_"): n for op, n in counts.get_comm_counts().items()}
    with torch.no_grad():
        return model(make_batch(seed=7)[0]), calls


def single_process(steps=3, lr=0.1, blocks=2):
    model = make_model(blocks)
    x, y = make_batch()
    for _ in range(steps):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return model


require_filled(shard_2d)
results = run(run_2d_pytorch, world_size=4)
trained = single_process()
with torch.no_grad():
    want = trained(make_batch(seed=7)[0])
for rank, (out, _) in enumerate(results):
    assert torch.allclose(out, want, atol=1e-12), f"rank {rank}: its trained model differs"
calls = results[0][1]
print("rank 0's FSDP collectives in the first step:",
      {name: n for name, n in calls.items() if "all_reduce" not in name})
gathers = sum(n for name, n in calls.items() if "allgather" in name)
assert gathers == 4, f"{gathers} all-gathers in a step of 2 blocks; the budget's count: 4"
print("✓ parallelize_module + fully_shard train like one process, within ZeRO-3's budget")
reveal("shard_2d")

# %% tests="shard_2d_tests" points=1
# Hidden tests (1 point): 4 ranks, DP 2 x TP 2, 2 or 3 blocks of random widths; how each
# weight is placed on the mesh, the parameters after training against one process, and the
# collectives of a step.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(shard_2d)
### END HIDDEN TESTS

# %% [markdown] why="shard_2d"
# **Why.** DTensor's all-reduces (the row-parallel sum forward, the column-parallel input
# gradient backward) are your $g$ and $f$. The count of all-gathers is
# the evidence for the budget: two per block means each block was freed after its forward
# and gathered again for its backward. The units are one per block and, around them, the
# whole model, made last: `fully_shard` on the blocks alone leaves each block a root, and a
# root is not freed after its forward, so every block would stay whole from its forward to
# its backward (one all-gather per block, the memory of ZeRO-3 gone); the model alone is one
# unit, all blocks whole at once; the model first takes every parameter, leaving the blocks
# nothing to shard. The outer unit holds no parameter of its own here, so being a root costs
# nothing (torchtitan and notebook 06 arrange their units the same way). FSDP reduce-scatters
# the gradients over DP where a hand-written DP all-reduces them (ZeRO-3 against DDP:
# notebook 06).

# %% [markdown]
# ## 3. Three dimensions: pipeline stages over PP
#
# Now 8 ranks, shape (2, 2, 2): stage $p$ holds block $p$, split over its TP group, in every
# replica. Each replica's rows are cut into micro-batches and run as in GPipe
# (notebook 05): every micro-batch's forward, stage after stage, each stage sending its output
# to the next; then every micro-batch's backward, in the other direction. At the end of each
# step every rank must hold its part of what plain SGD on one process, on the whole batch,
# gives (the mean loss over the batch), having computed only its share.
#
# The API: `dist.get_rank(group)` is this rank's index in `group`, `dist.get_world_size(group)`
# the group's size; `dist.send(tensor, dst)`, `dist.recv(tensor, src)`; `out.backward(grad)`
# runs the backward of `out` from the gradient `grad` of the loss with respect to `out`.
#
# **A bug report.** A first version of this function began with
#
# ```python
# pipeline = list(range(dist.get_world_size())); p = dist.get_rank(); xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)
# ```
#
# (`pipeline`: the ranks of the stages, first to last; `p`: this rank's stage; `xs`, `ys`: the
# micro-batches this rank runs). On 2 ranks of pure pipeline parallelism (PP 2 x DP 1 x TP 1)
# it trained exactly like one process. On this notebook's 8-rank grid it hung; this is where
# each rank was waiting when it was stopped:
#
# ```
# rank 0: all_reduce, group [0, 1]   (in stage(h), micro-batch 0)
# rank 1: recv from rank 0           (micro-batch 0)
# rank 2: recv from rank 1           (micro-batch 0)
# rank 3: recv from rank 2           (micro-batch 0)
# rank 4: recv from rank 3           (micro-batch 0)
# rank 5: recv from rank 4           (micro-batch 0)
# rank 6: recv from rank 5           (micro-batch 0)
# rank 7: recv from rank 6           (micro-batch 0)
# ```
#
# Blank [1] is that line, fixed.

# %% solution="train_3d" drill
def train_3d(stage, x, y, groups, steps=2, lr=0.1, micro_batches=2):
    """SGD with GPipe along the pipeline (stage: this rank's part of the model, its blocks
    split over its TP group); groups: this rank's groups by name; x, y the whole batch (the
    same on every rank). Returns stage."""
    pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank()); d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)  # BLANK `pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank()); d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)` the bug report's line, fixed # ACCEPT `pipeline = dist.get_process_group_ranks(groups["pp"]); p = dist.get_rank(groups["pp"]); d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)` # REJECT `pipeline = list(range(dist.get_world_size())); p = dist.get_rank(); xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)` `pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank()); xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)` `pipeline = dist.get_process_group_ranks(groups["dp"]); p = pipeline.index(dist.get_rank()); d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)` `pipeline = dist.get_process_group_ranks(groups["pp"]); p = dist.get_rank(); d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)` `pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank()); d, n_d = dist.get_rank(groups["tp"]), dist.get_world_size(groups["tp"]); xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)`
    last = len(pipeline) - 1  # the last stage
    for _ in range(steps):
        stage.zero_grad()
        inputs, outputs = [], []
        for m in range(micro_batches):  # forward: from the previous stage, to the next
            h = xs[m]
            if p > 0:
                h = torch.empty_like(xs[m])
                dist.recv(h, pipeline[p - 1])
                h.requires_grad_()
            out = stage(h)
            if p < last:
                dist.send(out.detach(), pipeline[p + 1])
            inputs.append(h)
            outputs.append(out)
        for m in range(micro_batches):  # backward: from the next stage, to the previous
            if p == last:
                (F.mse_loss(outputs[m], ys[m]) / micro_batches).backward()
            else:
                grad = torch.empty_like(outputs[m])
                dist.recv(grad, pipeline[p + 1])
                outputs[m].backward(grad)
            if p > 0:
                dist.send(inputs[m].grad, pipeline[p - 1])  # notebook 05
        for param in stage.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, group=groups["dp"])  # notebook 03
        with torch.no_grad():
            for param in stage.parameters():
                param -= lr * param.grad
    return stage


# %%
def run_3d(rank, world_size, shape, count=False, blocks=None):
    groups = build_groups(shape)
    p = mesh_coords(rank, shape)[0]
    k = (blocks or shape[0]) // shape[0]  # blocks per stage (one unless told)
    model = make_model(k * shape[0])
    stage = nn.Sequential(*(TPBlock(block, groups["tp"]) for block in model[p * k:(p + 1) * k]))
    names = {name: dist.get_process_group_ranks(group) for name, group in groups.items()}
    if not count:
        rows = []  # the rows of each micro-batch this rank's stage ran
        stage.register_forward_pre_hook(lambda module, args: rows.append(len(args[0])))
        train_3d(stage, *make_batch(), groups)
        return [t.detach() for t in stage.parameters()], sum(rows)
    with count_by_group(names) as calls:
        train_3d(stage, *make_batch(), groups, steps=1)
    return {name: calls.bytes_by(name) for name in names}


require_filled(train_3d)
expected = single_process(steps=2)
for rank, (params, rows) in enumerate(run(run_3d, (2, 2, 2), world_size=8)):
    p = mesh_coords(rank, (2, 2, 2))[0]
    share = 2 * len(make_batch()[0]) // 2  # 2 steps, each of its replica's half of the batch
    assert rows == share, (f"rank {rank} (stage {p}) ran {rows} rows in 2 steps, where its "
                           f"replica's share of the batch is {share}")
    block = [q.detach() for q in expected[p].parameters()]
    for got in params:
        assert any(is_part(got, q) for q in block), f"rank {rank} (stage {p}): a parameter"
print("✓ PP 2 x DP 2 x TP 2 on 8 ranks: every rank's parts equal single-process training")
reveal("train_3d")

# %% tests="train_3d_tests" points=1
# Hidden tests (1 point): layouts PP x DP x TP of 2 to 8 ranks, random batches; the rows
# each rank trained on, parameters against single-process SGD, who sends what to whom, and
# what each rank's gradients are combined with.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(train_3d)
### END HIDDEN TESTS

# %% [markdown] why="train_3d"
# **Why.** A rank's pipeline is its PP group, and its stage is its place in that group. A
# stage's neighbours are the previous and next entries of its pipeline: in the (2, 2, 2) grid
# 4 ranks apart, never rank ± 1 (that is a TP neighbour, holding the other half of the same
# block). The bug report's line was right on pure PP because there the world is one pipeline;
# in the grid a rank's global number counts the ranks of every replica and every TP part, so
# rank 5 took itself for stage 5 of 8. Backward runs the chain rule across each boundary,
# from the last stage to the first. The DP reduction at the end is notebook 03's, in the DP
# group only: the copies of a parameter are the ranks that differ in the replica alone.

# %% [markdown]
# ### A weight two stages share
#
# GPT-style models **tie** the input embedding and the output layer: one matrix $E$ turns
# tokens into vectors at the start of the model and vectors into token scores at its end.
# With pipeline stages, the start is on the first stage and the end on the last, so Megatron-LM
# keeps a copy of $E$ on both, and builds a process group for the copies of each pipeline, its
# "embedding group", next to the PP, DP and TP groups. Megatron-LM also splits $E$ over TP, by
# vocabulary (each TP rank holds some tokens' rows); this notebook simplifies: its copy of $E$
# is whole on every TP rank, like the LayerNorm. `tied_groups` lists them.

# %%
def tied_groups(shape):
    """Every embedding group of a grid of shape (pp, dp, tp): the first and the last rank of
    each pipeline (one rank alone with one stage)."""
    return [sorted({pipeline[0], pipeline[-1]}) for pipeline in group_ranks(shape, 0)]


# %% [markdown]
# A step on the grid: every replica runs its own rows of the batch; on the first stage $E$
# turns tokens into vectors, on the last it turns vectors into scores. The backward of a
# copy of $E$ gives it a gradient from what its own stage did with $E$, on its replica's
# rows. Before the update, every copy's gradient must be what one process gets for $E$ from
# the whole batch (the mean loss over all its rows), so that all copies of $E$ stay equal.
#
# Write `sync_tied(grad, groups)`, called on every rank of the first and the last stage:
# `grad` is this rank's copy's gradient, to be made that in place; `groups` holds this
# rank's "pp", "dp" and "tp" groups and "tied", its embedding group (with one stage, the rank
# alone). The replicas' reduction, over DP, is given; yours is the one before it. The picture for the grid (2, 2, 2), one copy per rank of stages 0 and 1:
#
# ```
#           stage 0 (E turns tokens into vectors)   stage 1 (E turns vectors into scores)
#  dp=0:    ranks 0, 1: its use, replica 0's rows     ranks 4, 5: its use, replica 0's rows
#  dp=1:    ranks 2, 3: its use, replica 1's rows     ranks 6, 7: its use, replica 1's rows
# ```

# %% solution="sync_tied"
def sync_tied(grad, groups):
    """In place: this rank's copy's gradient of the tied weight, from its own stage's use on
    its replica's rows, made the gradient one process gets from the whole batch."""
    dist.all_reduce(grad, group=groups["tied"])  # BLANK `dist.all_reduce(grad, group=groups["tied"])` the reduction before the replicas # ACCEPT `dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=groups["tied"])` `dist.all_reduce(tensor=grad, group=groups["tied"])` # REJECT `dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=groups["tied"])` `dist.all_reduce(grad, group=groups["pp"])` `dist.all_reduce(grad, group=groups["tp"])` `dist.all_reduce(grad)` `dist.all_reduce(grad, group=groups["tied"]); grad /= dist.get_world_size(groups["tied"])`
    dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=groups["dp"])  # the replicas (given)


# %% [markdown]
# The check: on each grid below, a model $y = x E^\top E$ (the first use of $E$ on the first
# stage, the second on the last): every rank of those stages computes its copy's gradient on
# its replica's rows, calls your `sync_tied`, and compares the result with what one process
# gets from the whole batch; it prints the bytes each group carried.

# %%
def tied_grads(rank, world_size, shape):
    groups = build_groups(shape)
    for ranks in tied_groups(shape):  # every rank creates every group
        group = dist.new_group(ranks)
        if rank in ranks:
            groups["tied"] = group
    p, d, _ = mesh_coords(rank, shape)
    x, y = make_batch()
    E = torch.eye(HIDDEN, dtype=torch.float64) + 0.1 * torch.randn(
        HIDDEN, HIDDEN, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    def copy_grad(x, y, stage, stages):
        """The gradient of the copy of E on `stage` of a pipeline of `stages`, from rows x, y."""
        first = E.clone().requires_grad_()  # the copy on the first stage
        last = first if stages == 1 else E.clone().requires_grad_()  # on the last
        F.mse_loss(x @ first.T @ last, y).backward()
        return first.grad if stage == 0 else last.grad

    want = copy_grad(x, y, 0, 1)  # one process, one E, the whole batch
    if p not in (0, shape[0] - 1):
        return p, None, None, want
    grad = copy_grad(x.chunk(shape[1])[d], y.chunk(shape[1])[d], p, shape[0])  # its rows
    names = {name: dist.get_process_group_ranks(group) for name, group in groups.items()}
    with count_by_group(names) as calls:
        sync_tied(grad, groups)
    return p, grad, calls.by_group(), want


require_filled(sync_tied)
for shape in ((2, 2, 2), (3, 2, 1), (1, 2, 1)):
    for rank, (p, grad, carried, want) in enumerate(run(tied_grads, shape,
                                                         world_size=math.prod(shape))):
        if grad is None:
            continue
        if rank == 0:
            print(f"{shape}, rank 0: bytes by group {carried}")
        assert torch.allclose(grad, want, atol=1e-12), \
            f"{shape}: rank {rank} (stage {p}): its copy's gradient is not one process's"
print("✓ every copy's gradient is the one-process gradient of the whole batch")
reveal("sync_tied")

# %% tests="sync_tied_tests" points=1
# Hidden tests (1 point): grids of 2 to 8 ranks with 1 to 3 stages, random batches; the
# gradient on every copy against one process, and the groups of the collectives.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(sync_tied)
### END HIDDEN TESTS

# %% [markdown] why="sync_tied"
# **Why.** Two kinds of copy meet here. The copies in an embedding group hold *different uses*
# of one weight: one process would add their gradients (autograd adds the gradients of every
# use of a tensor), so the group **sums**. The copies in a DP group hold the *same use* on
# different rows: the mean loss over the batch is the mean of the replicas' mean losses, so
# the group **averages**. Averaging the embedding group halves the gradient; summing the
# replicas multiplies it by DP. The two reductions are linear, so either may come first, as in
# Megatron-LM, which all-reduces the embedding group's gradients after the DP reduction. A
# middle stage holds no copy and joins neither.

# %% [markdown]
# ## 4. Bytes: predicted, then measured
#
# Per step, the message bytes of one rank (the bytes of the tensor each all-reduce, send and
# recv is given; a ring all-reduce puts about $2(n-1)/n$ times its tensor on the links), by
# group, for the code of section 3 (a stage's blocks are `TPBlock`s, without a tied weight),
# now with any number of blocks per stage.
#
# An example of the count, for PP and another model: a middle stage of a 4-stage pipeline,
# with 4 micro-batches of 2 rows of 128 positions, width 1024, 2-byte values. Per micro-batch
# it receives an activation and sends one forward, receives a gradient and sends one back:
# 4 messages of $2 \cdot 128 \cdot 1024 \cdot 2$ B = 524288 B, 16 messages in the step,
# 8388608 B.
#
# Yours: the TP and the DP bytes of the rank, from what `TPBlock` and `train_3d` send. `dims`
# describes the model: `blocks` (all stages together, a multiple of PP), `hidden`, `ff` (a
# multiple of TP), `seq`; `rows` is the whole batch (a multiple of DP times `micro_batches`),
# `itemsize` bytes per value.

# %% solution="group_bytes"
def group_bytes(dims, shape, rows, micro_batches, itemsize=8):
    """Message bytes of one training step on a rank, by group: {"tp", "dp"}."""
    pp, dp, tp = shape
    hidden, ff, seq = dims["hidden"], dims["ff"], dims["seq"]
    return {
        "tp": 2 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * itemsize if tp > 1 else 0,  # BLANK `2 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * itemsize` bytes on this rank # ACCEPT `2 * (dims["blocks"] / pp) * (rows // dp) * seq * hidden * itemsize` `2 * (dims["blocks"] // pp) * (rows / dp) * seq * hidden * itemsize` `dims["blocks"] // pp * 2 * micro_batches * (rows // dp // micro_batches) * seq * hidden * itemsize` `2 * dims["blocks"] // pp * rows // dp * seq * hidden * itemsize` # REJECT `4 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * itemsize` `2 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * itemsize * micro_batches` `2 * (dims["blocks"] // pp) * (rows // dp) * seq * ff // tp * itemsize` `2 * (rows // dp) * seq * hidden * itemsize` `2 * dims["blocks"] * (rows // dp) * seq * hidden * itemsize` `2 * (dims["blocks"] // pp) * rows * seq * hidden * itemsize`
        "dp": dims["blocks"] // pp * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize if dp > 1 else 0,  # BLANK `dims["blocks"] // pp * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize` bytes on this rank # ACCEPT `dims["blocks"] / pp * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize` `dims["blocks"] // pp * ((2 * hidden * ff + ff) // tp + 3 * hidden) * itemsize` `dims["blocks"] // pp * itemsize * (2 * hidden * ff / tp + ff / tp + 3 * hidden)` # REJECT `dims["blocks"] // pp * (2 * hidden * ff + ff + 3 * hidden) / tp * itemsize` `dims["blocks"] // pp * (2 * hidden * ff + ff + 3 * hidden) * itemsize` `dims["blocks"] // pp * ((2 * hidden * ff + ff) / tp + 2 * hidden) * itemsize` `dims["blocks"] * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize`
    }


# %% [markdown]
# The check: section 3's run again, with 2 blocks a stage, counted (`count_by_group` records
# each all-reduce with its group's ranks, none on a group of one rank, which moves nothing,
# each send and recv with the pipeline of its two ranks), against your prediction; the bytes
# are printed once your prediction matches.

# %%
require_filled(group_bytes)
DIMS = {"blocks": 4, "hidden": HIDDEN, "ff": FF, "seq": SEQ}
predicted = group_bytes(DIMS, (2, 2, 2), 8, 2)


def measured_if_predicted(predicted):
    """The bytes each rank moved in one step of the run, returned only if they are predicted."""
    moved = run(run_3d, (2, 2, 2), True, DIMS["blocks"], world_size=8)
    for name in ("tp", "dp"):
        assert {m[name] for m in moved} == {predicted[name]}, \
            f"{name}: your prediction is not what the ranks moved in this group"
    return moved


measured = measured_if_predicted(predicted)
print(f"{'group':>5} {'yours':>8} {'measured (every rank)':>24}")
for name in ("tp", "dp", "pp"):
    on_ranks = sorted({m[name] for m in measured})
    yours = f"{predicted[name]:.0f}" if name in predicted else "-"
    print(f"{name:>5} {yours:>8} {str(on_ranks):>24}")
print("✓ your prediction is what every rank moved, group by group")
show_bytes([(name, {"yours": predicted[name], "measured": measured[0][name]}) for name in ("tp", "dp")],
           "One step of the 8-rank run, bytes per rank by group")
reveal("group_bytes")

# %% tests="group_bytes_tests" points=2
# Hidden tests (2 points): random model sizes, layouts, batches, micro-batches and value sizes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_bytes)
### END HIDDEN TESTS

# %% [markdown] why="group_bytes"
# **Why.** The TP bytes are $g$'s all-reduce forward and $f$'s backward, once per block and
# micro-batch, each of one micro-batch's activations, `hidden` wide (not ff/TP: $g$ sums the
# partial outputs, $f$ the gradients of the LayerNorm's output): over the step, twice the
# replica's activations per block of the stage, however many micro-batches cut them. The DP
# bytes are the tensors a rank gives its DP all-reduces in one step: the rank's own
# parameters, as `TPBlock` built them, each once; nothing of a stage it does not hold.
#
# Notebook 02's analyzer makes the same kind of prediction for a GPT-like layer, with its own
# assumptions: $\Psi = 12 L h^2$ parameters (attention's $4h^2$ and an MLP of $8h^2$; no
# biases or norms), 4 TP all-reduces per layer per micro-batch (attention's and the MLP's,
# forward and backward), and over a stage boundary $2m$ messages of one micro-batch's
# activations: a first or a last stage's count (a middle stage, with a boundary on each side,
# moves $4m$, as in the worked example above). Its bytes alone, as a function:
#
# ```python
# def analyzer_02(dims, shape, rows, micro_batches, nbytes=2):
#     """Notebook 02's iteration_costs, its bytes only: {"tp", "dp", "pp"}, message bytes per
#     GPU (pp: a first or last stage)."""
#     pp, dp, tp = shape
#     L, h, s = dims["blocks"], dims["hidden"], dims["seq"]
#     b = rows // (dp * micro_batches)
#     activation = b * s * h * nbytes
#     return {"tp": 4 * (L // pp) * micro_batches * activation if tp > 1 else 0,
#             "dp": 12 * L * h**2 / (tp * pp) * nbytes if dp > 1 else 0,
#             "pp": 2 * micro_batches * activation if pp > 1 else 0}
# ```
#
# On the check's run (4 blocks, hidden 8, ff 16, 3 positions, 8 rows, 2 micro-batches, grid
# (2, 2, 2)), with this run's 8-byte values instead of its 16-bit default, it says, against
# what every rank moved:
#
# | group | notebook 02's analyzer | measured |
# | --- | --- | --- |
# | TP | 6144 B | 3072 B |
# | DP | 6144 B | 2560 B |
# | PP | 1536 B | 1536 B |
#
# Where it is off, group by group:
#
# * **TP**: it counts 4 all-reduces per layer (attention and MLP); these blocks have the MLP
#   only, 2: twice the run's bytes.
# * **DP**: $12 h^2$ values a layer count attention's weights, which these blocks do not have,
#   and an MLP with $ff = 4h$ (here $ff = 2h$): 768 values a block where these have 296, and
#   it divides them all by TP, where the LayerNorm and fc2's bias stay whole on every TP rank.
#   The biases and norms it leaves out are small for a real model ($h$ in the thousands), and
#   a large share here (40 of 296).
# * **PP**: two stages, so every stage is an end: $2m$ messages of one micro-batch's
#   activations, as the run moved.
#
# A model is right when it counts what the code does: the analyzer was written for ranking
# layouts of large models, where its approximations are small.

# %% [markdown]
# ## 5. Memory, and choosing a layout
#
# A model of $\Psi$ parameters on a grid of shape (PP, DP, TP), trained with Adam in mixed
# precision as in notebook 06, optionally with ZeRO-1 (ZeRO's $P_{os}$) over DP. Write the
# bytes of model states a GPU holds (activations left out), assuming the sizes divide evenly.

# %% solution="layout_memory"
def layout_memory(psi, dp, tp, pp, zero1=False):
    """Bytes of model states per GPU on a grid (pp, dp, tp); zero1: ZeRO-1 over DP."""
    return (4 + 12 / (dp if zero1 else 1)) * psi / (tp * pp)  # BLANK bytes per GPU # ACCEPT `(4 * psi + 12 * psi / (dp if zero1 else 1)) / (tp * pp)` # REJECT `(4 + 12 / dp) * psi / (tp * pp)` `16 * psi / (tp * pp)` `(4 + 12 / (dp if zero1 else 1)) * psi / (dp * tp * pp)` `(4 + 8 / (dp if zero1 else 1)) * psi / (tp * pp)`


# %% [markdown]
# The check compares your bytes on six layouts with fingerprints of the right ones (a hash:
# it tells right from wrong and nothing more; the hidden tests try many more layouts).

# %%
require_filled(layout_memory)
FINGERPRINTS = {(96_000, 4, 2, 3, False): "b412afcc0096", (96_000, 4, 2, 3, True): "d1e53b2d65f6",
                (7.5e9, 64, 1, 1, False): "8786d5ea946c", (7.5e9, 64, 1, 1, True): "00c02cf925df",
                (1e12, 6, 8, 64, False): "9ba9d602b00d", (1e12, 6, 8, 64, True): "cea41cd9c201"}
for (psi, dp, tp, pp, zero1), fingerprint in FINGERPRINTS.items():
    mine = layout_memory(psi, dp, tp, pp, zero1)
    print(f"{psi:g} parameters, dp={dp} tp={tp} pp={pp}, zero1={zero1}: yours "
          f"{mine / 1e9:.4g} GB per GPU")
    assert hashlib.sha256(str(round(mine)).encode()).hexdigest()[:12] == fingerprint, \
        f"{psi:g} parameters, dp={dp} tp={tp} pp={pp}, zero1={zero1}: not the bytes a GPU holds"
print("✓ your bytes are right on all six layouts")
reveal("layout_memory")

# %% tests="layout_memory_tests" points=1
# Hidden tests (1 point): random sizes and layouts, with and without ZeRO-1.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(layout_memory)
### END HIDDEN TESTS

# %% [markdown] why="layout_memory"
# **Why.** A GPU keeps, for each parameter of its share $\Psi/(\mathrm{TP}\cdot\mathrm{PP})$,
# the fp16 weight and its fp16 gradient (2 + 2 bytes) and Adam's fp32 state: a master copy of
# the weight, the momentum and the variance (4 + 4 + 4 = 12 bytes, ZeRO's $K$). DP copies the
# share on every replica; ZeRO-1 splits the 12 bytes among the replicas and keeps the rest
# whole: $(4 + 12/\mathrm{DP})$ bytes a parameter of the share. Mixed precision keeps more
# bytes of optimizer state than of the weights the GPU computes with, which is why ZeRO-1
# saves so much: it splits the larger part only. The ZeRO paper's Figure 1: 7.5B parameters
# on DP 64 take 120 GB a GPU, 31.4 GB with $P_{os}$. Megatron-LM's
# distributed optimizer keeps fp32 gradients as well, so it needs a little more.

# %% [markdown]
# Now a layout for the largest run of Narayanan et al.: a GPT of about 1 trillion parameters
# (1008 billion) in 128 transformer layers on 3072 A100 GPUs (their Table 1), of 80 GB, 8 a
# server (their §5's cluster).
# `candidates` lists every layout with TP within a server and whole layers on each stage, each
# with its model states per GPU; a layout fits when they stay within `limit`, here three
# quarters of the 80 GB, the rest left to the activations.
#
# What Narayanan et al. measured (§5.4; throughput per GPU on 64 A100 GPUs, 8 a server, one
# bar per layout at each of several global batch sizes). The table gives the order the paper
# reads from them, fastest first:
#
# | figure | model | layouts measured (TP, PP, DP) | fastest first |
# | --- | --- | --- | --- |
# | 13 | 162B GPT | (2, 32, 1), (4, 16, 1), (8, 8, 1), (16, 4, 1), (32, 2, 1) | (8, 8, 1); the other four slower |
# | 14 | 5.9B GPT | (1, 2, 32), (1, 4, 16), (1, 8, 8) | (1, 2, 32), (1, 4, 16), (1, 8, 8) |
# | 15 | 5.9B GPT | (2, 1, 32), (4, 1, 16), (8, 1, 8) | (2, 1, 32), (4, 1, 16), (8, 1, 8) |
#
# Write `choose_layout`: of the layouts that fit, the one these measurements say is the
# fastest; `rows` comes in any order.

# %%
def candidates(psi, gpus, gpus_per_node, layers, zero1=False):
    """((dp, tp, pp), model-state bytes per GPU) of every layout with TP within a server and
    a whole number of layers per stage."""
    rows = []
    for tp in (t for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0):
        for pp in (p for p in range(1, gpus // tp + 1) if gpus % (tp * p) == 0):
            if layers % pp == 0:
                dp = gpus // (tp * pp)
                rows.append(((dp, tp, pp), layout_memory(psi, dp, tp, pp, zero1)))
    return rows


# %% solution="choose_layout"
def choose_layout(rows, limit):
    """The layout (dp, tp, pp) to train with, of rows ((dp, tp, pp), bytes per GPU) of one
    model on one set of GPUs; None if no layout stays within limit bytes."""
    fitting = [layout for layout, nbytes in rows if nbytes <= limit]
    return min(fitting, key=lambda layout: (layout[1] * layout[2], layout[2])) if fitting else None  # BLANK `lambda layout: (layout[1] * layout[2], layout[2])` which of the layouts that fit # ACCEPT `lambda layout: (-layout[0], layout[2])` `lambda layout: (layout[1] * layout[2], -layout[1])` `lambda row: (row[1] * row[2], row[2])` # REJECT `lambda layout: (layout[2], -layout[1])` `lambda layout: (layout[1] * layout[2], layout[1])` `lambda layout: layout[1] * layout[2]` `lambda layout: (layout[2], layout[1])`


# %%
require_filled(choose_layout)
LIMIT = 0.75 * 80e9
picks = {zero1: choose_layout(candidates(1e12, 3072, 8, 128, zero1), LIMIT)
         for zero1 in (False, True)}
for zero1, layout in picks.items():
    assert layout is not None and dict(candidates(1e12, 3072, 8, 128, zero1))[layout] <= LIMIT, \
        f"zero1={zero1}: {layout} is not a layout that fits"
assert choose_layout(candidates(1e9, 64, 8, 24), LIMIT) == (64, 1, 1), "a model that fits one GPU"
assert choose_layout(candidates(1e9, 24, 8, 3), 6e9) == (8, 1, 3), \
    "1B parameters in 3 layers, 24 GPUs of 8 a server, 6 GB a GPU: not the fastest layout that fits"
assert picks[False] == (6, 8, 64), "without ZeRO-1: not the layout of the paper's Table 1"
print("✓ choose_layout picks layouts that fit, the fastest on two small clusters, and the "
      "paper's without ZeRO-1 (the hidden tests judge many more clusters)")
for zero1, (dp, tp, pp) in picks.items():
    rows = candidates(1e12, 3072, 8, 128, zero1)
    print(f"~1T parameters, 3072 GPUs, zero1={zero1}: yours dp={dp} tp={tp} pp={pp}, "
          f"{layout_memory(1e12, dp, tp, pp, zero1) / 1e9:.1f} GB of model states per GPU")
    show_layouts([(f"tp{t} pp{p}", nbytes, (d, t, p) == (dp, tp, pp)) for (d, t, p), nbytes
                  in rows if t in (1, tp)], LIMIT, f"zero1={zero1}: model states per GPU",
                 "model-state limit (3/4 of 80 GB)")
reveal("choose_layout")

# %% tests="choose_layout_tests" points=1
# Hidden tests (1 point): random sets of GPUs, servers, models and limits.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(choose_layout)
### END HIDDEN TESTS

# %% [markdown] why="choose_layout"
# **Why.** What each dimension costs a step, for a fixed batch on a fixed set of GPUs
# (Narayanan et al., §3), explains the order:
#
# * **DP**: one all-reduce of the gradients per step, after the pipeline's flush in PTD-P
#   (Megatron-LM later overlapped it with the backward pass, `--overlap-grad-reduce`); each
#   GPU of DP computes its rows' matmuls at their full size.
# * **TP**: all-reduces of activations in every layer, forward and backward (4 per transformer
#   layer and micro-batch, attention's and the MLP's; this notebook's MLP block makes 2, $g$'s
#   forward and $f$'s backward), on the fast links of a server; each GPU's matrix multiplications are 1/TP as large, and
#   small ones use a GPU less well. The paper measured this cost modest within a
#   server and steep once a TP group spans servers.
# * **PP**: a bubble (notebook 05): with $m$ micro-batches and $p$ stages, GPipe idles
#   $(p - 1)/m$ of the compute time, $(p - 1)/(m + p - 1)$ of the step; $m$ is bounded by the
#   replica's share of the batch, which shrinks as DP grows. Plus the sends between stages,
#   on slower links between servers.
#
# The measurements are Narayanan et al.'s two findings, and the key puts them in this order:
#
# 1. Of two layouts that fit, the one with less model parallelism (fewer GPUs to hold one copy
#    of the model, TP x PP) is faster, however each splits it between TP and PP: use only as
#    much model parallelism as the model needs to fit (their takeaway #2, §3.3; Figures 14,
#    15). $\mathrm{DP} = N/(\mathrm{TP}\cdot\mathrm{PP})$, so the least TP x PP is the most DP:
#    DP's one all-reduce a step costs less than TP's all-reduces in every layer and PP's
#    bubble and sends in every micro-batch.
# 2. Of two with as much model parallelism, TP within a server costs less than the bubble and
#    sends of more stages (takeaway #1, §3.2; Figure 13): the fewest stages.
#
# The first rule holds across every split of TP and PP only because every candidate keeps
# TP within a server; a TP group across servers would make its all-reduces slower than a
# pipeline's sends, and the order would change. The order matters: for 100 billion
# parameters in 24 layers on 96 GPUs with ZeRO-1, rule 1 picks TP 4 x PP 3 x DP 8 (12 GPUs a
# copy) over TP 8 x PP 2 x DP 6 (16), which takeaway #1 read alone (TP up to a server first,
# then PP) would pick. Figures 14 and 15 (more model parallelism, of either kind, slower)
# decide it for the chooser; on a real cluster, a measurement of the two layouts would.
#
# Without ZeRO-1 your chooser lands on the paper's layout, TP 8 x PP 64 x DP 6: the 128
# layers allow pipelines of 32 or 64 stages at TP 8, and 32 exceed three quarters of 80 GB.
# Megatron-LM had no distributed optimizer then (it came later), so the ZeRO-1 layouts were
# not on offer. The real choice also weighs the bubble (more micro-batches), the activations
# (they grow with the micro-batch and shrink with TP), and the time each group's messages take
# on its links: notebook 02's analyzer.

# %% [markdown]
# ## Wrap-up
#
# Questions to answer for yourself:
#
# * Why is TP the fastest-changing dimension of the grid, and what would change on a cluster
#   if it were DP?
# * For any tensor of the model: which ranks hold a copy of it, and which hold a different
#   part? Every group of this notebook was the answer to that question for one kind of tensor.
# * What tells you, from a count of collectives alone, that a ZeRO-3 run keeps its budget?
# * Notebook 02's analyzer and your `group_bytes` disagree: which one would you trust for a
#   model with $h$ = 12288, and why?
#
# **Next.** The drills re-mask random pieces of every notebook's code.
