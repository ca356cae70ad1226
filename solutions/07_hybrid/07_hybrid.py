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
# 1. The grid: a rank's (pp, dp, tp) coordinates, and which ranks form each TP, DP and PP
#    group, checked against PyTorch's `init_device_mesh`.
# 2. 2-D on 4 real ranks (DP 2 x TP 2): a small transformer MLP block split over its TP
#    group, its gradients averaged over its DP group, equal to training on one process. Then
#    the same with PyTorch's own `parallelize_module` and `fully_shard`.
# 3. 3-D on 8 ranks (PP 2 x DP 2 x TP 2): the blocks as pipeline stages.
# 4. Bytes: each group's traffic predicted, then measured on the run.
# 5. Choosing a layout for a trillion-parameter model.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your code works. The cell after that holds the
# hidden tests that grade your work (press **Validate** in the toolbar to run them all). Run the
# cells top to bottom; every other cell is locked.

# %%
import contextlib
import copy
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from distlab import require_filled, run
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
# From coordinates to a rank is `rank = (p * DP + d) * TP + t`. Write the way back: a rank's
# coordinates, for any shape.

# %% solution="mesh_coords" drill
def mesh_coords(rank, shape):
    """(p, d, t): rank's coordinates in a grid of shape (pp, dp, tp), tp changing fastest."""
    pp, dp, tp = shape
    return rank // (dp * tp), rank // tp % dp, rank % tp  # BLANK three coordinates # ACCEPT `(rank // tp // dp, rank // tp % dp, rank % tp)` # REJECT `(rank // (dp * tp), rank % dp, rank % tp)` `(rank % pp, rank // tp % dp, rank // (pp * dp))`


# %%
for shape in ((2, 2, 2), (1, 2, 2), (3, 2, 4)):
    table = torch.arange(math.prod(shape)).reshape(shape)
    for rank in range(math.prod(shape)):
        coords = mesh_coords(rank, shape)
        assert table[coords] == rank, f"shape {shape}: rank {rank} is not at {coords}"
print("rank 5 of (2, 2, 2):", mesh_coords(5, (2, 2, 2)), "  rank 13 of (3, 2, 4):",
      mesh_coords(13, (3, 2, 4)))
print("✓ every rank sits where torch.arange(N).reshape(shape) puts it")

# %% tests="mesh_coords_tests" points=1
# Hidden tests (1 point): every rank of random shapes, 1 to 6 along each dimension.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(mesh_coords)
### END HIDDEN TESTS

# %% [markdown]
# Each rank belongs to three groups, one per dimension of the grid. In the picture above, rank
# 5's TP group is {4, 5}, its DP group {5, 7}, its PP group (its pipeline) {1, 5}; rank 2's
# are {2, 3}, {0, 2} and {2, 6}. `group_ranks(shape, dim)` lists every group of one dimension
# (`dim` 0 for PP, 1 for DP, 2 for TP), each as its ranks in increasing order: it files each
# rank under a key, and the ranks filed under one key form one group.

# %% solution="group_ranks"
def group_ranks(shape, dim):
    """Every group along dimension dim (0 pp, 1 dp, 2 tp) of a grid of shape (pp, dp, tp): a
    list of lists of ranks, each list in increasing order."""
    groups = {}
    for rank in range(math.prod(shape)):
        coords = mesh_coords(rank, shape)
        key = coords[:dim] + coords[dim + 1:]  # BLANK what every member of one group has in common # ACCEPT `tuple(c for i, c in enumerate(coords) if i != dim)` # REJECT `coords[dim]` `coords[:dim]` `coords[dim + 1:]`
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


# %%
assert group_ranks((2, 2, 2), 2) == [[0, 1], [2, 3], [4, 5], [6, 7]], "the TP groups of (2, 2, 2)"
assert group_ranks((2, 2, 2), 1) == [[0, 2], [1, 3], [4, 6], [5, 7]], "the DP groups of (2, 2, 2)"
assert group_ranks((2, 2, 2), 0) == [[0, 4], [1, 5], [2, 6], [3, 7]], "the PP groups of (2, 2, 2)"
print("DP groups of (1, 4, 2):", group_ranks((1, 4, 2), 1))
print("✓ every group of (2, 2, 2) is right")
show_grid((2, 2, 2), group_ranks, mesh_coords)

# %% tests="group_ranks_tests" points=1
# Hidden tests (1 point): every dimension of random shapes; each rank in exactly one group.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_ranks)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** A group of dimension `dim` is the set of ranks whose coordinates agree everywhere
# **but** at `dim`: they differ in that one kind of parallelism only. With TP the fastest
# dimension, TP groups are consecutive ranks, DP groups are TP apart and pipelines DP x TP
# apart. That order is chosen: consecutive ranks sit on one server (ranks 0-7 on the first
# 8-GPU node, ...). A TP group all-reduces activations in every layer, forward and backward:
# the heaviest and most latency-bound traffic, so its ranks must be neighbours on the fast
# links. DP all-reduces the gradients once per step; PP sends one activation per micro-batch
# to one neighbour: both can cross servers.
#
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
# ## 2. Two dimensions: TP inside, DP across
#
# The model: two pre-norm MLP blocks, the half of a transformer block that holds two thirds of
# its weights (attention splits the same way, by heads: notebook 04). A block computes
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
# ranks. Each TP rank of a group of $n$ holds $1/n$ of the ff features: `fc1` is
# **column-parallel** (a rank computes its own ff features of $h = \mathrm{gelu}(W_1 \ldots)$,
# no communication), `fc2` **row-parallel** (a rank multiplies its own features of $h$, and
# its partial result must be summed over the group). $f$ starts the parallel region (identity
# forward, all-reduce of the gradient backward), $g$ ends it (all-reduce forward, identity
# backward). The LayerNorm and $b_2$ are **replicated**: every TP rank holds them whole.
#
# `nn.Linear(in, out).weight` has shape (out, in), and `F.linear(x, w, b)` is
# `x @ w.T + b`. In the cell below, `part` is the slice of the ff features that TP rank `t`
# of `n` owns.

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
    """A Block split over the TP group `group`: this rank's part of fc1 and fc2, the
    LayerNorm and fc2's bias whole."""

    def __init__(self, block, group):
        super().__init__()
        t, n = dist.get_rank(group), dist.get_world_size(group)
        ff = block.fc1.out_features
        part = slice(t * ff // n, (t + 1) * ff // n)  # the ff features TP rank t owns
        self.f, self.g = tp_f_g(group)
        self.norm = copy.deepcopy(block.norm)  # replicated
        w1, b1, w2 = block.fc1.weight[part], block.fc1.bias[part], block.fc2.weight[:, part]  # BLANK this rank's parts of fc1's weight and bias, and of fc2's weight # ACCEPT `block.fc1.weight[part, :], block.fc1.bias[part], block.fc2.weight.T[part].T` # REJECT `block.fc1.weight[:, part], block.fc1.bias[part], block.fc2.weight[part]` `block.fc1.weight, block.fc1.bias, block.fc2.weight` `block.fc1.weight[part], block.fc1.bias[part], block.fc2.weight[part]`
        self.w1, self.b1, self.w2 = (nn.Parameter(p.detach().clone()) for p in (w1, b1, w2))
        self.b2 = nn.Parameter(block.fc2.bias.detach().clone())  # replicated

    def forward(self, x):
        h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1))  # (batch, seq, ff/n)
        return x + self.g.apply(F.linear(h, self.w2)) + self.b2  # BLANK the block's output # ACCEPT `x + self.b2 + self.g.apply(F.linear(h, self.w2))` # REJECT `x + self.g.apply(F.linear(h, self.w2, self.b2))` `x + F.linear(h, self.w2) + self.b2` `self.g.apply(F.linear(h, self.w2)) + self.b2`


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
        assert any(is_part(grad, q.grad) for q in source), f"rank {rank}: {name}'s gradient"
    print(f"rank {rank} holds {held} of the block's {sum(p.numel() for p in plain.parameters())}"
          " values")
print("✓ on each TP rank: the block's output and input gradient, and its parts' gradients")

# %% tests="TPBlock_tests" points=2
# Hidden tests (2 points): 1, 2 and 4 ranks, TP groups of 1, 2 and 4 inside them, random
# widths; values against the plain block, the collectives, and each rank's share of the work.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(TPBlock)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** $W_1$'s rows are its output features, so a column-parallel `fc1` keeps rows `part`
# of $W_1$ and of $b_1$; $W_2$'s columns are its input features, so the row-parallel `fc2`
# keeps columns `part`. $g$'s all-reduce sums the partial products of the TP ranks: a bias
# added before it would be summed $n$ times, so the replicated $b_2$ is added once, after $g$,
# on every rank alike.
#
# **DP across.** A TP group is one replica of the model; DP replicas train on different parts
# of the batch. `train_2d` gets the whole batch on every rank and this rank's three groups;
# after every step each rank's parameters must be its part of what plain SGD on one process,
# on the whole batch, gives (the mean loss over the batch), and each rank may compute only its
# share of the work. `dist.get_rank(group)` is a rank's index in `group`,
# `dist.get_world_size(group)` its size.

# %% solution="train_2d" drill
def train_2d(model, x, y, groups, steps=3, lr=0.1):
    """SGD on a model of TPBlocks, tensor-parallel in its TP group and data-parallel across
    replicas; groups: this rank's process groups by name ("pp", "dp", "tp"); x, y the whole
    batch (the same on every rank). Returns the model."""
    d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"])  # BLANK which replica is this rank's, of how many? # ACCEPT `(groups["dp"].rank(), groups["dp"].size())` # REJECT `(dist.get_rank(), dist.get_world_size())` `(dist.get_rank(groups["tp"]), dist.get_world_size(groups["tp"]))` `(dist.get_rank(groups["pp"]), dist.get_world_size(groups["pp"]))`
    x, y = x.chunk(n_d)[d], y.chunk(n_d)[d]  # this replica's rows
    for _ in range(steps):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=groups["dp"])  # BLANK `dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=groups["dp"])` make this gradient the whole batch's # ACCEPT `dist.all_reduce(p.grad, group=groups["dp"]); p.grad /= n_d` # REJECT `dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)` `dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=groups["tp"])` `dist.all_reduce(p.grad, group=groups["dp"])`
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return model


# %% [markdown]
# The check trains 3 steps on 4 ranks (DP 2 x TP 2), then compares what every rank's model
# computes on a new input with what the same 3 steps of plain SGD on one process compute.

# %%
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


def run_2d(rank, world_size, shape):
    groups = build_groups(shape)
    model = nn.Sequential(*[TPBlock(b, groups["tp"]) for b in make_model()])
    train_2d(model, *make_batch(), groups)
    with torch.no_grad():
        return model(make_batch(seed=7)[0])


require_filled(train_2d)
expected = single_process()
with torch.no_grad():
    want = expected(make_batch(seed=7)[0])
for rank, out in enumerate(run(run_2d, (1, 2, 2), world_size=4)):
    assert torch.allclose(out, want, atol=1e-12), f"rank {rank}: its trained model differs"
print("✓ DP 2 x TP 2: every rank's trained model computes what 3 steps on one process give")

# %% tests="train_2d_tests" points=2
# Hidden tests (2 points): layouts of 1 to 4 ranks, some inside a grid with 2 pipeline stages,
# random batches; parameters after training against single-process SGD, and the collectives.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(train_2d)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** The TP ranks of one replica compute *one* model together, so they must see the same
# rows: the part of the batch is picked by the rank's index in its DP group, not by its global
# rank (with more than one pipeline, rank // TP counts the replicas of every stage). A
# parameter's copies live on the ranks of a DP group: TP rank $t$ of every replica holds the
# same part of $W_1$. Averaging over all ranks would mix the parts of different TP ranks. The
# replicated LayerNorm and $b_2$ need no TP all-reduce: $f$'s backward already made their
# gradients equal within a TP group.

# %% [markdown]
# ### The same with PyTorch's API
#
# torchtitan composes the two with PyTorch's own tools: DTensor's tensor parallelism along
# `mesh["tp"]` and FSDP2 (ZeRO-3, notebook 06) along `mesh["dp"]`. The budget of ZeRO-3: a
# block's weights are whole (gathered over DP) only while it computes. Per step and per block:
# one all-gather before its forward, its weights **freed** after its forward, one all-gather
# before its backward, one reduce-scatter of its gradients; at most one block whole at a time.
#
# The API, on other modules than the blanks':
#
# * `parallelize_module(module, tp_mesh, plan)` splits `module` (or, with a dict
#   `{"name": style}`, its named submodules) over the TP sub-mesh, and inserts the collectives;
#   weights become `DTensor`s. A plan for one projection of attention:
#   `parallelize_module(attention, mesh["tp"], {"q_proj": ColwiseParallel()})`.
#   `ColwiseParallel()` shards an `nn.Linear`'s weight by its output features: the input
#   whole, the output split along its last dimension. `RowwiseParallel()` shards it by its
#   input features: the input split along its last dimension, the partial outputs summed.
# * `fully_shard(module, mesh=dp_mesh)` makes `module` one FSDP unit: its parameters that no
#   unit below it holds are sharded over `dp_mesh`, gathered for its forward and backward.
#   A unit is resharded (its gathered weights freed) after its forward, except a **root**
#   unit, one that no other unit holds: the root keeps its weights from its forward to its
#   backward, which follows at once.
#
# The check trains 3 steps on 4 ranks (DP 2 x TP 2), compares what each rank's model computes
# with one process's, and counts the collectives of the first step with `CommDebugMode`.

# %% solution="shard_2d"
def shard_2d(model, mesh):
    """model (a Sequential of Blocks) tensor-parallel over mesh["tp"], ZeRO-3 over
    mesh["dp"] with one unit per block, within ZeRO-3's budget. Returns the model."""
    for block in model:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})  # BLANK `{"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}` how each of the block's linears is split # ACCEPT `{"fc2": RowwiseParallel(), "fc1": ColwiseParallel()}` `dict(fc1=ColwiseParallel(), fc2=RowwiseParallel())` # REJECT `{"fc1": RowwiseParallel(), "fc2": ColwiseParallel()}` `{"fc1": ColwiseParallel(), "fc2": ColwiseParallel()}` `{"fc1": ColwiseParallel()}`
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])  # BLANK `fully_shard(model, mesh=mesh["dp"])` within the budget # SHAPE `the call is the line above's; the idea is that the whole model needs a unit of its own, for its blocks not to be roots, and nothing before the check says so` # ACCEPT `fully_shard(model)` `fully_shard(model, mesh=mesh["tp"])` `model = fully_shard(model, mesh=mesh["dp"])` # REJECT `pass` `fully_shard(model[0], mesh=mesh["dp"])` `model.reshard()`
    return model


# %%
def run_2d_pytorch(rank, world_size, steps=3, lr=0.1):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = shard_2d(make_model(), mesh)
    d = mesh["dp"].get_local_rank()
    x, y = (t.chunk(2)[d] for t in make_batch())
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


require_filled(shard_2d)
results = run(run_2d_pytorch, world_size=4)
trained = single_process()
with torch.no_grad():
    want = trained(make_batch(seed=7)[0])
for rank, (out, _) in enumerate(results):
    assert torch.allclose(out, want, atol=1e-12), f"rank {rank}: its trained model differs"
calls = results[0][1]
print("rank 0's collectives in the first step:", calls)
gathers = sum(n for name, n in calls.items() if "allgather" in name)
assert gathers == 4, (f"{gathers} all-gathers for 2 blocks: ZeRO-3's budget gathers each "
                      "block for its forward and again for its backward")
print("✓ parallelize_module + fully_shard train like one process, within ZeRO-3's budget")

# %% tests="shard_2d_tests" points=2
# Hidden tests (2 points): 4 ranks, DP 2 x TP 2, 2 or 3 blocks of random widths; how each
# weight is placed on the mesh, the parameters after training against one process, and the
# collectives of a step.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(shard_2d)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** A `ColwiseParallel` `fc1` is your column split: its weight's rows, and an output
# split by ff features, which is what a `RowwiseParallel` `fc2` takes in; DTensor's two
# all-reduces (`RowwiseParallel`'s sum forward, `ColwiseParallel`'s input gradient backward)
# are your $g$ and $f$, one of each per block. Without the last `fully_shard`, each block is
# a unit that no other unit holds: a root, so FSDP2 keeps its weights gathered from its
# forward until its backward. Every block then stays whole through the forward, and the step
# makes one all-gather per block: 2, not 4, and the memory of ZeRO-3 is gone. Sharding the
# whole model as one more unit (torchtitan does it; notebook 06 does it) makes it the root
# and the blocks ordinary units, resharded after their forward; it holds no parameters of its
# own here, so it gathers nothing. FSDP reduce-scatters the gradients over DP where your
# `train_2d` all-reduced them (ZeRO-3 against DDP: notebook 06).
#
# ## 3. Three dimensions: pipeline stages over PP
#
# Now 8 ranks, shape (2, 2, 2): stage $p$ holds block $p$ (split over its TP group, copied
# over its DP group). Each replica's rows are cut into micro-batches and run as in GPipe
# (notebook 05): every micro-batch's forward, stage after stage, each stage sending its output
# to the next; then every micro-batch's backward, in the other direction; the DP average once,
# after the last micro-batch. At the end of each step every rank must hold its part of what
# plain SGD on one process gives, having computed only its share.
#
# The API: `dist.get_process_group_ranks(group)` lists a group's global ranks in the group's
# order; `dist.send(tensor, dst)` and `dist.recv(tensor, src)` take global ranks;
# `out.backward(grad)` runs the backward of `out` from the gradient `grad` of the loss with
# respect to `out`.

# %% solution="train_3d"
def train_3d(stage, x, y, groups, steps=2, lr=0.1, micro_batches=2):
    """SGD with GPipe along the pipeline (stage: this rank's part of the model), TP inside
    each stage, DP across replicas; groups: this rank's groups by name; x, y the whole batch
    (the same on every rank). Returns stage."""
    pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank())  # BLANK `pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank())` the global ranks of this rank's pipeline, stage by stage; this rank's stage # ACCEPT `pipeline = dist.get_process_group_ranks(groups["pp"]); p = dist.get_rank(groups["pp"])` # REJECT `pipeline = dist.get_process_group_ranks(groups["dp"]); p = pipeline.index(dist.get_rank())` `pipeline = dist.get_process_group_ranks(groups["tp"]); p = pipeline.index(dist.get_rank())` `pipeline = list(range(dist.get_world_size())); p = dist.get_rank()`
    last = len(pipeline) - 1
    d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"])  # BLANK which replica is this rank's, of how many? # ACCEPT `(groups["dp"].rank(), groups["dp"].size())` # REJECT `(dist.get_rank(), dist.get_world_size())` `(dist.get_rank(groups["tp"]), dist.get_world_size(groups["tp"]))` `(dist.get_rank(groups["pp"]), dist.get_world_size(groups["pp"]))`
    xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)
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
                dist.send(inputs[m].grad, pipeline[p - 1])  # BLANK what the previous stage needs # ACCEPT `dist.send(inputs[m].grad.contiguous(), pipeline[p - 1])` # REJECT `dist.send(outputs[m].grad, pipeline[p - 1])` `dist.send(inputs[m], pipeline[p - 1])` `dist.send(grad, pipeline[p - 1])`
        for param in stage.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, group=groups["dp"])  # BLANK `dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, group=groups["dp"])` make this gradient the whole batch's # ACCEPT `dist.all_reduce(param.grad, group=groups["dp"]); param.grad /= n_d` # REJECT `dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)` `dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, group=groups["pp"])` `dist.all_reduce(param.grad, group=groups["dp"])`
        with torch.no_grad():
            for param in stage.parameters():
                param -= lr * param.grad
    return stage


# %%
def run_3d(rank, world_size, shape, count=False):
    groups = build_groups(shape)
    p = mesh_coords(rank, shape)[0]
    blocks = make_model(shape[0])  # one block per stage
    stage = nn.Sequential(TPBlock(blocks[p], groups["tp"]))
    names = {name: dist.get_process_group_ranks(group) for name, group in groups.items()}
    if not count:
        train_3d(stage, *make_batch(), groups)
        return [t.detach() for t in stage.parameters()]
    with count_by_group(names) as calls:
        train_3d(stage, *make_batch(), groups, steps=1)
    return {name: calls.bytes_by(name) for name in names}


require_filled(train_3d)
expected = single_process(steps=2)
for rank, params in enumerate(run(run_3d, (2, 2, 2), world_size=8)):
    p = mesh_coords(rank, (2, 2, 2))[0]
    block = [q.detach() for q in expected[p].parameters()]
    for got in params:
        assert any(is_part(got, q) for q in block), f"rank {rank} (stage {p}): a parameter"
print("✓ PP 2 x DP 2 x TP 2 on 8 ranks: every rank's parts equal single-process training")

# %% tests="train_3d_tests" points=4
# Hidden tests (4 points): layouts PP x DP x TP of 2 to 8 ranks, random batches; parameters
# against single-process SGD, and who sends what to whom.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(train_3d)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** A stage's neighbours are the previous and next entries of its pipeline, its PP
# group: in the (2, 2, 2) grid DP x TP = 4 ranks apart, never rank ± 1. Backward runs the
# chain rule across the boundary: the previous stage needs the gradient of the loss with
# respect to what it sent, which is this stage's input, `inputs[m].grad`. The replica index
# and the DP average are those of `train_2d`, now in a grid where a rank's global number
# counts the replicas of both stages.
#
# ## 4. Bytes: predicted, then measured
#
# Per step, the messages of one rank (the bytes of each all-reduce's tensor, of each send's and
# each recv's), by group, for the code of section 3 (a stage's blocks are `TPBlock`s):
#
# * **TP**: per block of the stage and per micro-batch, $g$'s all-reduce forward and $f$'s
#   backward, each of one micro-batch's activations (rows x seq x hidden values). Summed over
#   the micro-batches: 2 x (blocks of the stage) x (the replica's rows x seq x hidden).
# * **PP**: per micro-batch, one activation forward and one gradient back over each boundary
#   the stage touches (one for the first and the last stage, two in between).
# * **DP**: what `train_3d`'s DP average carries.
#
# `dims` describes the model: `blocks` (all stages together), `hidden`, `ff`, `seq`;
# `rows` is the whole batch, `itemsize` bytes per value.

# %% solution="group_bytes"
def group_bytes(dims, shape, rows, micro_batches, itemsize=8):
    """Message bytes of one training step on the busiest rank, by group: {"pp", "dp", "tp"}."""
    pp, dp, tp = shape
    hidden, ff, seq = dims["hidden"], dims["ff"], dims["seq"]
    stage_blocks = dims["blocks"] // pp
    activations = rows // dp * seq * hidden * itemsize  # the replica's rows, all micro-batches
    return {
        "tp": 2 * stage_blocks * activations if tp > 1 else 0,
        "dp": stage_blocks * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize if dp > 1 else 0,  # BLANK `stage_blocks * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize` the DP average's bytes on this rank # ACCEPT `stage_blocks * ((2 * hidden * ff + ff) // tp + 3 * hidden) * itemsize` `stage_blocks * itemsize * (2 * hidden * ff / tp + ff / tp + 3 * hidden)` # REJECT `stage_blocks * (2 * hidden * ff + ff + 3 * hidden) / tp * itemsize` `stage_blocks * (2 * hidden * ff + ff + 3 * hidden) * itemsize` `stage_blocks * ((2 * hidden * ff + ff) / tp + 2 * hidden) * itemsize` `dims["blocks"] * ((2 * hidden * ff + ff) / tp + 3 * hidden) * itemsize`
        "pp": 2 * min(pp - 1, 2) * activations,
    }


# %% [markdown]
# The check: section 3's run again, counted (`count_by_group` records each all-reduce with its
# group's ranks, each send and recv with the pipeline of its two ranks), beside your prediction.

# %%
require_filled(group_bytes)
DIMS = {"blocks": 2, "hidden": HIDDEN, "ff": FF, "seq": SEQ}
predicted = group_bytes(DIMS, (2, 2, 2), 8, 2)
measured = run(run_3d, (2, 2, 2), True, world_size=8)
print(f"{'group':>5} {'yours':>8} {'measured (every rank)':>24}")
for name in ("tp", "dp", "pp"):
    on_ranks = sorted({m[name] for m in measured})
    print(f"{name:>5} {predicted[name]:>8.0f} {str(on_ranks):>24}")
    assert on_ranks == [predicted[name]], f"{name}: predicted {predicted[name]}, measured {on_ranks}"
print("✓ your prediction is what every rank moved, group by group")

# %% tests="group_bytes_tests" points=1
# Hidden tests (1 point): random model sizes, layouts, batches, micro-batches and value sizes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_bytes)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** The DP all-reduce carries every gradient the rank holds, once. $W_1$, $b_1$ and
# $W_2$ are cut over TP ($2 \cdot \mathrm{hidden} \cdot \mathrm{ff} + \mathrm{ff}$ values a
# block, divided by TP), but the LayerNorm's weight and bias and $b_2$ ($3 \cdot \mathrm{hidden}$)
# are whole on every TP rank, so they are not divided.
#
# Notebook 02's analyzer makes the same kind of prediction for a GPT-like layer, with its own
# assumptions: $\Psi = 12 L h^2$ parameters (attention and MLP weights; no biases or norms),
# 16-bit values, 4 TP all-reduces per layer per micro-batch (attention's and the MLP's, forward
# and backward), $2m$ messages over one stage boundary. Here it is beside yours and the run:

# %%
def analyzer_02(dims, shape, rows, micro_batches, nbytes=2):
    """Notebook 02's iteration_costs, its bytes only: (dp, tp, pp) message bytes per GPU."""
    pp, dp, tp = shape
    L, h, s = dims["blocks"], dims["hidden"], dims["seq"]
    b = rows // (dp * micro_batches)
    activation = b * s * h * nbytes
    return {"tp": 4 * (L // pp) * micro_batches * activation if tp > 1 else 0,
            "dp": 12 * L * h**2 / (tp * pp) * nbytes if dp > 1 else 0,
            "pp": 2 * micro_batches * activation if pp > 1 else 0}


analyzer = analyzer_02(DIMS, (2, 2, 2), 8, 2)
for name in ("tp", "dp", "pp"):
    print(f"{name}: 02 analyzer {analyzer[name]:.0f} B, yours {predicted[name]:.0f} B, "
          f"measured {measured[0][name]} B")
show_bytes([(name, {"02 analyzer": analyzer[name], "yours": predicted[name],
                    "measured": measured[0][name]}) for name in ("tp", "dp", "pp")],
           "One step of the 8-rank run, bytes per rank by group")

# %% [markdown]
# Why 02's analyzer is off, group by group:
#
# * **TP**: it counts 4 all-reduces per layer (attention and MLP); these blocks have the MLP
#   only, 2. And it sends 2-byte values where this run sends 8-byte float64: x 4 the other way.
# * **DP**: $12 L h^2$ counts weights only, of a layer with $ff = 4h$ (here $ff = 2h$), all
#   divided by TP. It leaves out the biases and the LayerNorm, and the replicated part of them
#   is *not* divided by TP; for a real model ($h$ in the thousands) that is a fraction of a
#   percent, here it is a large share.
# * **PP**: the same $2m$ messages per boundary, but it counts 2-byte values.
#
# A model is right when it counts what the code does: the analyzer was written for ranking
# layouts of large models, where its approximations are small.
#
# ## 5. Choosing a layout
#
# A model of $\Psi$ parameters trained with Adam in mixed precision (notebook 06): a GPU keeps,
# for each parameter of its share, the fp16 weight, its fp16 gradient, and Adam's fp32 state:
# a master copy of the weight, the momentum and the variance. TP and PP cut the model: a GPU's
# share is $\Psi/(\mathrm{TP}\cdot\mathrm{PP})$ of it; DP copies that share on every replica.
# With ZeRO-1 (Megatron-LM's distributed optimizer) the replicas of a DP group split Adam's
# state among them and keep the rest whole. Write the bytes of model states a GPU holds
# (activations left out).

# %% solution="layout_memory"
def layout_memory(psi, dp, tp, pp, zero1=False):
    """Bytes of model states per GPU: fp16 weights and gradients, Adam's fp32 states (sharded
    over DP when zero1)."""
    return (4 + 12 / (dp if zero1 else 1)) * psi / (tp * pp)  # BLANK bytes per GPU # ACCEPT `(4 * psi + 12 * psi / (dp if zero1 else 1)) / (tp * pp)` # REJECT `(4 + 12 / dp) * psi / (tp * pp)` `16 * psi / (tp * pp)` `(4 + 12 / (dp if zero1 else 1)) * psi / (dp * tp * pp)` `(4 + 8 / (dp if zero1 else 1)) * psi / (tp * pp)`


# %% [markdown]
# The check: the 7.5-billion-parameter model on 64 GPUs of data parallelism of the ZeRO paper
# (Rajbhandari et al., 2020, Figure 1), without and with ZeRO-1 (the paper's $P_{os}$).

# %%
require_filled(layout_memory)
for zero1, paper in ((False, 120e9), (True, 31.4e9)):
    mine = layout_memory(7.5e9, 64, 1, 1, zero1)
    print(f"7.5B parameters, DP 64, zero1={zero1}: yours {mine / 1e9:.1f} GB per GPU")
    assert abs(mine - paper) < 0.05e9, f"zero1={zero1}: not the ZeRO paper's figure"
print("✓ the ZeRO paper's figures, without and with ZeRO-1")

# %% tests="layout_memory_tests" points=1
# Hidden tests (1 point): random sizes and layouts, with and without ZeRO-1.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(layout_memory)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** 2 + 2 bytes of fp16 weight and gradient and 4 + 4 + 4 of fp32 master, momentum and
# variance: 16 bytes a parameter, divided by TP x PP; ZeRO-1 divides the 12 bytes of Adam's
# state by DP as well (ZeRO's $P_{os}$: $4\Psi + 12\Psi/N_d$).
#
# Now a layout for the largest run of Narayanan et al.: a GPT of 1 trillion parameters on 3072
# A100 GPUs of 80 GB, 8 GPUs per server (their Table 1). `candidates` lists every layout with
# TP within a server, each with its model states per GPU; a layout fits when they stay within
# `limit`, here three quarters of the 80 GB, the rest left to the activations.
#
# Among the layouts that fit, what each dimension costs (Narayanan et al., §3):
#
# * **DP**: one all-reduce of the gradients per step, overlapped with the backward pass; the
#   GPUs of DP each compute a full share of the matmuls, at full size.
# * **TP**: all-reduces of activations in every layer, forward and backward, on the fast
#   links of a server; each GPU's matrix multiplications are 1/TP as large, and small ones use
#   a GPU less well.
# * **PP**: a bubble of $(p - 1)/m$ of the step (notebook 05, $m$ micro-batches), and sends
#   between servers.
#
# Write which fitting layout `choose_layout` picks.

# %%
def candidates(psi, gpus, gpus_per_node, zero1=False):
    """((dp, tp, pp), model-state bytes per GPU) of every layout with TP within a server."""
    rows = []
    for tp in (t for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0):
        for pp in (p for p in range(1, gpus // tp + 1) if gpus % (tp * p) == 0):
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
for zero1 in (False, True):
    rows = candidates(1e12, 3072, 8, zero1)
    dp, tp, pp = choose_layout(rows, LIMIT)
    print(f"1T parameters, 3072 GPUs, zero1={zero1}: yours dp={dp} tp={tp} pp={pp}, "
          f"{layout_memory(1e12, dp, tp, pp, zero1) / 1e9:.1f} GB of model states per GPU")
    show_layouts([(f"tp{t} pp{p}", nbytes, (d, t, p) == (dp, tp, pp)) for (d, t, p), nbytes
                  in rows if t in (1, tp)], LIMIT, f"zero1={zero1}: model states per GPU",
                 "model-state limit (3/4 of 80 GB)")
small = choose_layout(candidates(1e9, 64, 8), LIMIT)
print("1B parameters, 64 GPUs: yours", small)
assert small == (64, 1, 1), "a model that fits one GPU"
print("✓ choose_layout")

# %% tests="choose_layout_tests" points=1
# Hidden tests (1 point): random sets of GPUs, servers, models and limits.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(choose_layout)
### END HIDDEN TESTS

# %% [markdown]
# **Why.** Narayanan et al.'s takeaways (§3.3, §3.4): use as little model parallelism
# (TP x PP) as makes the model fit, and give the rest of the GPUs to DP, which costs least;
# of the model-parallel layouts of one size, TP up to the GPUs of a server before PP (its
# all-reduces stay on the fast links, and every stage adds to the bubble).
#
# Without ZeRO-1, 16 bytes a parameter need TP x PP $\geq$ 16 x 10¹² / 60 x 10⁹ ≈ 267; the
# sizes that divide 3072 jump from 256 to 384, so the chooser picks TP 8 x PP 48 (41.7 GB a
# GPU); with ZeRO-1, TP 8 x PP 12 (45.6 GB). The paper ran TP 8 x PP 64 x DP 6. A stage holds
# whole transformer layers, and their model had 128 (Table 1): 48 stages do not divide them,
# and 32 stages would hold 62.5 GB of model states a GPU, more than the chooser's three
# quarters; so 64, at 31.3 GB, leaves the rest to activations. And Megatron-LM had no
# distributed optimizer then (it came later): ZeRO-1's 12 stages were not on offer. The real
# choice also weighs the bubble (more micro-batches), the activations (they grow with the
# micro-batch and shrink with TP), and the time each group's traffic takes on its links:
# notebook 02's analyzer.
#
# ## Wrap-up
#
# * A grid of shape (PP, DP, TP) with TP fastest: TP groups are neighbours (one server), DP
#   groups TP apart, pipelines DP x TP apart.
# * Every parallelism runs in its own group: $f$, $g$ in the TP group, the gradient average in
#   the DP group, sends and receives between neighbours of one pipeline. The wrong group gives
#   the wrong numbers, or hangs. A rank's place in a group is the group's, not its global rank.
# * Replicated parameters (norms, the row-parallel bias) are whole on every TP rank: averaged
#   over DP only, and counted whole in DP's bytes.
# * FSDP2 keeps a root unit's weights between forward and backward: shard the whole model too.
# * A prediction of the bytes is only as good as its count of what the code does.
#
# **Next.** The drills re-mask random pieces of every notebook's code.
