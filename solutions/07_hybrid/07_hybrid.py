# %% [markdown]
# # 07 · Hybrid parallelism: DP x TP x PP on one grid of ranks
#
# Notebooks 03-06 used one kind of parallelism at a time. Large runs use all of them at once:
# the GPUs form a **grid**, and each dimension of the grid is one kind of parallelism.
# Megatron-LM's "3-D parallelism" (Narayanan et al., 2021, "Efficient Large-Scale Language Model
# Training on GPU Clusters Using Megatron-LM") keeps **tensor parallelism** (TP) inside a
# server, where the links are fast, cuts the model into **pipeline** (PP) stages across
# servers, and **replicates** (DP) what is left over the rest. picotron builds the same grid
# for a small Llama; torchtitan builds it from a PyTorch `DeviceMesh`.
#
# **What you will build**
#
# 1. The grid: a rank's (pp, dp, tp) coordinates, and which ranks form each TP, DP and PP
#    group, checked against PyTorch's `init_device_mesh`.
# 2. 2-D on 4 real ranks (DP 2 x TP 2): a small transformer MLP block split column/row over
#    its TP group, its gradients averaged over its DP group, equal step by step to training on
#    one process. Then the same with PyTorch's own `parallelize_module` and `fully_shard`.
# 3. 3-D on 8 ranks (PP 2 x DP 2 x TP 2): the blocks as pipeline stages, activations sent
#    forward and their gradients back over the PP dimension.
# 4. Bytes: each group's traffic predicted, notebook 02's analyzer beside it, and both against
#    what the run really moved.
# 5. Choosing a layout for a large model under a memory limit.
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
# Going back from coordinates to a rank is `rank = (p * DP + d) * TP + t`. Each rank has three
# groups, one per dimension: the ranks that share its other two coordinates. In the picture,
# rank 5's TP group is {4, 5}, its DP group {5, 7}, its PP group (its pipeline) {1, 5}.
#
# **Why TP is the last (fastest-changing) dimension.** Consecutive ranks sit on one server
# (ranks 0-7 on the first 8-GPU node, ...). A TP group all-reduces activations in every layer,
# forward and backward: it is the heaviest and most latency-bound traffic, so its ranks must be
# neighbours on the fast links. DP all-reduces the gradients once per step; PP sends one
# activation per micro-batch to one neighbour: both can cross servers.
#
# Write the coordinates of a rank.

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
# A group of dimension `dim` (0 for PP, 1 for DP, 2 for TP) is the set of ranks whose
# coordinates agree everywhere **but** at `dim`. `group_ranks` lists every group of one
# dimension, each as its ranks in increasing order. (Python tuples slice and add like lists:
# `(1, 2, 3)[:1] + (1, 2, 3)[2:]` is `(1, 3)`.)

# %% solution="group_ranks"
def group_ranks(shape, dim):
    """Every group along dimension dim (0 pp, 1 dp, 2 tp) of a grid of shape (pp, dp, tp): a
    list of lists of ranks, each list in increasing order."""
    groups = {}
    for rank in range(math.prod(shape)):
        coords = mesh_coords(rank, shape)
        key = coords[:dim] + coords[dim + 1:]  # BLANK what every member of the group shares # ACCEPT `tuple(c for i, c in enumerate(coords) if i != dim)` # REJECT `coords[dim]` `coords[:dim]` `coords[dim + 1:]`
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


# %%
assert group_ranks((2, 2, 2), 2) == [[0, 1], [2, 3], [4, 5], [6, 7]], "TP: consecutive ranks"
assert group_ranks((2, 2, 2), 1) == [[0, 2], [1, 3], [4, 6], [5, 7]], "DP: TP apart"
assert group_ranks((2, 2, 2), 0) == [[0, 4], [1, 5], [2, 6], [3, 7]], "PP: DP x TP apart"
print("DP groups of (1, 4, 2):", group_ranks((1, 4, 2), 1))
print("✓ TP groups are neighbours, DP groups TP apart, pipelines DP x TP apart")

# %% tests="group_ranks_tests" points=1
# Hidden tests (1 point): every dimension of random shapes; each rank in exactly one group.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_ranks)
### END HIDDEN TESTS

# %%
show_grid((2, 2, 2), group_ranks)

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


# %% [markdown]
# **TP inside a block** is notebook 04's Megatron MLP, over a TP *group* now instead of all
# ranks: `fc1` column-parallel (each TP rank computes some of the ff features), `fc2`
# row-parallel (each multiplies its own features and the partial sums are all-reduced); $f$
# starts the parallel region (identity forward, all-reduce of the gradient backward) and $g$
# ends it (all-reduce forward, identity backward). The LayerNorm and $b_2$ are **replicated**:
# every TP rank holds them whole and computes the same thing.
#
# `nn.Linear(in, out).weight` has shape (out, in). In the cell below, `part` is the slice of
# the ff features that TP rank `t` of `n` owns.

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
        w1, b1 = block.fc1.weight[part], block.fc1.bias[part]  # BLANK column-parallel: this rank's part of fc1 # ACCEPT `(block.fc1.weight[part, :], block.fc1.bias[part])` # REJECT `(block.fc1.weight[:, part], block.fc1.bias[part])` `(block.fc1.weight, block.fc1.bias)`
        w2 = block.fc2.weight[:, part]  # BLANK row-parallel: this rank's part of fc2 # REJECT `block.fc2.weight[part]` `block.fc2.weight`
        self.w1, self.b1, self.w2 = (nn.Parameter(p.detach().clone()) for p in (w1, b1, w2))
        self.b2 = nn.Parameter(block.fc2.bias.detach().clone())  # replicated

    def forward(self, x):
        h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1))  # (batch, seq, ff/n)
        return x + self.g.apply(F.linear(h, self.w2)) + self.b2  # BLANK the block's output # ACCEPT `x + self.b2 + self.g.apply(F.linear(h, self.w2))` # REJECT `x + self.g.apply(F.linear(h, self.w2, self.b2))` `x + F.linear(h, self.w2) + self.b2` `self.g.apply(F.linear(h, self.w2)) + self.b2`


# %% [markdown]
# The check: on 4 ranks, TP groups {0, 1} and {2, 3}, each rank's block on the same input,
# against the plain block (output, input gradient, and the gradients of this rank's parts).

# %%
def tp_block_grads(rank, world_size):
    groups = build_groups((1, 2, 2))
    layer = TPBlock(make_model(1)[0], groups["tp"])
    x, _ = make_batch(2)
    x = x.requires_grad_()
    out = layer(x)
    out.sum().backward()
    return out.detach(), x.grad, {name: p.grad for name, p in layer.named_parameters()}


require_filled(TPBlock)
plain = make_model(1)[0]
x, _ = make_batch(2)
x = x.requires_grad_()
want = plain(x)
want.sum().backward()
for rank, (out, x_grad, grads) in enumerate(run(tp_block_grads, world_size=4)):
    t = rank % 2
    part = slice(t * FF // 2, (t + 1) * FF // 2)
    assert torch.allclose(out, want, atol=1e-12), f"rank {rank}: the output"
    assert torch.allclose(x_grad, x.grad, atol=1e-12), f"rank {rank}: the input's gradient"
    expected = {"norm.weight": plain.norm.weight.grad, "norm.bias": plain.norm.bias.grad,
                "w1": plain.fc1.weight.grad[part], "b1": plain.fc1.bias.grad[part],
                "w2": plain.fc2.weight.grad[:, part], "b2": plain.fc2.bias.grad}
    for name, grad in expected.items():
        assert grads[name].shape == grad.shape, f"rank {rank}: {name} {tuple(grads[name].shape)}"
        assert torch.allclose(grads[name], grad, atol=1e-12), f"rank {rank}: {name}'s gradient"
print("✓ on each TP rank: the block's output and input gradient, and its parts' gradients")

# %% tests="TPBlock_tests" points=3
# Hidden tests (3 points): 1, 2 and 4 ranks, TP groups of 1, 2 and 4 inside them, random
# widths; values against the plain block, the collectives (one all-reduce forward and one
# backward, in the TP group) and each rank's share of the matmul work.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(TPBlock)
### END HIDDEN TESTS

# %% [markdown]
# **DP across.** A TP group is one replica of the model; DP of them train on different parts of
# the batch. Two things decide whether that equals training on one process:
#
# * **Which part of the batch a rank takes.** The TP ranks of one replica compute *one* model
#   together, so they must see the same rows. The part is picked by the rank's position in its
#   DP group (`dist.get_rank(group)` is a rank's index in `group`), not by its global rank.
# * **With whom gradients are averaged.** A parameter's copies live on the ranks of a DP group:
#   TP rank $t$ of every replica holds the same part of $W_1$. Averaging over all ranks would
#   mix the parts of different TP ranks. The replicated LayerNorm and $b_2$ need no TP
#   all-reduce: $f$'s backward already made their gradients equal within a TP group.

# %% solution="train_2d" drill
def train_2d(model, x, y, groups, steps=3, lr=0.1):
    """SGD on a model of TPBlocks, tensor-parallel in its TP group and data-parallel across
    replicas; groups: this rank's process groups by name ("pp", "dp", "tp"); x, y the whole
    batch (the same on every rank). Returns the model."""
    d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"])  # BLANK which replica is this rank's, of how many? # REJECT `(dist.get_rank(), dist.get_world_size())` `(dist.get_rank(groups["tp"]), dist.get_world_size(groups["tp"]))`
    x, y = x.chunk(n_d)[d], y.chunk(n_d)[d]  # this replica's rows
    for _ in range(steps):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=groups["dp"])  # BLANK `groups["dp"]` average with whom? # REJECT `groups["tp"]` `None` `dist.group.WORLD`
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return model


# %% [markdown]
# The check trains 3 steps on 4 ranks (DP 2 x TP 2) and compares every rank's parts with the
# same 3 steps of plain SGD on one process, on the whole batch.

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


def parts_of(model, t, n):
    """The tensors TP rank t of n holds of a plain model, in TPBlock's parameter order."""
    part = slice(t * FF // n, (t + 1) * FF // n)
    return [tensor.detach() for b in model for tensor in
            (b.fc1.weight[part], b.fc1.bias[part], b.fc2.weight[:, part], b.fc2.bias,
             b.norm.weight, b.norm.bias)]


def run_2d(rank, world_size, shape):
    groups = build_groups(shape)
    model = nn.Sequential(*[TPBlock(b, groups["tp"]) for b in make_model()])
    train_2d(model, *make_batch(), groups)
    return [p.detach() for p in model.parameters()]


require_filled(train_2d)
expected = single_process()
for rank, params in enumerate(run(run_2d, (1, 2, 2), world_size=4)):
    for got, want in zip(params, parts_of(expected, rank % 2, 2), strict=True):
        assert torch.allclose(got, want, atol=1e-12), f"rank {rank}: a parameter differs"
print("✓ DP 2 x TP 2: every rank's parts equal 3 steps of single-process training")

# %% tests="train_2d_tests" points=2
# Hidden tests (2 points): layouts DP x TP of 1 to 4 ranks, random batches; parameters after
# training against single-process SGD, and the group of every gradient all-reduce.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(train_2d)
### END HIDDEN TESTS

# %% [markdown]
# ### The same with PyTorch's API
#
# `parallelize_module(module, mesh["tp"], plan)` does the column/row split of each named
# submodule (`ColwiseParallel()`, `RowwiseParallel()`) and inserts $f$ and $g$; the weights
# become `DTensor`s sharded over the TP sub-mesh. `fully_shard(module, mesh=mesh["dp"])`
# (FSDP2, notebook 06) then shards each block over the DP sub-mesh and averages its gradients
# there: ZeRO-3 along DP, TP inside, as torchtitan composes them. `CommDebugMode` counts the
# collectives DTensor and FSDP issue.

# %%
def run_2d_pytorch(rank, world_size, steps=3, lr=0.1):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = make_model()
    for block in model:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
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
    calls = {str(op).split(".")[-1]: n for op, n in counts.get_comm_counts().items()}
    return [p.full_tensor() for p in model.parameters()], calls


results = run(run_2d_pytorch, world_size=4)
for rank, (params, _) in enumerate(results):
    plain = [t for b in expected for t in b.parameters()]
    for got, want in zip(params, plain, strict=True):
        assert torch.allclose(got, want, atol=1e-12), f"rank {rank}: a parameter differs"
print("rank 0's collectives in the first step:", results[0][1])
print("✓ parallelize_module + fully_shard train exactly like one process, too")

# %% [markdown]
# The counts: FSDP all-gathers each block before its forward (and again before its backward
# unless it kept it) and reduce-scatters its gradients over DP, where your `train_2d`
# all-reduced them (ZeRO-3 against DDP: notebook 06); DTensor's all-reduces are your $f$ and
# $g$, one forward and one backward per block.
#
# ## 3. Three dimensions: pipeline stages over PP
#
# Now 8 ranks, shape (2, 2, 2): stage $p$ holds block $p$ (split over its TP group, replicated
# over its DP group). The ranks of one **pipeline** are a PP group:
# `dist.get_process_group_ranks(group)` lists a group's global ranks in order, so stage $p$'s
# neighbours are the entries $p - 1$ and $p + 1$ of that list. Each replica's rows are cut into micro-batches and run as
# in GPipe (notebook 05): every micro-batch's forward, stage after stage, each stage sending its
# output to the next (`dist.send(tensor, dst)`, `dist.recv(tensor, src)`: global ranks); then
# every backward, each stage sending the gradient of its **input** back. The DP all-reduce comes
# once, after the last micro-batch.

# %% solution="train_3d"
def train_3d(stage, x, y, groups, steps=2, lr=0.1, micro_batches=2):
    """SGD with GPipe along the pipeline (stage: this rank's part of the model), TP inside
    each stage, DP across replicas; groups: this rank's groups by name; x, y the whole batch
    (the same on every rank). Returns stage."""
    pipeline = dist.get_process_group_ranks(groups["pp"])  # BLANK `groups["pp"]` the ranks of this rank's pipeline, stage by stage # REJECT `groups["dp"]` `groups["tp"]`
    p, last = pipeline.index(dist.get_rank()), len(pipeline) - 1
    d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"])
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
                dist.send(inputs[m].grad, pipeline[p - 1])  # BLANK `inputs[m].grad` what the previous stage needs # REJECT `outputs[m].grad` `inputs[m]` `grad`
        for param in stage.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, group=groups["dp"])
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
    p, d, t = mesh_coords(rank, (2, 2, 2))
    mine = parts_of(expected, t, 2)[6 * p:6 * (p + 1)]  # block p's six tensors
    for got, want in zip(params, mine, strict=True):
        assert torch.allclose(got, want, atol=1e-12), f"rank {rank} (stage {p}): a parameter"
print("✓ PP 2 x DP 2 x TP 2 on 8 ranks: every rank's parts equal single-process training")

# %% tests="train_3d_tests" points=2
# Hidden tests (2 points): layouts PP x DP x TP of 2 to 8 ranks, random batches; parameters
# against single-process SGD, and who sends what to whom.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(train_3d)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Bytes: predicted, then measured
#
# Per step, the messages of one rank (the bytes of each all-reduce's tensor, of each send's and
# each recv's), by group:
#
# * **TP**: per block of the stage and per micro-batch, $g$'s all-reduce forward and $f$'s
#   backward, each of one micro-batch's activations (rows x seq x hidden values). Summed over
#   the micro-batches: 2 x (blocks of the stage) x (the replica's rows x seq x hidden).
# * **PP**: per micro-batch, one activation forward and one gradient back over each boundary
#   the stage touches (one for the first and the last stage, two in between).
# * **DP**: every gradient the rank holds, once. Careful what "holds" means: $W_1$, $b_1$ and
#   $W_2$ are cut over TP, but the LayerNorm's weight and bias and $b_2$ are whole on every TP
#   rank.
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
    sharded = 2 * hidden * ff + ff  # W1, b1, W2 of one block
    replicated = 3 * hidden  # the LayerNorm's weight and bias, b2
    return {
        "tp": 2 * stage_blocks * activations if tp > 1 else 0,
        "dp": stage_blocks * (sharded / tp + replicated) * itemsize if dp > 1 else 0,  # BLANK `stage_blocks * (sharded / tp + replicated) * itemsize` the gradient bytes this rank holds, over its stage's blocks # ACCEPT `stage_blocks * (sharded // tp + replicated) * itemsize` # REJECT `stage_blocks * (sharded + replicated) / tp * itemsize` `stage_blocks * (sharded + replicated) * itemsize`
        "pp": 2 * min(pp - 1, 2) * activations,
    }


# %%
require_filled(group_bytes)
mine = group_bytes({"blocks": 2, "hidden": HIDDEN, "ff": FF, "seq": SEQ}, (2, 2, 2), 8, 2)
assert mine["tp"] == 2 * 4 * SEQ * HIDDEN * 8, "TP: g and f, each on the replica's 4 rows"
assert mine["pp"] == 2 * 4 * SEQ * HIDDEN * 8, "PP: the activations forward, their gradient back"
print("bytes predicted for one step of section 3's run:", mine)

# %% tests="group_bytes_tests" points=1
# Hidden tests (1 point): random model sizes, layouts, batches, micro-batches and value sizes.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(group_bytes)
### END HIDDEN TESTS

# %% [markdown]
# The check of section 3's run, counted (`count_by_group` records each all-reduce with its
# group's ranks, each send and recv with the pipeline of its two ranks).
#
# Notebook 02's analyzer makes the same kind of prediction for a GPT-like layer, with its own
# assumptions: $\Psi = 12 L h^2$ parameters (attention and MLP weights; no biases or norms),
# 16-bit values, 4 TP all-reduces per layer per micro-batch (attention's and the MLP's, forward
# and backward), $2m$ messages over one stage boundary. Here it is, in bytes, beside your
# prediction and what the 8 ranks of section 3 really moved in one step:

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


DIMS = {"blocks": 2, "hidden": HIDDEN, "ff": FF, "seq": SEQ}
predicted = group_bytes(DIMS, (2, 2, 2), 8, 2)
analyzer = analyzer_02(DIMS, (2, 2, 2), 8, 2)
measured = run(run_3d, (2, 2, 2), True, world_size=8)
print(f"{'group':>5} {'02 analyzer':>12} {'yours':>8} {'measured (every rank)':>24}")
for name in ("tp", "dp", "pp"):
    on_ranks = sorted({m[name] for m in measured})
    print(f"{name:>5} {analyzer[name]:>12.0f} {predicted[name]:>8.0f} {str(on_ranks):>24}")
    assert on_ranks == [predicted[name]], f"{name}: predicted {predicted[name]}, measured {on_ranks}"
show_bytes([(name, {"02 analyzer": analyzer[name], "yours": predicted[name],
                    "measured": measured[0][name]}) for name in ("tp", "dp", "pp")],
           "One step of the 8-rank run, bytes per rank by group")
print("✓ your prediction is what every rank moved, group by group")

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
# For a model of $\Psi$ parameters trained with Adam in mixed precision, a GPU holds 2 + 2 bytes
# per parameter of its stage's share of the weights and gradients, and 12 of optimizer state
# (notebook 06). TP and PP cut the model: a GPU holds $\Psi/(\mathrm{TP}\cdot\mathrm{PP})$ of
# it. DP replicates it, unless the optimizer state is sharded across the DP group (ZeRO-1, as
# Megatron-LM's distributed optimizer does), which divides the 12 bytes by DP. Complete the
# memory a GPU needs for its model states (activations left out).

# %% solution="layout_memory"
def layout_memory(psi, dp, tp, pp, zero1=False):
    """Bytes of model states per GPU: fp16 weights and gradients, Adam's fp32 states (sharded
    over DP when zero1)."""
    return (4 + 12 / (dp if zero1 else 1)) * psi / (tp * pp)  # BLANK bytes per GPU # ACCEPT `(4 * psi + 12 * psi / (dp if zero1 else 1)) / (tp * pp)` # REJECT `(4 + 12 / dp) * psi / (tp * pp)` `16 * psi / (tp * pp)` `(4 + 12 / (dp if zero1 else 1)) * psi / (dp * tp * pp)`


# %%
assert layout_memory(1e9, 1, 1, 1) == 16e9, "16 bytes a parameter on one GPU"
assert layout_memory(1e9, 4, 2, 1) == 8e9, "TP 2 halves it; DP alone does not"
assert layout_memory(1e9, 4, 2, 1, zero1=True) == 2e9 + 1.5e9, "ZeRO-1 divides the 12 by DP"
print("✓ layout_memory")

# %% tests="layout_memory_tests" points=1
# Hidden tests (1 point): random sizes and layouts, with and without ZeRO-1.
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade(layout_memory)
### END HIDDEN TESTS

# %% [markdown]
# The rule of thumb of the Megatron-LM paper, as a chooser: TP no wider than a server (its
# all-reduces need the fast links); PP as few stages as make the model fit (each stage adds to
# the bubble); DP what is left. A layout fits when its model states leave a margin for the
# activations, here a quarter of the memory.
#
# The paper's largest run: a 1-trillion-parameter GPT on 3072 A100 GPUs of 80 GB, 8 GPUs per
# server, tensor parallelism inside a server and pipeline parallelism across servers
# (502 petaFLOP/s in all, 52% of the GPUs' peak).

# %%
def choose_layout(psi, gpus, memory, gpus_per_node, zero1=False, margin=0.75):
    """(dp, tp, pp): TP up to a server, then the fewest pipeline stages that fit, DP the rest."""
    rows = []
    for tp in (t for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0):
        for pp in (p for p in range(1, gpus // tp + 1) if gpus % (tp * p) == 0):
            dp = gpus // (tp * pp)
            rows.append(((dp, tp, pp), layout_memory(psi, dp, tp, pp, zero1)))
    fitting = [(layout, nbytes) for layout, nbytes in rows if nbytes <= margin * memory]
    if not fitting:
        return None, rows
    best = min(fitting, key=lambda row: (row[0][2], -row[0][1]))  # fewest stages, widest TP
    return best[0], rows


for zero1 in (False, True):
    layout, rows = choose_layout(1e12, 3072, 80e9, 8, zero1)
    dp, tp, pp = layout
    print(f"1T parameters, 3072 GPUs of 80 GB, zero1={zero1}: dp={dp} tp={tp} pp={pp}, "
          f"{layout_memory(1e12, dp, tp, pp, zero1) / 1e9:.1f} GB of model states per GPU")
    assert tp == 8, "the model does not fit without TP as wide as a server"
show_layouts([(f"tp{t} pp{p}", nbytes, (d, t, p) == layout) for (d, t, p), nbytes in rows
              if t in (1, 8)], 80e9, "1T parameters on 3072 GPUs: model states per GPU (ZeRO-1)")
print("✓ TP = 8 inside each server, as in the paper; the pipeline spans servers")

# %% [markdown]
# Without ZeRO-1, 16 bytes a parameter need TP x PP $\geq$ 267 for a quarter of margin (the
# chooser picks 8 x 48); ZeRO-1 over DP takes it down to about 4 bytes a parameter, and the
# pipeline to 12 stages. The real choice also weighs the bubble (fewer stages, more
# micro-batches), the activations (which grow with the micro-batch and shrink with TP), and
# the time each group's traffic takes on its links: notebook 02's analyzer.
#
# ## Wrap-up
#
# * A grid of shape (PP, DP, TP) with TP fastest: TP groups are neighbours (one server), DP
#   groups TP apart, pipelines DP x TP apart. `rank = (p * DP + d) * TP + t`.
# * Every parallelism runs in its own group: $f$, $g$ in the TP group, the gradient average in
#   the DP group, sends and receives between neighbours of one pipeline. The wrong group gives
#   the wrong numbers, or hangs.
# * Replicated parameters (norms, the row-parallel bias) are whole on every TP rank: averaged
#   over DP only, and counted whole in DP's bytes.
# * A prediction of the bytes is only as good as its count of what the code does.
#
# **Next.** The drills re-mask random pieces of every notebook's code.

# %% [markdown]
# ### For instructors: where this notebook departs from its source notes
#
# * The notes' DP + PP demo (4 GPUs: stages on GPUs {0, 1} | {2, 3}, data split 0 + 2 | 1 + 3)
#   is the (PP 2, DP 2) grid of section 3. Its code makes `pp_group = dist.new_group()` (every
#   rank) and wraps the whole model in DDP on the default group, so gradients are averaged
#   over ranks that hold *different* stages; here each parallelism has its own group, and the
#   test of `train_2d` fails an all-reduce over the world, naming it.
# * Blanks: 10, one per idea: the coordinates, the group key, the column and the row split,
#   where the row-parallel bias is added, the batch part and the group of the DP average, the
#   pipeline's ranks and what goes back, the replicated parameters in DP's bytes, ZeRO-1 in
#   the memory of a layout.
