# %% [markdown]
# # 03 · Data parallelism: from synchronous SGD to a hand-built, bucketed DDP
#
# Data parallelism is the simplest way to train on many workers: every worker holds a full
# copy of the model, takes a different slice of each batch, and the workers combine their
# gradients, with notebook 01's collectives, before anyone updates the weights. This notebook
# trains that way, first by hand, then with PyTorch's
# `DistributedDataParallel` (DDP), then by building DDP's insides yourself.
#
# **What you will build**
#
# 1. One step of synchronous SGD over real ranks, equal to single-process SGD on the whole
#    batch; and the broadcast that makes every replica start from the same weights.
# 2. The DDP training loop (backend, the DDP wrapper, `DistributedSampler`, `set_epoch`), on 4
#    CPU ranks with a 784-256-10 MLP.
# 3. A DDP of your own whose communication overlaps backward, one all-reduce per parameter;
#    then one that sends gradients in buckets, with a timeline of a step, and a measurement of
#    when buckets pay.
# 4. Gradient accumulation with `no_sync`: k micro-batches make the gradient of their union, one
#    larger batch, with one round of communication instead of k.
# 5. Asynchronous SGD with a parameter server: staleness, and what it does to the loss.
#
# **How to use this notebook.** Code cells with `_____` are yours: replace each `_____` with
# code (the comment after it, `# [n] ...`, is a hint for blank *n*). Run the cell, then run the
# check cell below it: it prints a ✓ when your code works. The cell after that holds the hidden
# tests that grade your work (press **Validate** in the toolbar to run them all). Run the cells
# top to bottom; every other cell is locked.

# %%
import functools
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from distlab import reveal, run
from distlab.data_parallel import (
    check_params_in_sync,
    count_bucket_all_reduces,
    flat_params,
    mlp,
    overlap_fraction,
    show_loss_curves,
    show_sampler,
    show_timeline,
    synthetic_digits,
    toy_model,
    watch_all_reduce,
)

# %% [markdown]
# ## 1. Synchronous SGD
#
# $N$ workers (ranks), each with its own copy of the same weights $w$. One step of training on
# a global batch of $M$ samples: rank $r$ gets shard $r$ of the batch, $B_r$ samples, and the
# shards need not be of equal size (here 66 samples on 4 ranks: 17, 17, 16 and 16). Each rank
# runs forward and backward on its shard; the given code then sums every parameter's `.grad`
# over the ranks (`dist.all_reduce`, whose default operation is the sum) and every rank
# updates its weights with that sum.
#
# ```
#  rank 0: w, shard 0 (17 samples) -> loss_0 -> backward -> p.grad --+
#  rank 1: w, shard 1 (17 samples) -> loss_1 -> backward -> p.grad   |  summed over
#  rank 2: w, shard 2 (16 samples) -> ...                             |  the ranks
#  rank 3: w, shard 3 (16 samples) -> ...                         ----+
#                                      then on every rank:  w <- w - lr * (the sum)
# ```
#
# **What must hold after the step.** Every rank holds the weights that one process would
# reach with one step of SGD on the whole global batch, with the loss averaged over all $M$
# samples (`F.cross_entropy`'s default mean). Your line decides what each rank
# backpropagates. No rank knows the other shards' sizes. **What may be sent:** each gradient
# crosses the network once (the given sum), plus at most one all-reduce of a single number
# per step.
#
# **API.** `dist.all_reduce(t, op=...)` replaces `t` on every rank, in place, by the
# element-wise reduction of every rank's `t`; `op` is a member of `dist.ReduceOp`. On gloo
# (torch 2.13) these work: `SUM` (the default), `AVG`, `PRODUCT`, `MIN`, `MAX`, and the bitwise
# `BAND`, `BOR`, `BXOR` (integer tensors); `PREMUL_SUM` is NCCL's only. Notebook 01 also used `dist.broadcast(t, src=k)`, `dist.reduce(t, dst=k)` and `dist.all_gather(list, t)`.
# Example, on 3 ranks: `t = torch.tensor([1.0, 10.0 * rank])`; after
# `dist.all_reduce(t, op=dist.ReduceOp.MAX)` every rank holds `[1., 20.]`.

# %% solution="sync_sgd_step" drill
def sync_sgd_step(model, x, y, lr):
    """One step of synchronous SGD: (x, y) is this rank's shard of the global batch (shards may
    differ in size); every rank calls this at the same time. Returns what this rank
    backpropagated."""
    model.zero_grad()
    total = torch.tensor(float(len(y)), device=x.device); dist.all_reduce(total); loss = F.cross_entropy(model(x), y) * (len(y) / total)  # BLANK `total = torch.tensor(float(len(y)), device=x.device); dist.all_reduce(total); loss = F.cross_entropy(model(x), y) * (len(y) / total)` what this rank backpropagates # ACCEPT `n = torch.tensor([len(y)]); dist.all_reduce(n); loss = F.cross_entropy(model(x), y, reduction="sum") / n.item()` `total = torch.tensor(float(len(y))); dist.all_reduce(total); loss = F.cross_entropy(model(x), y, reduction="sum") / total` # REJECT `loss = F.cross_entropy(model(x), y) / dist.get_world_size()` `loss = F.cross_entropy(model(x), y)` `total = torch.tensor(float(len(y))); dist.all_reduce(total); loss = F.cross_entropy(model(x), y) / total` `loss = F.cross_entropy(model(x), y, reduction="sum") / (len(y) * dist.get_world_size())` `total = torch.tensor(float(len(y))); dist.all_reduce(total, op=dist.ReduceOp.MAX); loss = F.cross_entropy(model(x), y) * (len(y) / total)`
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad)  # the sum over the ranks
            p -= lr * p.grad
    return loss.item()


# %% [markdown]
# The check trains a 784-64-10 MLP for 3 steps on 4 ranks, each rank on its shard (17, 17, 16
# and 16 samples) of every global batch of 66 samples, and compares the weights after each step with one process
# training on the whole batches (`torch.optim.SGD`). Every rank builds its model from the same
# seed, so the replicas start equal. It also shows what rank 0 all-reduced in its first step.

# %%
dataset = synthetic_digits(1000)  # 784 features, 10 classes: a learnable stand-in for MNIST
global_batches = [(dataset.tensors[0][i:i + 66], dataset.tensors[1][i:i + 66])
                  for i in range(0, 198, 66)]


def sync_sgd_on_ranks(rank, world_size, batches, lr, seed_per_rank=False):
    """Synchronous SGD on this rank's shards; the weights after each step, and the sizes of
    the all-reduces of the first step."""
    model = mlp((784, 64, 10), seed=rank if seed_per_rank else 0)
    history, sent = [], None
    for x, y in batches:
        with watch_all_reduce() as log:
            sync_sgd_step(model, x.tensor_split(world_size)[rank],
                          y.tensor_split(world_size)[rank], lr)
        sent = log.numels() if sent is None else sent
        history.append(flat_params(model))
    return history, sent


def single_process(model, batches, lr):
    """The oracle: one process, the whole batch, torch.optim.SGD."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = []
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        history.append(flat_params(model))
    return history


per_rank = run(sync_sgd_on_ranks, global_batches, 0.1, world_size=4)
expected = single_process(mlp((784, 64, 10), seed=0), global_batches, 0.1)
print(f"rank 0's all-reduces in step 1: {per_rank[0][1]} elements; its parameters: "
      f"{[p.numel() for p in mlp((784, 64, 10)).parameters()]}")
for step, want in enumerate(expected):
    gap = max((history[step] - want).abs().max().item() for history, _ in per_rank)
    print(f"step {step + 1}: largest difference from single-process SGD, over 4 ranks: {gap:.1e}")
    assert gap < 1e-5, f"step {step + 1}: the ranks' weights are not single-process SGD's"
print("✓ synchronous SGD on 4 ranks is single-process SGD on the whole batch, step by step")
reveal("sync_sgd_step")

# %% tests="sync_sgd_step_tests" points=1
# Hidden tests (1 point): world sizes 1-4, random small models (tied weights too), shards of
# unequal sizes, several steps, against single-process SGD on the concatenated batch; and
# what each rank sent.
### BEGIN HIDDEN TESTS
# Rewritten to BLANKS.md (issue 50, round 3): one blank, the loss each rank backpropagates
# so that the given sum of gradients is the whole batch's; shards of unequal sizes, so the
# plain mean (divide by the world size) fails.
# For instructors: seed 003 §6-7 simulates this with lists and a simulated AllReduce; here it
# runs on gloo ranks against torch.optim.SGD. Its simulator draws each worker's start on its
# own (np.random.randn per worker) while saying they share one: section 1b shows the gap that
# never closes, and fixes it with a broadcast (seed 002: rank 0 broadcasts the start).
from autograder.grade_cell import grade
grade(sync_sgd_step)
### END HIDDEN TESTS

# %% [markdown] why="sync_sgd_step"
# **What the check showed.** With shards of $B_r$ samples, $M = \sum_r B_r$ in all, and the
# loss averaged over the samples, the full batch's loss is
# $L = \frac{1}{M}\sum_{\text{samples}} \ell = \sum_r \frac{B_r}{M} L_r$, where $L_r$ is
# shard $r$'s mean loss. So $\nabla L = \sum_r \nabla\big(\frac{B_r}{M} L_r\big)$: rank $r$
# backpropagates its mean loss times $B_r/M$, and the sum over the ranks is the whole batch's
# gradient. $M$ is known to no rank: one all-reduce of the shard sizes gives it. With equal
# shards, $B_r/M = 1/N$: the sum of the gradients divided by $N$, their mean (`ReduceOp.AVG`),
# which is what PyTorch's DDP computes. Dividing by $N$ with unequal shards would give each
# sample of a small shard more weight than one of a large shard. Every rank needs the same
# combination of all the ranks' gradients, and then applies the same update. This is
# synchronous SGD:
#
# ```
#  rank r: shard r -> forward, backward -> g_r --(collective)--> G -> w -= lr * G
#                                          (the same G on every rank)
# ```
#
# Samplers give every rank the same number of samples (section 2), so that the plain mean is
# right, and every rank runs the same number of steps.

# %% [markdown]
# ### 1b. Start equal: broadcast
#
# All of this assumed the replicas *start* equal. A simulator (or a script) that draws every
# worker's weights on its own, `np.random.randn` once per worker, breaks that without a sound,
# because equal updates never close a gap: if every rank subtracts the same $\eta G$, then
# $w_r - w_s$ after any number of steps is $w_r - w_s$ at the start. Below, every rank draws
# its own start (`seed=rank`):

# %%
apart = run(sync_sgd_on_ranks, global_batches, 0.1, True, world_size=4)
start_gap = flat_params(mlp((784, 64, 10), seed=1)) - flat_params(mlp((784, 64, 10), seed=0))
end_gap = apart[1][0][-1] - apart[0][0][-1]  # rank 1's weights - rank 0's, after the last step
print(f"rank 1 - rank 0, largest entry: {start_gap.abs().max().item():.4f} at the start, "
      f"{end_gap.abs().max().item():.4f} after 3 steps; the gap itself moved by at most "
      f"{(end_gap - start_gap).abs().max().item():.1e}")
assert torch.allclose(end_gap, start_gap, atol=1e-5), "equal updates keep the gap as it was"

# %% [markdown]
# The gap is exactly where it started: the replicas never agree, whatever the number of steps.
#
# **The problem.** At construction, before the first step, make this rank's copy of a module
# compute exactly what rank 0's copy computes: every tensor the module's forward reads must be
# rank 0's afterwards. Every rank calls the function at the same time, on its own copy (same
# architecture, different values). **Budget:** each tensor sent once (a weight shared by two
# layers is one tensor).
#
# **API.** `dist.broadcast(t, src=k)` replaces `t` on every rank, in place, by rank `k`'s
# `t`; every rank calls it, in the same order, for the same tensors. What a module holds, on
# a `nn.BatchNorm1d(3)` (not this notebook's models):

# %%
norm = nn.BatchNorm1d(3)
print("parameters():", [tuple(t.shape) for t in norm.parameters()], " named:",
      [name for name, _ in norm.named_parameters()])
print("buffers():   ", [tuple(t.shape) for t in norm.buffers()], " named:",
      [name for name, _ in norm.named_buffers()])
print("state_dict():", list(norm.state_dict()))

# %% solution="broadcast_parameters"
def broadcast_parameters(module):
    """Make this rank's copy of `module` compute what rank 0's copy computes, in place."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]: dist.broadcast(tensor, src=0)  # BLANK `for tensor in [*module.parameters(), *module.buffers()]: dist.broadcast(tensor, src=0)` which tensors, and how each gets rank 0's values # ACCEPT `for tensor in [*module.buffers(), *module.parameters()]: dist.broadcast(tensor, 0)` `for tensor in list(module.parameters()) + list(module.buffers()): dist.broadcast(tensor, src=0)` `for tensor in module.state_dict().values(): dist.broadcast(tensor, src=0)` # REJECT `for tensor in module.parameters(): dist.broadcast(tensor, src=0)` `for tensor in module.buffers(): dist.broadcast(tensor, src=0)` `for tensor in [*module.parameters(), *module.buffers()]: dist.all_reduce(tensor)` `for tensor in [*module.parameters(), *module.buffers()]: dist.broadcast(tensor, src=1)` # REJECT `for tensor in list(module.parameters()) * 2 + list(module.buffers()): dist.broadcast(tensor, src=0)`


# %% [markdown]
# The check builds `toy_model(seed=rank)` on every rank (a different start on each), calls
# your function, and lists, per rank, the tensors of the model's state that are not rank 0's.
# Then the ranks of the run above start apart again, call it first, and train.

# %%
def broadcast_check(rank, world_size):
    model = toy_model(seed=rank)
    broadcast_parameters(model)
    return {name: t.detach() for name, t in model.state_dict().items()}


states = run(broadcast_check, world_size=4)
reference_state = toy_model(seed=0).state_dict()
for rank, state in enumerate(states):
    differ = [name for name, value in reference_state.items()
              if not torch.equal(state[name], value)]
    print(f"rank {rank}: state tensors not rank 0's: {differ or 'none'}")
    assert not differ, f"rank {rank}: {differ} are not rank 0's"


def start_apart_then_broadcast(rank, world_size, batches, lr):
    model = mlp((784, 64, 10), seed=rank)
    broadcast_parameters(model)
    history = []
    for x, y in batches:
        sync_sgd_step(model, x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank],
                      lr)
        history.append(flat_params(model))
    return history


per_rank = run(start_apart_then_broadcast, global_batches, 0.1, world_size=4)
gap = max((history[-1] - expected[-1]).abs().max().item() for history in per_rank)
assert gap < 1e-5, f"after a broadcast the ranks still differ from single-process SGD ({gap:.1e})"
print("✓ every rank computes rank 0's function, and trains like one process again")
reveal("broadcast_parameters")

# %% tests="broadcast_parameters_tests" points=1
# Hidden tests (1 point): world sizes 1-4, random small models; and the bytes each rank
# broadcast.
### BEGIN HIDDEN TESTS
# Issue 50 round 2: the blank is the whole loop (which tensors, which collective); the
# explanation after the check names neither the method nor the word.
from autograder.grade_cell import grade
grade(broadcast_parameters)
### END HIDDEN TESTS

# %% [markdown] why="broadcast_parameters"
# **What the check showed.** Forward reads more than the optimizer trains: BatchNorm's
# running mean and variance, `toy_model`'s input `scale`, a positional table. Left out, those
# stay each rank's own, and the ranks compute different functions from the same weights; no
# later step ever makes them equal. PyTorch's DDP makes every replica rank 0's at construction
# in the same way (PyTorch's DDP design note, docs.pytorch.org/docs/stable/notes/ddp.html,
# "Construction").

# %% [markdown]
# ## 2. The DDP training loop
#
# Now the real thing, as you would write it for `torchrun`: the loop of PyTorch's DDP video
# series (docs.pytorch.org/tutorials/beginner/ddp_series_multigpu.html, with a sampler and
# `set_epoch`). Four pieces need explaining
# first.
#
# **The backend** moves the bytes. `nccl` (NVIDIA's library) all-reduces CUDA tensors between
# GPUs over NVLink and InfiniBand; it is the one to use for GPU training, and it cannot touch
# CPU tensors. `gloo` (Facebook's) works on CPU tensors (and runs only some collectives on
# CUDA tensors); `mpi` exists
# when PyTorch was built with MPI. The ranks of this notebook hold CPU tensors.
#
# **The wrapper.** `DDP(module)` returns a module that does what section 1 did by hand, and
# more: at construction it does what section 1b does; during every backward it synchronizes
# the gradients (section 3 builds that); and by default (`forward_sync_buffers=True` on torch
# 2.13, which still accepts the older `broadcast_buffers` with a `FutureWarning`: "`broadcast_buffers`
# is deprecated. Use `forward_sync_buffers` instead"), before every forward it broadcasts rank 0's
# buffers, such as BatchNorm's running statistics, so that they stay rank 0's (in train and eval mode alike; it skips the
# broadcast only when the forward before ran under `no_sync()` or without gradients). Call
# the wrapper for forward, and give the optimizer its parameters. On GPUs you would also pass
# `device_ids=[r]`, the one GPU of process `r`. For a model on the CPU there is no device to name,
# and DDP refuses `device_ids` with a `ValueError`.
#
# **The sampler** decides which samples a rank sees. `DistributedSampler` takes the data set
# and, if you want to name them, `num_replicas` and `rank` (they default to the process
# group's). It shuffles the indices with a seeded permutation, pads them by repeating the
# first few until their number divides by $N$ (with `drop_last=True` it drops the last few
# instead), and gives rank $r$ every $N$-th index from position
# $r$. Every rank gets the same number of samples, so every rank runs the same number of steps and
# calls the same all-reduces: a rank with one batch fewer would leave the others waiting until
# the process group's timeout, and then fail.
# The permutation is seeded with `seed + epoch`, and the sampler cannot know the epoch: its method
# `set_epoch` tells it (it only stores the number). Below, 10 samples on 3 ranks (so 12 indices: 2
# samples are padding, given twice), two epochs with the epoch never told, then two with it told;
# the second table is made with `seed=e`, which gives the permutation of seed + epoch that telling
# epoch `e` gives:

# %%
def sampler_table(num_samples, ranks, epochs, tell_epoch):
    """table[e][r]: the indices rank r gets in epoch e."""
    table = []
    for e in range(epochs):
        row = []
        for r in range(ranks):
            data_sampler = DistributedSampler(range(num_samples), num_replicas=ranks, rank=r,
                                              seed=e if tell_epoch else 0)
            row.append(list(data_sampler))
        table.append(row)
    return table


show_sampler(sampler_table(10, 3, 2, tell_epoch=False), 10, "epoch never told")
show_sampler(sampler_table(10, 3, 2, tell_epoch=True), 10, "epoch told every epoch")
print("samples per rank of 1000:", len(DistributedSampler(range(1000), num_replicas=4, rank=0)),
      "on 4 ranks,", len(DistributedSampler(range(1000), num_replicas=3, rank=0)),
      "on 3 ranks (3 x 334 = 1002: 2 padded)")

# %% [markdown]
# Never told, every epoch is epoch 0: the same order, and each rank the same samples,
# every time. With it, each epoch is a new permutation, split anew.
#
# **DataLoader and samplers.** A `DataLoader` orders the samples in one of two ways: it makes
# its own random sampler (`shuffle=True`), or it follows the `sampler` you give it. Not both:
# it raises `ValueError: sampler option is mutually exclusive with shuffle`.
#
# Now the loop. Differences from the tutorial's GPU code, besides the blanks:
#
# * it runs on GPUs (`torch.cuda.set_device(rank)`, `.to(device)`, `device_ids=[rank]`);
#   here everything stays on the CPU, and the wrapper gets no `device_ids`;
# * the model and the data set come in as arguments (so the check and the hidden tests can
#   choose them), and `run(..., init_group=False)` sets `MASTER_ADDR` and a free
#   `MASTER_PORT` instead of the tutorial's fixed `'12355'`;
# * a parameter-sync check (all_gather every parameter, compare with your own) ends the
#   function, as `check_params_in_sync(model)` from `distlab.data_parallel`;
# * it returns each epoch's mean loss and how many samples this rank saw.

# %% solution="ddp_train" drill
def ddp_train(rank, world_size, model, dataset, epochs=3, batch_size=32, lr=0.01):
    """Train `model` on `dataset` with DDP, as rank `rank` of `world_size`: the tutorial's
    setup, training loop and teardown in one function. Each epoch every rank gets an equal share
    of a new shuffle of the data set (padded or with the remainder dropped: both are right).
    Returns {"loss": per-epoch mean loss on this rank, "samples": samples this rank saw per
    epoch}."""
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)  # BLANK `"gloo"` API: the backend for CPU tensors # API # REJECT `"nccl"` # ACCEPT `dist.Backend.GLOO`
    model = DDP(model)  # BLANK API: the model whose gradients are synchronized over the ranks during backward # API # REJECT `model` `DDP(model, device_ids=[rank])`
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)  # BLANK API: the samples this rank trains on # API # ACCEPT `DistributedSampler(dataset)` `DistributedSampler(dataset, num_replicas=world_size, rank=rank, drop_last=True)` # REJECT `None` `DistributedSampler(dataset, shuffle=False)` # REJECT `DistributedSampler(dataset, num_replicas=world_size, rank=0)`
    dataloader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                            shuffle=False)  # BLANK API: see "DataLoader and samplers" above # API # ACCEPT `None` # REJECT `True`
    history = {"loss": [], "samples": 0}
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # BLANK API: a different order in every epoch # API # REJECT `sampler.set_epoch(0)` # REJECT `pass`
        model.train()
        total, batches, seen = 0.0, 0, 0
        for batch_x, batch_y in dataloader:
            optimizer.zero_grad()
            loss = criterion(model(batch_x), batch_y)
            loss.backward()  # DDP all-reduces the gradients during backward
            optimizer.step()
            total, batches, seen = total + loss.item(), batches + 1, seen + len(batch_x)
        history["loss"].append(total / batches)
        history["samples"] = seen
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total / batches:.4f}")
    check_params_in_sync(model)  # all_gather each parameter, compare
    dist.destroy_process_group()
    return history


# %% [markdown]
# The check: 4 ranks, a 784-256-10 MLP (MNIST-sized inputs), 1000 samples, batches of 32,
# 3 epochs, SGD with learning rate 0.01 (plus the parameter-sync check inside the function).
# Each rank's loss is its own (its data differs), but its weights are everyone's.

# %%
results = run(ddp_train, mlp(), synthetic_digits(1000), world_size=4, init_group=False)
for rank, result in enumerate(results):
    print(f"rank {rank}: {result['samples']} samples per epoch, mean loss per epoch "
          + ", ".join(f"{loss:.4f}" for loss in result["loss"]))
assert [r["samples"] for r in results] == [250] * 4, "each of 4 ranks should see 1000 / 4 = 250"
assert all(r["loss"][-1] < r["loss"][0] for r in results), "the loss should go down"
print("✓ 4 ranks trained one model: 250 samples each per epoch, parameters in sync")
print(f"(4 ranks ran on {os.cpu_count()} CPU core(s))")

# %% tests="ddp_train_tests" points=5
# Hidden tests (5 points): world sizes 1-4, data sets that the world size does not divide,
# 2 epochs, against single-process SGD on the batches the ranks should have drawn.
### BEGIN HIDDEN TESTS
# For instructors, how this exercise departs from seed 000's exercise 2 (its five blanks kept):
# - Hint 1 asked "which backend for GPU training?" (nccl); here there is no GPU: the CPU
#   backend, taught above with nccl and mpi.
# - Hint 2 was the answer with the seed's `device_ids=[rank]`, which raises ValueError for a
#   CPU model; device_ids is dropped, and the hint says what the wrapper does, not its name.
# - Hint 3 named DistributedSampler; hint 4 ("sampler and shuffle are mutually exclusive")
#   gave False away; hint 5 named set_epoch. Each is now taught above (the sampler table with
#   and without set_epoch, padding, the DataLoader's ValueError) and hinted in words only.
# - torch.cuda.set_device, .to(device) and the fixed MASTER_PORT '12355' are gone (CPU ranks,
#   run() picks a free port); the model and data set are arguments; the seed's all_gather
#   parameter check is at the end (check_params_in_sync, which keeps gloo from deadlocking
#   when the group is destroyed right after it); per-epoch mean loss instead of the sum.
from autograder.grade_cell import grade
grade(ddp_train)
### END HIDDEN TESTS

# %% [markdown]
# On 4 GPUs each rank computes its own 32 samples, so a step takes about as long as one GPU's
# step on 32, communication aside, while it moves 4 × 32 samples: an epoch takes about a
# quarter of one GPU's time. Four CPU ranks on fewer than 4 cores (the check printed how
# many it had) take turns on them and cannot show that. What is left is the all-reduce: the
# subject of the next section.
#
# ## 3. Inside DDP: a hand-built one
#
# ### 3a. When gradients exist
#
# Section 1 waited for the whole backward, then all-reduced: the network sat idle during
# backward, and backward's cores sat idle during the all-reduces. Two facts and two pieces of
# API let a step do better.
#
# `p.register_post_accumulate_grad_hook(hook)` makes autograd call `hook(p)` the moment
# `p.grad` holds this backward's complete gradient (for a weight used twice, after both
# contributions). Here, when each gradient of the 784-256-10 MLP becomes complete:

# %%
model = mlp()
ready = []
for name, param in model.named_parameters():
    param.register_post_accumulate_grad_hook(
        lambda p, name=name: ready.append((name, time.perf_counter())))
x, y = dataset.tensors[0][:32], dataset.tensors[1][:32]
loss = F.cross_entropy(model(x), y)
start = time.perf_counter()
loss.backward()
end = time.perf_counter()
print("named_parameters():", [name for name, _ in model.named_parameters()])
for name, when in ready:
    print(f"  {name:>8} complete at {(when - start) * 1e3:5.2f} ms of a {(end - start) * 1e3:.2f} ms "
          "backward")


# %% [markdown]
# With `async_op=True`, a collective starts and returns at once, with a handle (a `Work`),
# instead of returning when it is done: the backend moves the data while this thread computes.
# Before the tensor is read, the handle's `wait()` must be called; until then the tensor may
# hold anything: your values, the result, or a mix.

# %%
def async_demo(rank, world_size):
    t = torch.full((2_000_000,), float(rank + 1))
    start = time.perf_counter()
    handle = dist.broadcast(t, src=0, async_op=True)
    returned = time.perf_counter()
    sum(i * i for i in range(200_000))  # this rank goes on computing meanwhile
    handle.wait()
    return (returned - start) * 1e3, (time.perf_counter() - start) * 1e3, t[0].item()


for rank, (returned, done, value) in enumerate(run(async_demo, world_size=4)):
    print(f"rank {rank}: broadcast returned after {returned:.2f} ms; after other work and "
          f"wait(), at {done:.1f} ms, t holds {value:g}")

# %% [markdown]
# ### 3b. One all-reduce per parameter
#
# **The problem.** A wrapper that synchronizes the gradients as section 1's step did, one
# all-reduce per trainable parameter, so that the network carries each gradient while backward
# is still computing the others. Here every rank's shard has the same number of samples (as
# `DistributedSampler` makes them), and the loop backpropagates its loss divided by the world
# size. A training step with it:
#
# ```python
# ddp = DDPIndividualParameters(model)
# optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
# for x, y in batches:
#     loss = F.cross_entropy(ddp(x), y) / world_size
#     loss.backward()
#     ddp.finish_gradient_synchronization()
#     optimizer.step()
#     optimizer.zero_grad()
# ```
#
# **A bug report.** A first version, `FirstAttempt` below, registers a hook on every trainable
# parameter (3a) and all-reduces the gradient there. Its weights are right. Does the network
# carry the gradients while backward computes? The trace under it shows, for rank 0's first
# step on 4 ranks, when each all-reduce started and when its result was in `.grad`, against
# the span of `loss.backward()`. (Like the hidden tests, the trace holds a result back until
# the code asks for it.)

# %%
class FirstAttempt(nn.Module):
    """Section 1's sum over the ranks, one all-reduce per parameter, from a gradient hook."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        broadcast_parameters(module)  # every replica starts as rank 0's
        self._later = []  # the functions finish_gradient_synchronization() calls, in order
        for p in module.parameters():
            if p.requires_grad:  # a frozen parameter gets no gradient, and refuses a hook
                p.register_post_accumulate_grad_hook(self._gradient_ready)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _gradient_ready(self, param):
        """Autograd calls this during backward, the moment param.grad is complete."""
        dist.all_reduce(param.grad)

    def finish_gradient_synchronization(self):
        """After backward, before optimizer.step()."""
        for then in self._later:
            then()
        self._later.clear()


toy_batches = [(torch.randn(32, 16, generator=torch.Generator().manual_seed(step)),
                torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(100 + step)))
               for step in range(3)]


def train_wrapped(rank, world_size, wrap, batches, lr):
    """SGD with `wrap(model)` on this rank's shards. Per step: the weights, backward's span,
    and per all-reduce (elements, when it started, when its result was in the tensor)."""
    model = toy_model(seed=rank)  # every rank starts elsewhere: the wrapper must broadcast
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history, steps = [], []
    with watch_all_reduce(defer=True) as log:  # a result lands when the code asks for it
        ddp = wrap(model)
        for x, y in batches:
            if hasattr(ddp, "on_train_batch_start"):
                ddp.on_train_batch_start()
            log.clear()
            loss = F.cross_entropy(ddp(x.tensor_split(world_size)[rank]),
                                   y.tensor_split(world_size)[rank]) / world_size
            began = time.perf_counter()
            loss.backward()
            returned = time.perf_counter()
            ddp.finish_gradient_synchronization()
            optimizer.step()
            optimizer.zero_grad()
            history.append(flat_params(model))
            steps.append({"backward": (began, returned), "calls": [
                (c["numel"], c["start"], c["waited"] if c["async"] else c["end"])
                for c in log.calls]})
    return history, steps


def trace(steps, label):
    """Print one rank's first step: each all-reduce against backward's span."""
    began, returned = steps[0]["backward"]
    print(f"{label}, rank 0, step 1: backward from 0 to {(returned - began) * 1e3:.2f} ms")
    for numel, start, landed in steps[0]["calls"]:
        end = "never" if landed is None else f"at {(landed - began) * 1e3:5.2f} ms"
        print(f"  all-reduce of {numel:4d} elements: started at {(start - began) * 1e3:5.2f} "
              f"ms, result in the tensor {end}")


def timing(step):
    """(all-reduces, started during backward, in their tensors before backward returned,
    before the optimizer stepped) of one rank's step."""
    began, returned = step["backward"]
    calls = step["calls"]
    return (len(calls), sum(began <= s <= returned for _, s, _ in calls),
            sum(t is not None and t <= returned for *_, t in calls),
            sum(t is not None for *_, t in calls))


def check_wrapper(wrap, label, world_size=4, show=True):
    """Run train_wrapped on the ranks; trace rank 0's first step; compare with one process;
    return rank 0's all-reduce sizes of every step."""
    per_rank = run(train_wrapped, wrap, toy_batches, 0.5, world_size=world_size)
    if show:
        trace(per_rank[0][1], label)
    else:
        print(f"{label}, rank 0, step 1:")
    count, during, held, landed = timing(per_rank[0][1][0])
    print(f"  {count} all-reduces; started during backward: {during}; in their tensors before "
          f"backward returned: {held}; before the step: {landed}")
    for rank, (_, steps) in enumerate(per_rank):
        for step, record in enumerate(steps):
            count, during, held, landed = timing(record)
            where = f"rank {rank}, step {step + 1}"
            assert during == count, f"{where}: {count - during} all-reduce(s) started after " \
                                    "backward had returned: the network idled during backward"
            assert not held, f"{where}: backward returned only after {held} all-reduce " \
                             "result(s) were in their tensors: it waited for the network"
            assert landed == count, f"{where}: {count - landed} all-reduce result(s) never " \
                                    "reached their tensors before optimizer.step()"
    oracle = single_process(toy_model(seed=0), toy_batches, 0.5)
    for step, want in enumerate(oracle):
        gap = max((history[step] - want).abs().max().item() for history, _ in per_rank)
        assert gap < 1e-5, f"step {step + 1}: the weights differ from single-process SGD " \
                           f"by {gap:.1e}"
    return [[numel for numel, *_ in record["calls"]] for record in per_rank[0][1]]


per_rank = run(train_wrapped, FirstAttempt, toy_batches, 0.5, world_size=4)
trace(per_rank[0][1], "FirstAttempt")
count, during, held, landed = timing(per_rank[0][1][0])
print(f"  {count} all-reduces; started during backward: {during}; in their tensors before "
      f"backward returned: {held}; before the step: {landed}")
gap = max((history[-1] - single_process(toy_model(seed=0), toy_batches, 0.5)[-1]).abs().max()
          .item() for history, _ in per_rank)
print(f"weights after 3 steps, largest difference from one process on the whole batches: "
      f"{gap:.1e}")

# %% [markdown]
# **What must hold.** When `finish_gradient_synchronization()` returns, every trainable
# parameter's `.grad` holds what section 1's step gave it, on every rank; one all-reduce per
# trainable parameter tensor per step and no other collective; every one of them started
# during backward, and backward waiting for none of them: `loss.backward()` takes as long as
# its computing.
#
# Below, the wrapper again: the constructor, `forward` and the finish are `FirstAttempt`'s;
# the hook is yours, fixed.

# %% solution="DDPIndividualParameters"
class DDPIndividualParameters(nn.Module):
    """Data parallelism with one all-reduce per parameter, each overlapping the rest of
    backward."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        broadcast_parameters(module)
        self._later = []
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._gradient_ready)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _gradient_ready(self, param):
        """Autograd calls this during backward, the moment param.grad is complete."""
        self._later.append(dist.all_reduce(param.grad, async_op=True).wait)  # BLANK `self._later.append(dist.all_reduce(param.grad, async_op=True).wait)` the hook, fixed # ACCEPT `work = dist.all_reduce(param.grad, async_op=True); self._later.append(work.wait)` `work = dist.all_reduce(param.grad, async_op=True); self._later.append(lambda: work.wait())` `self._later.append(dist.all_reduce(param.grad, dist.ReduceOp.SUM, None, True).wait)` # REJECT `dist.all_reduce(param.grad)` `work = dist.all_reduce(param.grad, async_op=True); work.wait()` `dist.all_reduce(param.grad, async_op=True)` `work = dist.all_reduce(param.grad, async_op=True); self._later.append(work.wait())` `self._later.append(dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, async_op=True).wait)` `self._later.append(dist.all_reduce(param.grad.clone(), async_op=True).wait)` `self._later.append(dist.all_reduce(param, async_op=True).wait)` `self._later.append(lambda: dist.all_reduce(param.grad))`

    def finish_gradient_synchronization(self):
        """After backward, before optimizer.step()."""
        for then in self._later:
            then()
        self._later.clear()


# %% [markdown]
# The check: the same trace, and 3 steps of SGD on 4 ranks that start apart (`seed=rank`)
# against one process training rank 0's start on the whole batches. `toy_model` has a frozen
# weight and one weight shared by two layers.

# %%
calls = check_wrapper(DDPIndividualParameters, "DDPIndividualParameters")
trainable = [p.numel() for p in toy_model().parameters() if p.requires_grad]
print(f"toy_model's trainable parameters: {len(trainable)} tensors of {trainable} elements")
assert all(sorted(c) == sorted(trainable) for c in calls), "one all-reduce per trainable tensor"
print("✓ DDPIndividualParameters overlaps backward and trains like one process on the whole "
      "batch")
reveal("DDPIndividualParameters")

# %% tests="DDPIndividualParameters_tests" points=1
# Hidden tests (1 point): world sizes 1-4, random models starting apart on each rank, SGD
# and AdamW, against single-process training; and each rank's all-reduces: one per
# trainable parameter, started during backward, not waited for by backward, in .grad before
# the step, nothing else sent.
### BEGIN HIDDEN TESTS
# Rewritten to BLANKS.md (issue 50, round 6): a debug blank. FirstAttempt, shown with its
# trace, all-reduces in the hook with a blocking call (right weights, no overlap); the
# learner fixes the hook: start the all-reduce (async_op, 3a's API) and leave its wait for
# the given finish, which calls what the hooks appended to self._later (3c's finish too).
# The loss arrives scaled (a plain sum is right).
from autograder.grade_cell import grade
grade(DDPIndividualParameters)
### END HIDDEN TESTS

# %% [markdown] why="DDPIndividualParameters"
# **What the check showed.** Draw one step on a time axis:
#
# ```
#  backward:  [ last layer | middle layer | first layer ]
#  network:        [ its gradients ][ its gradients ][ its gradients ]--| finish
# ```
#
# The gradient a hook receives travels while backward computes the layers before it; only the
# last trip sticks out past the end of backward. This is **overlap** of communication and
# computation. `FirstAttempt`'s hook held backward up until its gradient had travelled, which
# stacks the rows end to end, as section 1 did; so would an asynchronous all-reduce waited for
# inside the hook. Starting the collective is the hook's job; waiting is the finish's.
#
# What the finish's `wait()` does depends on the backend. On gloo (here) it blocks the calling
# thread until the tensor holds the result. On NCCL it does not block the host: it makes the
# current CUDA stream wait for the collective's stream, so the kernels queued after it (the
# optimizer's) see the result, and the Python thread runs on at once.

# %% [markdown]
# ### 3c. Buckets
#
# **The problem.** Every all-reduce pays a fixed cost however small its tensor: notebook 02's
# $\alpha$, which it fitted at around 100 µs for gloo on 2 ranks over loopback TCP (tens of
# microseconds for a small NCCL all-reduce over NVLink or InfiniBand). A model has hundreds of parameter tensors, many tiny
# (biases, norms). So this wrapper sends **one all-reduce per bucket** of gradients:
#
# * **The buckets** (`fill_buckets`, which the constructor calls with the trainable
#   parameters in `model.parameters()` order and the cap in bytes): every trainable parameter
#   in exactly one bucket, each bucket's all-reduce able to go **as early as backward allows**,
#   **as few buckets as possible**, and **no bucket larger than it needs to be** to hold at
#   least `cap_bytes` (the one filled last may hold less). Every rank derives its buckets from
#   the same model by the same rule: the $k$-th all-reduce of one rank meets the $k$-th of
#   every other.
# * **Yours:** `fill_buckets`' body, and the gradient hook's body after its first two lines.
#   The hooks keep whatever they need during one step in the dict `self._step`, which
#   `on_train_batch_start()` (called by the training loop before each forward) empties.
# * **Given:** the rest of the constructor (`self._bucket_of[p]`: the index of `p`'s bucket in
#   `self.buckets`), the hook registration, and 3b's finish: it calls, in order, the
#   functions the hooks appended to `self._later`. The loop is 3b's: the gradients arrive
#   already scaled.
# * **What must hold:** as in 3b, every trainable `.grad` holds what section 1's step gave it
#   when `finish_gradient_synchronization()` returns.
# * **Budget, per step:** exactly one all-reduce per bucket, of the bucket's total number of
#   elements, and no other collective; each **started during backward, as early as the
#   bucket's gradients allow**; backward never waits for the network.
#
# **API**, on other tensors: joining and cutting 1-D tensors, a 2-D tensor's values in 1-D,
# and overwriting a tensor in place.

# %%
a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([7.0, 8.0])
joined = torch.cat((b, a))
second, first = joined.split([b.numel(), a.numel()])  # consecutive pieces of these lengths
print("a 2-D tensor in 1-D:", torch.arange(6.0).view(2, 3).reshape(-1).tolist())
print("joined:", joined.tolist(), "| first:", first.tolist())
target = torch.zeros(2)
target.copy_(second * 10)  # overwrite in place, keeping the tensor (and who holds it)
print("target after copy_:", target.tolist())

# %% [markdown]
# **Predict first**, before you write the wrapper. The model is a 256-1024-1024-1024-10 MLP
# (`mlp`: four `nn.Linear` layers with weight and bias each, float32), trained with 2 MiB
# buckets by a wrapper that follows the rules above. How many all-reduces does it make in one
# step, of how many elements each, in the order they start? Write the element counts as
# arithmetic on the layer sizes: no calls and no names from outside the function (the grader
# reads the numbers).

# %% solution="predicted_all_reduces"
def predicted_all_reduces():
    """Your prediction: the element counts of the all-reduces of one step, in the order they
    start."""
    return [10 + 1024 * 10 + 1024 + 1024 * 1024, 1024 + 1024 * 1024, 1024 + 256 * 1024]  # BLANK your prediction # ACCEPT `[1059850, 1049600, 263168]` # REJECT `[263168, 1049600, 1059850]` `[1059850, 1049600]` `[10 + 1024 * 10 + 1024 + 1024 * 1024, 1024 + 1024 * 1024 + 1024 + 256 * 1024]` `[10, 10240, 1024, 1048576, 1024, 1048576, 1024, 262144]` `[262144 + 1024 + 1048576, 1024 + 1048576 + 1024, 10240 + 10]`


# %%
print(f"your prediction: {len(predicted_all_reduces())} all-reduces of "
      f"{predicted_all_reduces()} elements")
print("(checked against a run of your DDPBucketed on this model, after 3c's check)")

# %% tests="predicted_all_reduces_tests" points=1
# Hidden tests (1 point): the prediction against the bucket rule of 3c on this model.
### BEGIN HIDDEN TESTS
# Issue 50 round 5: the bucket rule asked first as a prediction, before the wrapper exists;
# the prediction must be numbers (no calls, no outside names). Round 6: the visible check no
# longer compares a hash of the answer (256 contiguous groupings brute-force it): after 3c's
# check it compares the prediction with what the learner's own DDPBucketed all-reduced on
# this model, and says ✓ or ✗ without the sizes.
from autograder.grade_cell import grade
grade(predicted_all_reduces)
### END HIDDEN TESTS


# %% solution="DDPBucketed"
class DDPBucketed(nn.Module):
    """Data parallelism with gradients all-reduced in buckets of about `bucket_size_mb` MiB,
    each overlapping the rest of backward."""

    def __init__(self, module, bucket_size_mb):
        super().__init__()
        self.module = module
        broadcast_parameters(module)
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = self.fill_buckets(params, bucket_size_mb * 2**20)
        self._bucket_of = {p: index for index, b in enumerate(self.buckets) for p in b}
        for p in params:
            p.register_post_accumulate_grad_hook(self._gradient_arrived)
        self.on_train_batch_start()

    @staticmethod
    def fill_buckets(params, cap_bytes):
        """The buckets (lists of parameters, together each of `params` once) for a cap of
        `cap_bytes` bytes."""
        buckets = []; [buckets[-1].append(p) if buckets and sum(q.numel() * q.element_size() for q in buckets[-1]) < cap_bytes else buckets.append([p]) for p in reversed(params)]; return buckets  # BLANK `buckets = []; [buckets[-1].append(p) if buckets and sum(q.numel() * q.element_size() for q in buckets[-1]) < cap_bytes else buckets.append([p]) for p in reversed(params)]; return buckets` # ACCEPT `buckets = []; [buckets[-1].append(p) if buckets and not sum(q.numel() * q.element_size() for q in buckets[-1]) >= cap_bytes else buckets.append([p]) for p in params[::-1]]; return buckets` # REJECT `buckets = []; [buckets[-1].append(p) if buckets and sum(q.numel() * q.element_size() for q in buckets[-1]) < cap_bytes else buckets.append([p]) for p in params]; return buckets` `buckets = []; [buckets[-1].append(p) if buckets and sum(q.numel() * q.element_size() for q in buckets[-1]) <= cap_bytes else buckets.append([p]) for p in reversed(params)]; return buckets` `buckets = []; [buckets[-1].append(p) if buckets and sum(q.numel() * q.element_size() for q in buckets[-1] + [p]) < cap_bytes else buckets.append([p]) for p in reversed(params)]; return buckets` `return [[p] for p in reversed(params)]` `return [list(reversed(params))]`

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def on_train_batch_start(self):
        """Before each step's forward: what the hooks and the finish keep during one step,
        forgotten."""
        self._step, self._later = {}, []

    def _gradient_arrived(self, param):
        """Autograd calls it once `param.grad` holds this step's whole gradient."""
        index = self._bucket_of[param]
        bucket = self.buckets[index]
        if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])  # BLANK `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` # ACCEPT `if self._step.setdefault(index, []).append(param) or len(self._step[index]) >= len(bucket): flat = torch.cat([p.grad.view(-1) for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: (work.wait(), [p.grad.copy_(piece.reshape(p.grad.shape)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)]))` # REJECT `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == 1: flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=False); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(bucket, flat.split([q.numel() for q in bucket]), strict=True)])` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: work.wait())` `if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket): flat = torch.cat([p.grad.flatten() for p in bucket]); work = dist.all_reduce(flat, async_op=True); self._later.append(lambda: [work.wait()] + [p.grad.copy_(piece.view_as(p.grad)) for p, piece in zip(reversed(bucket), flat.split([q.numel() for q in reversed(bucket)]), strict=True)])`

    def finish_gradient_synchronization(self):
        """After backward, before optimizer.step()."""
        for then in self._later:
            then()
        self._later.clear()


# %% [markdown]
# The same check, for three bucket sizes: smaller than any parameter, 2 KiB, and larger than
# the whole model. The sizes printed are the all-reduces of one step, in the order they
# started.

# %%
for mb in (1e-6, 2e-3, 100):
    calls = check_wrapper(functools.partial(DDPBucketed, bucket_size_mb=mb),
                          f"DDPBucketed, bucket_size_mb={mb:g}", show=False)
    print(f"  sizes, in the order they started: {calls[0]} elements")
    assert sum(calls[0]) == sum(trainable), "every trainable gradient, once"
assert len(calls[0]) == 1, "a bucket larger than the model: one all-reduce per step"
print("✓ DDPBucketed overlaps backward and trains like one process, for any bucket size")
reveal("DDPBucketed")

# %% tests="DDPBucketed_tests" points=2
# Hidden tests (2 points): world sizes 1-4, random models starting apart on each rank,
# random bucket sizes, SGD and AdamW, against single-process training; and each rank's
# all-reduces: one per bucket of the rule above, of its size, started during backward, not
# waited for by backward, in .grad before the step, nothing else sent.
### BEGIN HIDDEN TESTS
# Rewritten to BLANKS.md (issue 50, rounds 4-5): fill_buckets' whole body (order and close,
# from the goal and the budget) and the hook's body (how a bucket knows it is complete, one
# tensor, asynchronous, and what the finish must do with it: wait, copy back) are asked; the
# step's state is the learner's own (an empty dict); the finish is 3b's, given. Graded on the
# bucket boundaries first.
from autograder.grade_cell import grade
grade(DDPBucketed)
### END HIDDEN TESTS

# %% [markdown] why="DDPBucketed"
# **What the check showed.** The rule: parameters from the last to the first, and a bucket
# closes as soon as it holds at least `bucket_size_mb` MiB, with the parameter that reached
# it inside, so no bucket is bigger than it needs to be. A bucket knows it is complete when
# the hooks of all its parameters have fired in this step (a count, or the set of
# arrivals). Backward completes the gradients from the last layer to the first (3a), so a
# bucket of gradients that become complete one after another goes while backward still
# works on earlier layers; a bucket that mixed the first and the last layers would wait for
# the end of backward. A bucket costs one $\alpha$, not one per tensor. Its message is a
# separate tensor, so the result must get back to where the optimizer reads it: the function
# your hook leaves for the finish does that, after the wait, piece by piece in the bucket's
# order. Section 1's scaling is in the loss, so a plain sum is right; PyTorch's DDP instead
# averages (`ReduceOp.AVG`, or a division by the world size), for a loss that is each rank's
# own mean. (PyTorch's DDP can avoid
# those copies: with
# `gradient_as_bucket_view=True`, not its default, the `.grad`s are views into the buckets.)
#
# A trainable parameter that gets no gradient in some step (a branch forward did not take)
# would keep its bucket from ever going: a rank that did use it launches the all-reduce, one
# that did not never joins, and the ranks wait until the process group's timeout
# and fail. Every model here uses all its trainable
# parameters.
#
# **PyTorch's DDP** (its `Reducer`, torch 2.13) buckets by a size cap too, with differences,
# so the row "torch DDP, 2 MiB" below does not use your buckets. It groups gradients by dtype
# and device. Its cap is `bucket_cap_mb` (25 MiB by default), and with the default the first
# bucket (the first gradients ready) is capped at 1 MiB (`dist._DEFAULT_FIRST_BUCKET_BYTES`),
# so that communication starts early. It does not assume the order: in the first iteration it
# uses buckets assigned in the order the parameters are defined, records the order in which the
# gradients actually became ready, and rebuilds the buckets in that order afterwards (rank 0's
# order, sent to every rank, so that all agree; with `static_graph=True` or unused parameters
# the details differ). And with
# `find_unused_parameters=True` it walks the autograd graph after every forward and marks the
# parameters forward did not use as ready, so their buckets still go; without it, an unused
# parameter makes DDP raise at the next forward ("Expected to have finished reduction in the
# prior iteration ...").

# %% [markdown]
# Your prediction against your wrapper: one step of your `DDPBucketed`, 2 MiB buckets, on the
# model of the prediction, on 2 ranks; rank 0's all-reduces in the order they started.

# %%
TIMELINE_SIZES = (256, 1024, 1024, 1024, 10)  # the prediction's model (and 3d's)


def one_step_sizes(rank, world_size, sizes, bucket_size_mb):
    """The sizes of the all-reduces of one DDPBucketed step, in the order they started."""
    ddp = DDPBucketed(mlp(sizes, seed=0), bucket_size_mb=bucket_size_mb)
    x = torch.randn(8, sizes[0], generator=torch.Generator().manual_seed(rank))
    y = torch.randint(0, sizes[-1], (8,), generator=torch.Generator().manual_seed(rank))
    with watch_all_reduce() as log:
        ddp.on_train_batch_start()
        F.cross_entropy(ddp(x), y).backward()
        ddp.finish_gradient_synchronization()
    return log.numels()


recorded = run(one_step_sizes, TIMELINE_SIZES, 2, world_size=2)[0]
if predicted_all_reduces.__code__.co_names:
    print("✗ the prediction uses " + ", ".join(predicted_all_reduces.__code__.co_names)
          + ": write numbers and arithmetic only, from 3c's rules")
elif [int(v) for v in predicted_all_reduces()] == recorded:
    print(f"✓ your prediction is what your wrapper did: {len(recorded)} all-reduces of "
          f"{recorded} elements")
    reveal("predicted_all_reduces")
else:
    print("✗ your prediction and your wrapper's run differ: at least one of them does not "
          "follow 3c's rules. Work the rules through by hand on this model, layer by layer")

# %% [markdown] why="predicted_all_reduces"
# **The prediction.** Backward completes the output layer first (3a), so the first bucket
# takes its bias and weight (10 and 1024·10 elements), then the third layer's bias and weight
# (1024 and 1024·1024): with that last weight it holds at least 2 MiB (524,288 float32
# elements), so it closes. The next takes the second layer's bias and weight and closes the
# same way; the last holds what remains (the first layer: 1024 + 256·1024), less than the cap.
# Three all-reduces: the first two can start while backward is still computing the first
# layers; only the last has to wait for the end of backward. (3d draws a step of this model on a
# time axis, with 5 MiB buckets.)

# %% [markdown]
# ### 3d. Watching the overlap
#
# The timeline below is one training step of the prediction's model (`mlp(TIMELINE_SIZES)`:
# 256-1024-1024-1024-10, float32) on 2 ranks, with your `DDPBucketed` and 5 MiB buckets. Look
# at which all-reduces run while backward is still computing, and what is left after it.
#
# The run: per rank the backward (blue), then the wait in `finish_gradient_synchronization`
# (grey), and below them each bucket's all-reduce, from the moment its hook started it to the
# moment it finished (real `time.perf_counter()` timestamps).

# %%
def timed_step(rank, world_size, wrap, sizes=None, steps=4):
    """A few training steps with wrap(model) (default: the timeline's model); timestamps of the
    last one, and the times of every step."""
    sizes = sizes or TIMELINE_SIZES
    model = mlp(sizes, seed=0)
    ddp = wrap(model)
    x = torch.randn(128, sizes[0], generator=torch.Generator().manual_seed(rank))
    y = torch.randint(0, sizes[-1], (128,), generator=torch.Generator().manual_seed(rank))
    step_times = []
    for _ in range(steps):
        with watch_all_reduce() as log:
            dist.barrier()  # start together
            t_start = time.perf_counter()
            if hasattr(ddp, "on_train_batch_start"):
                ddp.on_train_batch_start()
            loss = F.cross_entropy(ddp(x), y)
            t0 = time.perf_counter()
            loss.backward()
            t1 = time.perf_counter()
            if hasattr(ddp, "finish_gradient_synchronization"):
                ddp.finish_gradient_synchronization()
            t2 = time.perf_counter()
        model.zero_grad()
        step_times.append(t2 - t_start)
    return {"backward": (t0, t1), "wait": (t1, t2), "all_reduces": log.spans(),
            "numels": log.numels(), "step_times": step_times}


records = run(timed_step, functools.partial(DDPBucketed, bucket_size_mb=5), world_size=2)
show_timeline(records, "one step of DDPBucketed, 5 MiB buckets")
for rank, record in enumerate(records):
    print(f"rank {rank}: {overlap_fraction(record):.0%} of the all-reduces' time during "
          "backward")


# %% [markdown]
# An all-reduce finishes
# only once every rank has started it, so a rank whose backward ran ahead waits for the slower
# one. (The ranks share the machine's cores with gloo's communication threads, so the bars
# stretch when they overlap. On GPUs overlap is not free either: NCCL's kernels run on the same
# SMs and use the same memory bandwidth as backward's kernels, so overlapped communication
# slows compute down somewhat. It still costs less than waiting.)
#
# **Do buckets pay?** The step time (median of the last 3 of 4 steps, 2 ranks) of your two
# wrappers next to PyTorch's DDP, on the timeline's model (8 parameter tensors) and on an MLP of 40 hidden layers of 64 and a 64→10 output layer (82 parameter tensors of at most 16 KiB: many
# small ones). Before it, the two costs buckets trade, measured on 2 ranks: the fixed cost of one
# all-reduce (of one element), and the cost of copying the timeline model's 9 MiB of gradients
# once.

# %%
def two_costs(rank, world_size, repeats=20):
    """Median ms of an all-reduce of one element, and of one copy of as many elements as
    the timeline model's gradients."""
    one, latency = torch.ones(1), []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(one)
        latency.append(time.perf_counter() - start)
    elements = sum(p.numel() for p in mlp(TIMELINE_SIZES).parameters())
    grads, flat, copies = torch.randn(elements), torch.empty(elements), []
    for _ in range(repeats):
        start = time.perf_counter()
        flat.copy_(grads)
        copies.append(time.perf_counter() - start)
    return statistics.median(latency) * 1e3, statistics.median(copies) * 1e3


latency_ms, copy_ms = run(two_costs, world_size=2)[0]
print(f"one all-reduce of 1 element: {latency_ms:.2f} ms; one copy of 9 MiB: {copy_ms:.1f} ms")
MANY_SMALL = (64,) * 41 + (10,)  # 40 hidden layers of 64: 82 parameter tensors
wrappers = {"DDPIndividualParameters": DDPIndividualParameters,
            "DDPBucketed, 2 MiB": functools.partial(DDPBucketed, bucket_size_mb=2),
            "torch DDP, 2 MiB": functools.partial(DDP, bucket_cap_mb=2)}
for sizes, what in ((TIMELINE_SIZES, "timeline model, 8 tensors"),
                    (MANY_SMALL, f"{len(MANY_SMALL) - 2} hidden layers of 64, "
                                 f"{2 * (len(MANY_SMALL) - 1)} tensors")):
    for label, wrap in wrappers.items():
        record = run(timed_step, wrap, sizes, world_size=2)[0]
        print(f"{what:>28} | {label:>24}: "
              f"{statistics.median(record['step_times'][1:]) * 1e3:6.1f} ms per step")

# %% [markdown]
# On the timeline's model buckets have little to win: it has 8 tensors, so a bucket
# saves a handful of fixed costs (the first number above, a fraction of a millisecond each),
# while it copies every gradient (the second number is one copy of all of them) on the same
# few cores that run backward and gloo, and the all-reduces start later than one per
# parameter would: on 2 shared
# cores the rows can come out either way from run to run. Compare PyTorch's DDP, which also
# copies into buckets, in the same rows. On the model of many small
# tensors the fixed cost is paid once per tensor without buckets: look whether the buckets win
# there, and by how much in this run (on a loaded machine the ratio moves from run to run).
# Buckets amortise the per-call cost where there are many calls to amortise. On GPUs the copies
# run at the GPU's memory bandwidth, and real models have hundreds of small tensors, which is
# why DDP buckets by default.

# %% [markdown]
# ## 4. Gradient accumulation and `no_sync`
#
# A batch too big for memory can still be used: run it as several **micro-batches**, backward
# each one (gradients **accumulate** in `.grad`: they add up), and step the optimizer once.
#
# **The problem.** One optimizer step of a DDP-wrapped model from a list of micro-batches,
# equal to one step on all of them at once (`F.cross_entropy`'s mean loss over all the samples
# of all the ranks). The micro-batches of a rank need not be of equal size (the check uses 10,
# 10 and 12 samples); every rank's add up to the same number. **Budget:** the gradients cross
# the network once per step: one backward's worth of DDP's bucket all-reduces, not one per
# micro-batch.
#
# **API.** `ddp_model.no_sync()` is a context manager. A forward and its backward run inside
# it make no all-reduces (DDP decides at forward whether the next backward communicates) and
# leave the gradients in `.grad`, added to what was there; a forward and backward run outside
# it make DDP's all-reduces of whatever `.grad` holds, and DDP divides by the number of ranks.
# On another loop (not this function's shape):
#
# ```python
# with ddp_model.no_sync():
#     for x, y in warmup_batches:
#         ddp_model(x).sum().backward()   # no communication
# ```

# %% solution="accumulated_step" drill
def accumulated_step(model, optimizer, micro_batches):
    """One optimizer step of DDP-wrapped `model` from the micro-batches [(x, y), ...], equal to
    one step on all of them at once; the gradients cross the network once."""
    optimizer.zero_grad()
    for x, y in micro_batches:
        with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): (F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)).backward()  # BLANK `with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): (F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)).backward()` this micro-batch's forward and backward # ACCEPT `with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): (F.cross_entropy(model(x), y) * len(y) / sum(len(t) for _, t in micro_batches)).backward()` # REJECT `with torch.enable_grad(): (F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)).backward()` `with model.no_sync() if y is not micro_batches[0][1] else torch.enable_grad(): (F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)).backward()` `with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): (F.cross_entropy(model(x), y) / len(micro_batches)).backward()` `with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): F.cross_entropy(model(x), y).backward()` `with model.no_sync(): (F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)).backward()` `with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): (F.cross_entropy(model(x), y, reduction="sum") / len(y)).backward()`
    optimizer.step()


# %% [markdown]
# The check, on 2 ranks: 3 steps of SGD with micro-batches of 10, 10 and 12 samples per rank,
# next to 3 steps with one batch of 32 per rank (the same samples) and one process on all 64.
# It counts the bucket all-reduces DDP makes per step. Then the equivalence, on the first 32
# samples of each batch: 2 ranks with 2 micro-batches of 8 each, and 4 ranks with 1 each.

# %%
def accumulation_on_ranks(rank, world_size, batches, sizes):
    """SGD steps with accumulated_step, micro-batches of these sizes per rank per step."""
    net = mlp((784, 64, 10), seed=0)
    ddp = DDP(net)
    calls = count_bucket_all_reduces(ddp)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    per_step = []
    for x, y in batches:
        shard = list(zip(x.tensor_split(world_size)[rank].split(sizes),
                         y.tensor_split(world_size)[rank].split(sizes), strict=True))
        before = len(calls)
        accumulated_step(ddp, optimizer, shard)
        per_step.append(len(calls) - before)
    return flat_params(net), per_step


even_batches = [(x[:64], y[:64]) for x, y in global_batches]  # 64 samples: equal shards
oracle = single_process(mlp((784, 64, 10), seed=0), even_batches, 0.1)[-1]
for sizes in ([10, 10, 12], [32]):
    (weights, per_step), _ = run(accumulation_on_ranks, even_batches, sizes, world_size=2)
    gap = (weights - oracle).abs().max().item()
    print(f"2 ranks x micro-batches of {sizes}: {per_step} bucket all-reduces per step; "
          f"largest difference from one process on all 64: {gap:.1e}")
    assert gap < 1e-5, f"micro-batches of {sizes}: the weights are not one process's on all 64"
    assert per_step == [1, 1, 1], f"{sizes}: expected one bucket all-reduce per step"
small_batches = [(x[:32], y[:32]) for x, y in even_batches]
oracle = single_process(mlp((784, 64, 10), seed=0), small_batches, 0.1)[-1]
for world_size, sizes in ((2, [8, 8]), (4, [8])):
    weights, _ = run(accumulation_on_ranks, small_batches, sizes, world_size=world_size)[0]
    gap = (weights - oracle).abs().max().item()
    print(f"{world_size} ranks x {len(sizes)} micro-batch(es) of 8: largest difference from one "
          f"process on the 32: {gap:.1e}")
    assert gap < 1e-5, f"{world_size} ranks x {sizes}: not one process's weights"
print("✓ the micro-batches of a step are one batch of all their samples, with one all-reduce "
      "per step")
reveal("accumulated_step")

# %% tests="accumulated_step_tests" points=1
# Hidden tests (1 point): world sizes 1-4, 1-4 micro-batches of unequal sizes, SGD and AdamW,
# against one
# process on all the samples of a step; and the all-reduces DDP makes per step, counted.
### BEGIN HIDDEN TESTS
# For instructors: seed 002's accumulation loop divides every loss by accumulation_steps,
# also in its last, incomplete group (too small a gradient there); here each micro-batch's
# share is its samples over the step's (micro-batches of unequal sizes: 1/k fails). no_sync is
# new (the seed only says "accumulate"). Issue 50 round 5: the loop is `for x, y in
# micro_batches` (no k, no index): which backward communicates (the last) and the loss's share
# (section 1's idea, transferred from ranks to micro-batches) are the blank.
from autograder.grade_cell import grade
grade(accumulated_step)
### END HIDDEN TESTS

# %% [markdown] why="accumulated_step"
# **What the check showed.** All-reducing a sum of local gradients gives the same result as
# summing all-reduced ones, so one all-reduce of the accumulated `.grad` is enough, provided
# it happens once every micro-batch has added its part: the last backward runs outside
# `no_sync()` (an `if` and an `else`, or a conditional `with` whose other branch changes
# nothing: `contextlib.nullcontext()`, or `torch.enable_grad()` in a training step).
# An all-reduce any earlier would send only part of the sum. Each micro-batch's mean loss is
# weighted by its share of the rank's samples, $b_i / \sum_j b_j$, section 1's $B_r/M$ again;
# with equal micro-batches that is $1/k$.
#
# Data parallelism and gradient accumulation are the same computation when the number of
# ranks equals the number of micro-batches: both take the gradient of the mean loss over the
# big batch; data parallelism splits it across devices, accumulation across time.
#
# A common accumulation loop steps after every `accumulation_steps` micro-batches, and at the
# end of an epoch also on a last, incomplete group, with the same scaling as a full group: ask
# yourself how that group's gradient compares with the mean over its samples. The function
# above gets exactly the micro-batches of one step.

# %% [markdown]
# ## 5. Asynchronous SGD with a parameter server
#
# Synchronous SGD moves at the pace of the slowest rank: every all-reduce waits for everyone.
# Asynchronous SGD (Downpour SGD, Dean et al., "Large Scale Distributed Deep Networks",
# NIPS 2012; parameter servers: Li et al., OSDI 2014) drops the waiting. A **parameter
# server** holds the global weights; each worker, on its own schedule, **pulls** the current
# weights, computes a gradient on its data, and **pushes** it; the server applies each gradient
# as it arrives. No worker waits for another. (Dean et al.'s servers applied Adagrad, and their
# workers fetched every $n_\text{fetch}$ steps and pushed every $n_\text{push}$ steps; the
# server here does the plainest version, $w \leftarrow w - \eta\, g$, and a worker pulls and
# pushes once per gradient.)
#
# The price is **staleness**. Count the server's updates with a version number: the weights
# after $t$ updates are version $t$. A worker that pulled version $v$ pushes a gradient of
# version-$v$ weights, and by the time it arrives the server may be at version $t > v$: the
# gradient is $\tau = t - v$ updates old, and it is applied to weights it was not computed on.
# With 2 workers A and B:
#
# | event | server version before | staleness of the push |
# | --- | --- | --- |
# | A pulls | 0 | |
# | B pulls | 0 | |
# | A pushes | 0 | 0 |
# | A pulls | 1 | |
# | B pushes | 1 | 1 (computed on version 0) |
# | A pushes | 2 | 1 (computed on version 1) |
#
# **The problem.** The server below, in one process: `pull()` hands a worker the weights (a
# 1-D tensor) and their version; the worker computes its gradient on what it was handed, while
# other workers push; `push()` applies a gradient and records its staleness (given).
# "Without waiting" means without waiting for the other workers: a push still applies its
# update (under the server's lock, with threads) before it returns.
#
# **A bug report.** A first server, whose `pull` is `return self.params, self.version`, was
# replayed on the table above, on $f(w) = \frac{1}{2} w^2$ (gradient $w$) from $w = 1$ with
# $\eta = 0.5$. By hand: A's first gradient is $1$ (computed on version 0), so $w = 0.5$; B's,
# computed on version 0 too, is $1$: $w = 0$; A's second, computed on version 1, is $0.5$:
# $w = -0.25$. (One process running SGD without staleness would be at $0.125$.) The replay:

# %%
def replay(server):
    """The table's events on `server`; prints what each push was computed on."""
    pulled = {}
    for event, worker in [("pull", "A"), ("pull", "B"), ("push", "A"), ("pull", "A"),
                          ("push", "B"), ("push", "A")]:
        if event == "pull":
            pulled[worker] = server.pull()
        else:
            weights, version = pulled[worker]
            print(f"{worker} pushes the gradient of w = {weights.item():g}, which it pulled as "
                  f"version {version}")
            server.push(1.0 * weights, version)  # the gradient of w^2 / 2 is w
    print(f"staleness {server.staleness}, w = {server.params.item():g} after version "
          f"{server.version}")
    return server


class FirstServer:
    def __init__(self, params, lr):
        self.params, self.lr, self.version, self.staleness = params, lr, 0, []

    def pull(self):
        return self.params, self.version

    def push(self, grad, version):
        self.staleness.append(self.version - version)
        self.params -= self.lr * grad
        self.version += 1
        return self.staleness[-1]


_ = replay(FirstServer(torch.tensor([1.0]), lr=0.5))

# %% [markdown]
# Below, the server again: `push` is given; `pull` is yours, fixed.

# %% solution="ParameterServer"
class ParameterServer:
    """The global weights of asynchronous SGD: workers pull them and push gradients; every
    gradient is applied the moment it arrives."""

    def __init__(self, params, lr):
        self.params = params  # a 1-D tensor, the server's from now on
        self.lr = lr
        self.version = 0  # updates applied so far
        self.staleness = []  # of every push, in arrival order

    def pull(self):
        """(weights, version) for a worker to compute its next gradient on."""
        return self.params.clone(), self.version  # BLANK `self.params.clone(), self.version` the fixed line # ACCEPT `self.params.detach().clone(), self.version` `torch.clone(self.params), self.version` `self.params + 0, self.version` # REJECT `self.params, self.version` `self.params.detach(), self.version` `self.params.view(-1), self.version` `self.params.clone(), self.version + 1`

    def push(self, grad, version):
        """Apply a gradient computed on the weights of `version`; return its staleness."""
        staleness = self.version - version  # updates applied since that pull
        self.params -= self.lr * grad
        self.version += 1
        self.staleness.append(staleness)
        return staleness


# %% [markdown]
# The check: the same replay on your server.

# %%
server = replay(ParameterServer(torch.tensor([1.0]), lr=0.5))
assert server.staleness == [0, 1, 1] and server.version == 3
assert abs(server.params.item() + 0.25) < 1e-12, server.params
print("✓ the server applies each gradient on arrival and knows how stale it is")
reveal("ParameterServer")

# %% tests="ParameterServer_tests" points=1
# Hidden tests (1 point): 1-4 workers, random arrival orders, gradients computed while
# others push, against a replay of the same order.
### BEGIN HIDDEN TESTS
# The update `self.params -= self.lr * grad` (plain SGD, shown in the text) is given.
# For instructors: seed 003 §20's threads become a deterministic replay (graded) and real
# ranks (the demo below). Its push is not "without waiting" (it applies the update under the
# lock before returning), and it has no staleness: versions and staleness are added here.
# Issue 50 round 2: a debug blank: the replay of a server whose pull returns its own tensor
# is shown; the learner fixes the line. The staleness is given.
from autograder.grade_cell import grade
grade(ParameterServer)
### END HIDDEN TESTS

# %% [markdown] why="ParameterServer"
# **What the check showed.** A worker keeps what it pulled while it computes. `-=` updates the
# server's tensor in place, so whatever a pull hands out must not move with it; otherwise a
# worker's gradient is of weights it never pulled. Over a network this is automatic (the bytes
# sent are the weights at that moment); in one process, with threads, it is not.

# %% [markdown]
# ### On real ranks
#
# Rank 0 runs your server; ranks $1..W$ are workers that pull (a request, then the weights
# and their version come back), compute a gradient on a mini-batch of their shard of a
# least-squares problem ($f(w) = \frac{1}{2m}\|Aw - b\|^2$), and push it. The server answers
# whoever comes first: `dist.recv(buf)` without `src` receives from any rank and returns which.
# The synchronous runs use the same data and learning rate; as section 1 showed, one
# synchronous update with $W$ workers is SGD on their $W$ mini-batches together, so they run
# in this process. The plots count **updates** of the model: one per push for the asynchronous
# server, one per round for synchronous SGD; one plot per learning rate, 0.3 and 0.7.

# %%
PULL = 0.0  # the first number of a worker's message: what it wants
PUSH = 1.0


def least_squares(m=512, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(m, d, generator=g, dtype=torch.float64) * torch.linspace(0.2, 1.0, d,
                                                                           dtype=torch.float64)
    return A, A @ torch.randn(d, generator=g, dtype=torch.float64)


def ls_loss(A, b, w):
    return 0.5 * ((A @ w - b) ** 2).mean().item()


def ls_grad(A, b, w, rows):
    return A[rows].T @ (A[rows] @ w - b[rows]) / len(rows)


def async_sgd(rank, world_size, problem, updates, lr, batch=16):
    """Rank 0: the parameter server; ranks 1..: workers (updates // workers pushes each)."""
    A, b = problem
    workers, d = world_size - 1, A.shape[1]
    if rank == 0:
        server = ParameterServer(torch.zeros(d, dtype=torch.float64), lr)
        losses = [ls_loss(A, b, server.params)]
        message = torch.empty(d + 2, dtype=torch.float64)
        for _ in range(2 * workers * (updates // workers)):
            src = dist.recv(message)  # from whichever worker comes first
            if message[0] == PULL:
                weights, version = server.pull()
                dist.send(torch.cat([torch.tensor([float(version)], dtype=torch.float64),
                                     weights]), dst=src)
            else:
                server.push(message[2:].clone(), int(message[1]))
                losses.append(ls_loss(A, b, server.params))
        return losses, server.staleness
    shard = torch.arange(rank - 1, len(b), workers)
    g = torch.Generator().manual_seed(rank)
    reply = torch.empty(d + 1, dtype=torch.float64)
    for _ in range(updates // workers):
        dist.send(torch.full((d + 2,), PULL, dtype=torch.float64), dst=0)
        dist.recv(reply, src=0)
        rows = shard[torch.randint(len(shard), (batch,), generator=g)]
        time.sleep(0.0005 * rank)  # workers of different speeds
        grad = ls_grad(A, b, reply[1:], rows)
        dist.send(torch.cat([torch.tensor([PUSH, reply[0].item()], dtype=torch.float64), grad]),
                  dst=0)
    return None


def sync_sgd(workers, problem, updates, lr, batch=16):
    """Synchronous SGD with `workers` workers, in one process: as section 1 showed, one update
    is SGD on all the workers' mini-batches together (worker r draws from rows r, r + W, ...)."""
    A, b = problem
    w = torch.zeros(A.shape[1], dtype=torch.float64)
    shards = [torch.arange(r, len(b), workers) for r in range(workers)]
    generators = [torch.Generator().manual_seed(r + 1) for r in range(workers)]
    losses = [ls_loss(A, b, w)]
    for _ in range(updates):
        rows = torch.cat([shard[torch.randint(len(shard), (batch,), generator=g)]
                          for shard, g in zip(shards, generators, strict=True)])
        w -= lr * ls_grad(A, b, w, rows)
        losses.append(ls_loss(A, b, w))
    return losses


problem, rates, worker_counts = least_squares(), (0.3, 0.7), (1, 2, 4)
results = {}
for workers in worker_counts:
    for lr in rates:
        results[lr, "sync", workers] = sync_sgd(workers, problem, 120, lr)
        results[lr, "async", workers] = run(async_sgd, problem, 120, lr,
                                            world_size=workers + 1)[0]  # the server is a rank
for lr in rates:
    curves = {}
    for workers in worker_counts:
        curves[f"sync, {workers} worker(s)"] = results[lr, "sync", workers]
        losses, staleness = results[lr, "async", workers]
        curves[f"async, {workers} worker(s)"] = losses
        print(f"learning rate {lr}, async, {workers} worker(s): staleness mean "
              f"{statistics.mean(staleness):.2f}, max {max(staleness)}")
    show_loss_curves(curves, title=f"least squares, learning rate {lr}")

# %% [markdown]
# With one worker there is no staleness, and asynchronous SGD is plain SGD. With more
# workers, synchronous SGD averages more gradients per update (the same curve, a little less
# noise), while the asynchronous server applies each worker's gradient alone, on weights that
# moved since it was computed: $W - 1$ updates stale if the $W$ workers took strict turns, less
# on average here (the run printed the means: workers of different speeds do not take turns),
# and more for an unlucky push (the maxima). Look at the larger learning rate, which
# synchronous SGD takes in its stride: whether 4 workers' stale gradients overshoot there and
# the loss climbs instead of falling, or only falls more slowly, depends on the arrival order
# of this run (the curves change from run to run). Asynchronous SGD buys throughput (nobody waits) with
# staleness, and staleness is paid back with a smaller learning rate; this, and the simplicity
# of all-reduce, is why large-scale training today is mostly synchronous.
#
# ## Wrap-up
#
# * Why does synchronous SGD on $N$ ranks give the weights of one process on the whole batch,
#   and what must be true of the replicas before the first step for that to hold?
# * The DDP loop: a backend for the hardware (`nccl` on GPUs, `gloo` on CPUs), the `DDP`
#   wrapper, a `DistributedSampler` (equal shares) with `set_epoch` every epoch, and no
#   `shuffle` in the `DataLoader`.
# * Where in a step does DDP's communication go, and what does it cost when it goes there?
#   What decides which gradients travel together, and when is that worth the copies ("Do
#   buckets pay?", 3d)?
# * With gradient accumulation, how often must the gradients cross the network per step?
# * Asynchronous SGD never waits, but its gradients are stale.
#
# **Next.** Notebook 04 splits the model itself: tensor parallelism.
