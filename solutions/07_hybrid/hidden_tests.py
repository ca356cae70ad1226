"""Hidden tests of notebook 07 (DP x TP x PP on one grid): the groups against numpy's
unravel_index, the TP block, DTensor + FSDP2, 3-D training and the tied weight's gradient on
real ranks against one process, the bytes by group and the memory of a layout against
formulas written here.

The rank exercises run in a harness of this module (by value, as the learner's code), in the
shared case loop (checks.run_cases on the ranks, checks.each_case here): a short-timeout gloo
group whose subgroups are built here from trusted rank lists.
An exercise that uses another's answer gets a trusted one: train_3d trains models of this
module's _TPBlock, so a mistake in TPBlock costs its own points only. Beside the values,
every rank's collectives are recorded with their group's members (recorder.py): the TP
all-reduces must stay in the TP group, the gradient average in the DP group, and every send
and recv between neighbouring stages of the rank's own pipeline.
"""

from __future__ import annotations

import collections
import math

from autograder.exercises import exercise
from autograder.exercises.checks import (
    check_close,
    check_tensor,
    each_case,
    first_rank_failure,
    recording,
    run_cases,
)

FLOP_SLACK = 1.25
NAMES = ("pp", "dp", "tp")


# ---------------------------------------------------------------- the grid


def _oracle_coords(rank, shape):
    import numpy as np

    return tuple(int(c) for c in np.unravel_index(rank, shape))


def _oracle_groups(shape, dim):
    import numpy as np

    grid = np.arange(math.prod(shape)).reshape(shape)
    moved = np.moveaxis(grid, dim, -1).reshape(-1, shape[dim])
    return sorted(sorted(int(r) for r in row) for row in moved)


def _shapes(rng, count):
    shapes = [(2, 2, 2), (1, 2, 2), (2, 1, 3), (3, 2, 1), (1, 1, 1), (2, 3, 4)]
    shapes += [tuple(int(v) for v in rng.integers(1, 7, size=3)) for _ in range(count)]
    return shapes


@exercise
def group_ranks(fn, rng):
    for shape in _shapes(rng, 10):
        for dim in range(3):
            want = _oracle_groups(shape, dim)
            where = f"group_ranks({shape}, dim={dim} ({NAMES[dim]}))"
            got = fn(shape, dim)
            try:
                got = sorted(sorted(int(r) for r in group) for group in got)
            except (TypeError, ValueError):
                raise AssertionError(f"{where} returned {got!r}: expected a list of lists of "
                                     "ranks") from None
            if got != want:
                raise AssertionError(f"{where} is {got}, expected {len(want)} group(s) of "
                                     f"{shape[dim]} rank(s), e.g. {want[0]}: the ranks whose "
                                     f"other two coordinates agree")


# ---------------------------------------------------------------- trusted pieces on the ranks


def _f_g(group):
    import torch
    import torch.distributed as dist

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


def _block(hidden, ff, seed):
    """The notebook's Block (LayerNorm, fc1, GELU, fc2, residual), float64; RNG untouched."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, ff)
            self.fc2 = nn.Linear(ff, hidden)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.norm(x))))

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        block = Block().double()
        with torch.no_grad():  # a LayerNorm that is not the identity
            block.norm.weight.add_(0.3 * torch.randn(hidden, dtype=torch.float64))
            block.norm.bias.add_(0.3 * torch.randn(hidden, dtype=torch.float64))
    return block


def _model(blocks, hidden, ff, seed):
    from torch import nn

    return nn.Sequential(*[_block(hidden, ff, seed + 17 * k) for k in range(blocks)])


def _tp_block(block, group):
    """The trusted TPBlock: this rank's rows of fc1, columns of fc2, the rest whole."""
    import copy

    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    t, n = dist.get_rank(group), dist.get_world_size(group)
    ff = block.fc1.out_features
    part = slice(t * ff // n, (t + 1) * ff // n)
    f, g = _f_g(group)

    class TP(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = copy.deepcopy(block.norm)
            self.w1 = nn.Parameter(block.fc1.weight.detach()[part].clone())
            self.b1 = nn.Parameter(block.fc1.bias.detach()[part].clone())
            self.w2 = nn.Parameter(block.fc2.weight.detach()[:, part].clone())
            self.b2 = nn.Parameter(block.fc2.bias.detach().clone())

        def forward(self, x):
            h = F.gelu(F.linear(f.apply(self.norm(x)), self.w1, self.b1))
            return x + g.apply(F.linear(h, self.w2)) + self.b2

    return TP()


def _parts(block, t, n, grads=False):
    """The tensors TP rank t of n holds of a plain block (or their gradients), as {name:
    tensor}."""
    ff = block.fc1.out_features
    part = slice(t * ff // n, (t + 1) * ff // n)

    def of(p):
        return (p.grad if grads else p).detach()

    return {"fc1.weight (its rows)": of(block.fc1.weight)[part], "fc1.bias (its part)":
            of(block.fc1.bias)[part], "fc2.weight (its columns)": of(block.fc2.weight)[:, part],
            "fc2.bias": of(block.fc2.bias), "norm.weight": of(block.norm.weight),
            "norm.bias": of(block.norm.bias)}


def _batch(rows, seq, hidden, seed):
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(rows, seq, hidden, generator=generator, dtype=torch.float64)
    return x, torch.randn(rows, seq, hidden, generator=generator, dtype=torch.float64)


def _subgroups(shape):
    """This rank's {name: (group, its ranks)}: every group of every dimension created, in order."""
    import torch.distributed as dist

    mine = {}
    for dim, name in enumerate(NAMES):
        for ranks in _oracle_groups(shape, dim):
            group = dist.new_group(ranks)
            if dist.get_rank() in ranks:
                mine[name] = (group, ranks)
    return mine


def _harness(rank, world_size, fn, run, cases):
    """Each case through run (_run_block, _run_shard_2d, _run_3d or _run_tied) in the shared
    case loop (checks.run_cases). Nothing is judged here."""
    return run_cases(rank, world_size, cases, lambda case: run(fn, rank, case))


def _run_block(cls, rank, case):
    """The learner's block on this rank's TP group: output, grads, what it did."""
    import torch

    groups = _subgroups(case["shape"])
    layer = cls(_block(case["hidden"], case["ff"], case["seed"]), groups["tp"][0])
    x = case["x"].clone().requires_grad_()
    with recording() as fwd:
        out = layer(x)
    with recording(flops=True, saved=False) as bwd:
        out.backward(case["grad"].clone())
    params = {name: (p.detach().clone(), None if p.grad is None else p.grad.clone())
              for name, p in layer.named_parameters()}
    return {"out": out.detach().clone(), "x_grad": None if x.grad is None else x.grad.clone(),
            "params": params, "fwd": fwd.summary(), "bwd": bwd.summary(),
            "held": sum(p.numel() for p in layer.parameters()),
            "dtype": str(torch.float64)}


def _groups_for_learner(groups):
    return {name: group for name, (group, _) in groups.items()}


def _run_3d(fn, rank, case):
    import torch
    from torch import nn

    from distlab.intercept import intercepting

    shape = case["shape"]
    groups = _subgroups(shape)
    p = _oracle_coords(rank, shape)[0]
    blocks = _model(shape[0], case["hidden"], case["ff"], case["seed"])
    stage = nn.Sequential(_tp_block(blocks[p], groups["tp"][0]))
    x, y = _batch(case["rows"], case["seq"], case["hidden"], case["seed"])
    seen = []  # the first stage's inputs: rows of x
    hook = stage.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    with recording(saved=False) as rec, intercepting(("send", "recv"), _neighbours_only(rank,
                                                                                       shape)):
        fn(stage, x, y, _groups_for_learner(groups), steps=case["steps"], lr=case["lr"],
           micro_batches=case["micro_batches"])
    hook.remove()
    rows = None  # the first stage's first step: the rows of x in each micro-batch
    if p == 0:
        rows = [[next((i for i in range(len(x)) if torch.equal(row, x[i])), -1) for row in h]
                for h in seen[:case["micro_batches"]]]
    return {"params": [t.detach().clone() for t in stage.parameters()], "rec": rec.summary(),
            "rows": rows}


def _neighbours_only(rank, shape):
    """A stand-in maker for dist.send and dist.recv that refuses a peer outside the stages
    before and after this rank's in its own pipeline, before the call can wait forever."""
    pipeline = next(g for g in _oracle_groups(shape, 0) if rank in g)
    q = pipeline.index(rank)
    neighbours = sorted(pipeline[k] for k in (q - 1, q + 1) if 0 <= k < len(pipeline))

    def wrap(name, real):
        def call(*args, **kwargs):
            peer = kwargs.get("dst", kwargs.get("src", args[1] if len(args) > 1 else None))
            if peer is not None and int(peer) not in neighbours:
                raise AssertionError(
                    f"rank {rank} (stage {q} of the pipeline {pipeline}) called dist.{name} "
                    f"with rank {peer}; a stage talks to the stages before and after it in its "
                    f"own pipeline only ({neighbours}): its PP group, in the group's order")
            return real(*args, **kwargs)
        return call
    return wrap


# One harness per test: what the judge ships with a test's requests is its harness and what
# that uses, so TPBlock's harness must not reach the trusted _tp_block that 2d and 3d train.
def _block_harness(rank, world_size, cls, cases):
    return _harness(rank, world_size, cls, _run_block, cases)


def _3d_harness(rank, world_size, fn, cases):
    return _harness(rank, world_size, fn, _run_3d, cases)


def _shard_2d_harness(rank, world_size, fn, cases):
    return _harness(rank, world_size, fn, _run_shard_2d, cases)


def _run_shard_2d(fn, rank, case):
    """The learner's shard_2d on a (dp, tp) DeviceMesh, then SGD: placements, the first
    step's collectives by kind, what the trained model computes on a new input."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", case["mesh"], mesh_dim_names=("dp", "tp"))
    model = _model(case["blocks"], case["hidden"], case["ff"], case["seed"])
    model = fn(model, mesh) or model
    placements = {name: [repr(pl) for pl in getattr(p, "placements", ())]
                  for name, p in model.named_parameters()}
    d, n_d = mesh["dp"].get_local_rank(), mesh["dp"].size()
    x, y = (t.chunk(n_d)[d] for t in _batch(case["rows"], case["seq"], case["hidden"],
                                             case["seed"]))
    x = x.clone().requires_grad_()
    optimizer = torch.optim.SGD(model.parameters(), lr=case["lr"])
    counts = CommDebugMode()
    try:
        for step in range(case["steps"]):
            optimizer.zero_grad()
            with counts if step == 0 else contextlib.nullcontext():
                F.mse_loss(model(x), y).backward()
            optimizer.step()
    except Exception as err:  # noqa: BLE001 - judged after the placements
        return {"placements": placements, "error": f"{type(err).__name__}: {err}"
                .splitlines()[0]}
    calls = {str(op).split(".")[-1].strip("_"): int(n)
             for op, n in counts.get_comm_counts().items()}
    probe = _batch(3, case["seq"], case["hidden"], case["seed"] + 7)[0]
    with torch.no_grad():  # the trained model, judged by what it computes
        out = model(probe)
    return {"placements": placements, "calls": calls, "out": out.detach().clone()}


# ---------------------------------------------------------------- here: oracles and verdicts


def _train_plain(blocks, hidden, ff, seq, rows, seed, steps, lr):
    """The model after plain SGD on the whole batch, and the matmul FLOPs that took."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    model = _model(blocks, hidden, ff, seed)
    x, y = _batch(rows, seq, hidden, seed)
    counter = FlopCounterMode(display=False)
    with counter:
        for _ in range(steps):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad
    return model, int(counter.get_total_flops())


def _check_share(where, rank, flops, whole, shape):
    """A rank's matmul FLOPs against its 1/(pp dp tp) share of single-process training's."""
    n = math.prod(shape)
    share = whole / n
    if n > 1 and flops > FLOP_SLACK * share:
        raise AssertionError(f"{where}: rank {rank} did {flops} matmul FLOPs, "
                             f"{flops / share:.2g}x its 1/{n} share of training on one process "
                             f"({share:g}): each replica computes its own rows of the batch "
                             "only, each TP rank its part of the weights, each stage its "
                             "blocks")


def _trusted_order(block, t, n):
    """The trusted _tp_block's parameters in order (w1, b1, w2, b2, norm.weight, norm.bias)."""
    parts = _parts(block, t, n)
    return [(name, parts[name].detach()) for name in ("fc1.weight (its rows)",
                                                       "fc1.bias (its part)",
                                                       "fc2.weight (its columns)", "fc2.bias",
                                                       "norm.weight", "norm.bias")]


def _layout_text(shape):
    return "PP {} x DP {} x TP {}".format(*shape)


def _all_reduces_by_group(rec):
    return collections.Counter(tuple(c["ranks"] or ()) for c in rec["calls"]
                               if c["kind"] == "all_reduce")


def _check_block_output(where, rank, out, want, block, tp):
    """The block's output, and the two ways to miss it that are the idea: fc2's bias added
    before g's sum (so once per TP rank), or g left out (a partial sum taken for the whole)."""
    import torch

    if out.shape == want.shape and not torch.allclose(out, want, atol=1e-12) and tp > 1:
        extra = out - want
        if torch.allclose(extra, (tp - 1) * block.fc2.bias.detach().expand_as(extra), atol=1e-10):
            raise AssertionError(f"{where}: rank {rank}'s output holds fc2.bias {tp} times, once "
                                 "per TP rank: whatever a rank adds before g's all-reduce is "
                                 "summed over the TP group")
    check_tensor(out, want, where, rank, "the output", "the plain block gives")


@exercise
def TPBlock(cls, rng):  # noqa: N802 - the exercise is named after the learner's class
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from distlab import require_filled

    require_filled(cls)
    layouts = {1: [(1, 1, 1)], 2: [(1, 1, 2)], 4: [(1, 2, 2), (1, 1, 4)]}
    for n, shapes in layouts.items():
        cases = []
        for shape in shapes:
            tp = shape[2]
            hidden, ff = int(rng.integers(2, 6)), tp * int(rng.integers(1, 4))
            lead = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
            x = torch.from_numpy(rng.standard_normal((*lead, hidden)))
            grad = torch.from_numpy(rng.standard_normal((*lead, hidden)))
            cases.append({"shape": shape, "hidden": hidden, "ff": ff,
                          "seed": int(rng.integers(1000)), "x": x, "grad": grad})
        for case, entries in each_case(_block_harness, cls, n, cases):
            shape, hidden, ff = case["shape"], case["hidden"], case["ff"]
            tp = shape[2]
            where = (f"world_size={n}, TP groups {_oracle_groups(shape, 2)}, hidden={hidden}, "
                     f"ff={ff}, x {tuple(case['x'].shape)}")
            first_rank_failure(where, entries)
            block = _block(hidden, ff, case["seed"])
            x = case["x"].clone().requires_grad_()
            counter = FlopCounterMode(display=False)
            with counter:
                want = block(x)
                want.backward(case["grad"])
            whole_flops = int(counter.get_total_flops())
            for rank, (_, got) in enumerate(entries):
                t = _oracle_coords(rank, shape)[2]
                tp_ranks = _oracle_groups(shape, 2)[rank // tp]
                held = sorted(tuple(v[0].shape) for v in got["params"].values())
                parts, part_grads = _parts(block, t, tp), _parts(block, t, tp, grads=True)
                wanted = sorted(tuple(v.shape) for v in parts.values())
                if held != wanted:
                    raise AssertionError(f"{where}: rank {rank} holds parameters of shapes "
                                         f"{held}; TP rank {t} of {tp} holds {wanted}: its rows "
                                         "of fc1 (and of its bias), its columns of fc2, the "
                                         "LayerNorm and fc2's bias whole")
                made = _all_reduces_by_group(got["fwd"])
                others = [c["kind"] for c in got["fwd"]["calls"] if c["kind"] != "all_reduce"]
                if tp > 1 and (made != collections.Counter({tuple(tp_ranks): 1}) or others):
                    raise AssertionError(
                        f"{where}: rank {rank}'s forward made all-reduces in groups "
                        f"{dict(made)}{' and ' + str(others) if others else ''}; a "
                        f"tensor-parallel block makes one all-reduce in its forward, in its "
                        f"TP group {tp_ranks} (g forward: fc2's partial sums, one per TP rank, "
                        "summed into the output)")
                _check_block_output(where, rank, got["out"], want.detach(), block, tp)
                if got["x_grad"] is None:
                    raise AssertionError(f"{where}: rank {rank}'s input got no gradient")
                check_tensor(got["x_grad"], x.grad, where, rank, "the input's gradient",
                             "the plain block gives")
                for name, part in parts.items():
                    match = [v for v in got["params"].values() if v[0].shape == part.shape
                             and torch.allclose(v[0], part, atol=1e-12)]
                    if not match:
                        raise AssertionError(f"{where}: rank {rank} holds no copy of "
                                             f"{name} {tuple(part.shape)} of TP rank {t}")
                    grads = [v[1] for v in match]
                    if not any(g is not None and torch.allclose(g, part_grads[name], atol=1e-10)
                               for g in grads):
                        why = (": every TP rank holds the LayerNorm whole, and its gradient "
                               "must come from all the ff features, not from this rank's only"
                               if name.startswith("norm") and tp > 1 else "")
                        raise AssertionError(f"{where}: rank {rank}'s gradient of {name} "
                                             f"differs from the plain block's{why}")
                for phase in ("fwd", "bwd"):
                    made = _all_reduces_by_group(got[phase])
                    others = [c["kind"] for c in got[phase]["calls"] if c["kind"] != "all_reduce"]
                    if tp > 1 and (made != collections.Counter({tuple(tp_ranks): 1}) or others):
                        kind = "forward" if phase == "fwd" else "backward"
                        raise AssertionError(
                            f"{where}: rank {rank}'s {kind} made all-reduces in groups "
                            f"{dict(made)}{' and ' + str(others) if others else ''}; a "
                            f"tensor-parallel block makes one all-reduce in its {kind}, in its "
                            f"TP group {tp_ranks} (g forward, f backward)")
                flops = got["fwd"]["flops"] + got["bwd"]["flops"]
                if tp > 1 and flops > FLOP_SLACK * whole_flops / tp:
                    raise AssertionError(f"{where}: rank {rank} did {flops} matmul FLOPs, "
                                         f"{flops / (whole_flops / tp):.2g}x its 1/{tp} share "
                                         "of the block's: each TP rank multiplies by its own "
                                         "part of the weights only")


def _check_params(where, rank, got, model, shape, stage_blocks=None):
    """A rank's trained parameters against its TP part of the plain trained model."""
    p, _, t = _oracle_coords(rank, shape)
    tp = shape[2]
    blocks = list(model) if stage_blocks is None else [list(model)[p]]
    want = [item for block in blocks for item in _trusted_order(block, t, tp)]
    if len(got) != len(want):
        raise AssertionError(f"{where}: rank {rank} returned {len(got)} parameters, expected "
                             f"{len(want)}")
    for k, (tensor, (name, expected)) in enumerate(zip(got, want, strict=True)):
        block = p if stage_blocks is not None else k // 6
        check_tensor(tensor, expected, where, rank, f"block {block}'s {name} after training",
                     "single-process SGD gives")


def _check_dp_average(where, rank, rec, shape, n, n_params, steps, tp_per_step):
    """All-reduces: the TP ones in the TP group, one per parameter per step in the DP group."""
    dp_ranks = _oracle_groups(shape, 1)[[rank in g for g in _oracle_groups(shape, 1)].index(True)]
    tp_ranks = _oracle_groups(shape, 2)[[rank in g for g in _oracle_groups(shape, 2)].index(True)]
    want = collections.Counter({tuple(tp_ranks): tp_per_step * steps})
    want[tuple(dp_ranks)] += n_params * steps
    made = _all_reduces_by_group(rec)
    if made == want:
        return
    world = tuple(range(n))
    for ranks, count in made.items():
        extra = count - want.get(ranks, 0)
        if extra <= 0 or list(ranks) == dp_ranks:
            continue
        if ranks == world:
            also = ", here also its TP group" if list(ranks) == tp_ranks else ""
            named = f"over the world (all {n} ranks{also})"
        elif list(ranks) == tp_ranks:
            named = f"in its TP group {tp_ranks}"
        else:
            named = f"in the group {list(ranks)}"
        raise AssertionError(f"{where}: rank {rank} all-reduced {extra} gradient(s) {named} "
                             f"instead of its DP group {dp_ranks}: a gradient is averaged only "
                             "with the copies of the same parameter, on the other replicas "
                             "(the TP ranks of a replica hold different parts of a weight)")
    shown = {list(k).__repr__(): v for k, v in made.items()}
    raise AssertionError(f"{where}: rank {rank} made all-reduces {shown} (group: count); "
                         f"expected {n_params} per step in its DP group {dp_ranks}, besides "
                         f"the TP blocks' {tp_per_step} per step in its TP group {tp_ranks}")


def _check_micro_rows(where, rank, rows, shape, case):
    """The rows of the batch in each micro-batch the first stage's rank ran in the first step:
    its replica's, by its index in its DP group (recorded by a forward hook of the harness)."""
    import torch

    if rows is None:
        return
    p, d, _ = _oracle_coords(rank, shape)
    dp = shape[1]
    dp_ranks = next(g for g in _oracle_groups(shape, 1) if rank in g)
    want = [c.tolist() for c in torch.arange(case["rows"]).chunk(dp)[d].chunk(
        case["micro_batches"])]
    if rows != want:
        stage = f" (in pipeline stage {p})" if shape[0] > 1 else ""
        raise AssertionError(f"{where}: rank {rank}{stage} ran micro-batches of rows {rows} of "
                             f"the batch; it is replica {d} of {dp} in its DP group {dp_ranks}, "
                             f"whose micro-batches are {want}: a rank's replica is its index in "
                             "its DP group, not a count from its global rank")


@exercise
def train_3d(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    # (2, 2, 1): two stages, each with 2 replicas: a stage numbered by global rank (the bug
    # report's line) holds only where the world is one pipeline; judged first, with 2 rows a
    # micro-batch so that a wrong count does not crash
    # (2, 2, 1) alone: TP 1, so a rank that refuses a wrong peer leaves no TP all-reduce waiting
    layouts = [(4, [(2, 2, 1)]), (4, [(2, 1, 2), (4, 1, 1), (1, 2, 2)]), (2, [(2, 1, 1)]),
               (8, [(2, 2, 2)])]
    for n, shapes in layouts:
        cases = []
        for shape in shapes:
            pp, dp, tp = shape
            micro = int(rng.integers(1, 4))
            per = 2 if shape == (2, 2, 1) else int(rng.integers(1, 3))
            cases.append({"shape": shape, "hidden": int(rng.integers(2, 6)),
                          "ff": tp * int(rng.integers(1, 3)), "seq": int(rng.integers(1, 3)),
                          "rows": dp * micro * per, "micro_batches": micro,
                          "seed": int(rng.integers(1000)), "steps": 2,
                          "lr": float(rng.uniform(0.05, 0.2))})
        for case, entries in each_case(_3d_harness, fn, n, cases):
            shape = case["shape"]
            pp = shape[0]
            where = (f"world_size={n}, {_layout_text(shape)}, {case['micro_batches']} "
                     f"micro-batch(es), hidden={case['hidden']}, ff={case['ff']}, "
                     f"{case['rows']} rows")
            first_rank_failure(where, entries)
            model, whole = _train_plain(pp, case["hidden"], case["ff"], case["seq"],
                                        case["rows"], case["seed"], case["steps"], case["lr"])
            for rank, (_, got) in enumerate(entries):  # every rank's rows first: a wrong
                _check_micro_rows(where, rank, got["rows"], shape, case)  # replica shows there
            for rank, (_, got) in enumerate(entries):
                _check_dp_average(where, rank, got["rec"], shape, n, 6, case["steps"],
                                  2 * case["micro_batches"])
                _check_pipeline(where, rank, got["rec"], shape, case)
                _check_params(where, rank, got["params"], model, shape, stage_blocks=True)
                _check_share(where, rank, got["rec"]["flops"], whole, shape)


def _check_pipeline(where, rank, rec, shape, case):
    """Sends and receives only to the neighbouring stages of this rank's own pipeline, one
    activation and one gradient per micro-batch per boundary per step."""
    pipelines = _oracle_groups(shape, 0)
    pipeline = next(g for g in pipelines if rank in g)
    p = pipeline.index(rank)
    neighbours = {pipeline[q] for q in (p - 1, p + 1) if 0 <= q < len(pipeline)}
    for call in rec["calls"]:
        if call["kind"] not in ("send", "recv"):
            continue
        ranks = call["ranks"]
        peer = ranks[call["peer"]] if ranks and call["peer"] is not None else call["peer"]
        if peer not in neighbours:
            raise AssertionError(f"{where}: rank {rank} (stage {p} of the pipeline {pipeline}) "
                                 f"made a {call['kind']} with rank {peer}; a stage talks to the "
                                 f"stages before and after it in its own pipeline only "
                                 f"({sorted(neighbours)})")
    point = [c for c in rec["calls"] if c["kind"] in ("send", "recv")]
    want = 2 * len(neighbours) * case["micro_batches"] * case["steps"]
    if len(point) != want:
        raise AssertionError(f"{where}: rank {rank} (stage {p} of the pipeline {pipeline}) made "
                             f"{len(point)} sends and receives; per step and micro-batch it "
                             "receives one activation and one gradient from its neighbour "
                             "stages and sends one of each back: "
                             f"{want} in all, in its own pipeline only")


def _tied_harness(rank, world_size, fn, cases):
    return _harness(rank, world_size, fn, _run_tied, cases)


def _tied_use(shape, hidden, rows, seed, p, d):
    """A model y = x E^T E (E's first use on the first stage, its second on the last): the
    gradient of the copy on stage p from replica d's rows (d None: the whole batch, both
    uses, one process)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed + 5)
    E = torch.eye(hidden, dtype=torch.float64) + 0.2 * torch.randn(
        hidden, hidden, generator=generator, dtype=torch.float64)
    x = torch.randn(rows, hidden, generator=generator, dtype=torch.float64)
    y = torch.randn(rows, hidden, generator=generator, dtype=torch.float64)
    if d is not None:
        x, y = x.chunk(shape[1])[d], y.chunk(shape[1])[d]
    first, last = (E.clone().requires_grad_() for _ in range(2))
    F.mse_loss(x @ first.T @ last, y).backward()
    if d is None:
        return first.grad + last.grad
    return sum(g for stage, g in ((0, first.grad), (shape[0] - 1, last.grad)) if stage == p)


def _run_tied(fn, rank, case):
    """The learner's sync_tied on the copies of the first and last stage, in this rank's
    groups and its embedding group; the gradient after, and the collectives."""
    import torch.distributed as dist

    shape = case["shape"]
    groups = _subgroups(shape)
    tied = None
    for pipeline in _oracle_groups(shape, 0):
        ranks = sorted({pipeline[0], pipeline[-1]})
        group = dist.new_group(ranks)
        if rank in ranks:
            tied = (group, ranks)
    p, d, _ = _oracle_coords(rank, shape)
    if p not in (0, shape[0] - 1):
        return None
    grad = _tied_use(shape, case["hidden"], case["rows"], case["seed"], p, d)
    mine = _groups_for_learner(groups)
    mine["tied"] = tied[0]
    with recording(saved=False) as rec:
        fn(grad, mine)
    return {"grad": grad.detach().clone(), "rec": rec.summary()}


@exercise
def sync_tied(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    layouts = {4: [(2, 2, 1), (2, 1, 2), (1, 2, 2)], 6: [(3, 2, 1), (3, 1, 2)], 8: [(2, 2, 2)]}
    for n, shapes in layouts.items():
        cases = [{"shape": shape, "hidden": int(rng.integers(2, 6)),
                  "rows": shape[1] * int(rng.integers(1, 4)), "seed": int(rng.integers(1000))}
                 for shape in shapes]
        for case, entries in each_case(_tied_harness, fn, n, cases):
            shape = case["shape"]
            pp, dp, _ = shape
            where = f"world_size={n}, {_layout_text(shape)}, {case['rows']} rows"
            first_rank_failure(where, entries)
            want = _tied_use(shape, case["hidden"], case["rows"], case["seed"], None, None)
            pipelines = _oracle_groups(shape, 0)
            for rank, (_, got) in enumerate(entries):
                if got is None:
                    continue
                pipeline = next(g for g in pipelines if rank in g)
                tied = sorted({pipeline[0], pipeline[-1]})
                dp_ranks = next(g for g in _oracle_groups(shape, 1) if rank in g)
                allowed = {tuple(tied), tuple(dp_ranks)}
                made = _all_reduces_by_group(got["rec"])
                others = sorted(set(made) - allowed)
                if others:
                    raise AssertionError(
                        f"{where}: rank {rank} (stage {pipeline.index(rank)}) all-reduced in "
                        f"the group(s) {[list(g) for g in others]}; its copy's gradient meets "
                        f"only the other copies: the other use's in its embedding group "
                        f"{tied}, the same use's of the other replicas in its DP group "
                        f"{dp_ranks}")
                grad = got["grad"]
                if torch.allclose(grad, want, atol=1e-10):
                    continue
                if pp > 1 and torch.allclose(2 * grad, want, atol=1e-10):
                    raise AssertionError(
                        f"{where}: rank {rank}'s copy's gradient is half one process's: the "
                        "two copies of an embedding group hold different uses of the weight, "
                        "whose gradients one process adds; only the replicas' (the same use "
                        "on other rows) are averaged")
                if dp > 1 and torch.allclose(grad, dp * want, atol=1e-10):
                    raise AssertionError(
                        f"{where}: rank {rank}'s copy's gradient is {dp} times one process's: "
                        "the replicas' gradients are of the mean loss over their own rows, "
                        "and the batch's mean loss is their average, not their sum")
                check_tensor(grad, want, where, rank, "the copy's gradient after sync_tied",
                             "one process gets from the whole batch")


# ---------------------------------------------------------------- bytes and memory


def _oracle_group_bytes(dims, shape, rows, micro_batches, itemsize):
    pp, dp, tp = shape
    h, ff, seq = dims["hidden"], dims["ff"], dims["seq"]
    stage_blocks = dims["blocks"] // pp
    activations = rows // dp * seq * h * itemsize
    return {"tp": 2 * stage_blocks * activations if tp > 1 else 0,
            "dp": stage_blocks * ((2 * h * ff + ff) / tp + 3 * h) * itemsize if dp > 1 else 0}


@exercise
def group_bytes(fn, rng):
    cases = [({"blocks": 4, "hidden": 8, "ff": 16, "seq": 3}, (2, 2, 2), 8, 2, 8)]
    for _ in range(30):
        pp, dp, tp = (int(v) for v in rng.integers(1, 5, size=3))
        dims = {"blocks": pp * int(rng.integers(1, 4)), "hidden": int(rng.integers(2, 64)),
                "ff": tp * int(rng.integers(1, 64)), "seq": int(rng.integers(1, 64))}
        micro = int(rng.integers(1, 5))
        cases.append((dims, (pp, dp, tp), dp * micro * int(rng.integers(1, 5)), micro,
                      int(rng.choice([2, 4, 8]))))
    for dims, shape, rows, micro, itemsize in cases:
        want = _oracle_group_bytes(dims, shape, rows, micro, itemsize)
        where = (f"group_bytes({dims}, shape={shape}, rows={rows}, micro_batches={micro}, "
                 f"itemsize={itemsize})")
        got = fn(dict(dims), shape, rows, micro, itemsize)
        if not isinstance(got, dict) or set(got) != set(want):
            raise AssertionError(f"{where} returned {got!r}: expected a dict with keys "
                                 "'tp', 'dp'")
        for name in ("tp", "dp"):
            check_close(got[name], want[name], where, f"the {name.upper()} bytes", rtol=1e-9)


@exercise
def layout_memory(fn, rng):
    cases = [(1e9, 1, 1, 1, False), (1e9, 4, 2, 1, False), (1e9, 4, 2, 1, True),
             (1e12, 32, 8, 12, True), (1e12, 8, 8, 48, False)]
    for _ in range(30):
        dp, tp, pp = (int(v) for v in rng.integers(1, 65, size=3))
        cases.append((float(rng.integers(1, 10 ** int(rng.integers(3, 13)))), dp, tp, pp,
                      bool(rng.random() < 0.5)))
    for psi, dp, tp, pp, zero1 in cases:
        want = (4 + 12 / (dp if zero1 else 1)) * psi / (tp * pp)
        check_close(fn(psi, dp, tp, pp, zero1), want,
                    f"layout_memory({psi:g}, dp={dp}, tp={tp}, pp={pp}, zero1={zero1})",
                    "the bytes per GPU", rtol=1e-9)


# ---------------------------------------------------------------- PyTorch's API and the layout


@exercise
def shard_2d(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    cases = []
    for blocks in (2, 3):
        cases.append({"mesh": (2, 2), "blocks": blocks, "hidden": int(rng.integers(2, 6)),
                      "ff": 2 * int(rng.integers(1, 4)), "seq": int(rng.integers(1, 3)),
                      "rows": 2 * int(rng.integers(1, 3)), "seed": int(rng.integers(1000)),
                      "steps": 2, "lr": float(rng.uniform(0.05, 0.2))})
    for case, entries in each_case(_shard_2d_harness, fn, 4, cases):
        blocks = case["blocks"]
        where = (f"4 ranks, DeviceMesh (dp 2, tp 2), {blocks} blocks, hidden={case['hidden']}, "
                 f"ff={case['ff']}")
        first_rank_failure(where, entries)
        model, _ = _train_plain(blocks, case["hidden"], case["ff"], case["seq"], case["rows"],
                                case["seed"], case["steps"], case["lr"])
        for rank, (_, got) in enumerate(entries):
            for k in range(blocks):
                for layer, dim, kind in (("fc1", 0, "output"), ("fc2", 1, "input")):
                    name = f"{k}.{layer}.weight"
                    placed = got["placements"].get(name, [])
                    if len(placed) != 2:
                        raise AssertionError(f"{where}: rank {rank}'s {name} is placed {placed} "
                                             "on the mesh: every weight of a block is split "
                                             "over TP and sharded over DP")
                    if placed[1] != f"Shard(dim={dim})":
                        raise AssertionError(
                            f"{where}: rank {rank}'s {name} is placed {placed[1]} over TP; "
                            f"the Megatron MLP splits {layer}'s {kind} features (Shard(dim="
                            f"{dim}) of its (out, in) weight), so that fc1's split output is "
                            "fc2's split input")
            if "error" in got:
                raise AssertionError(f"{where}: rank {rank}'s training raised {got['error']}")
            probe = _batch(3, case["seq"], case["hidden"], case["seed"] + 7)[0]
            with torch.no_grad():
                want = model(probe)
            check_tensor(got["out"], want, where, rank, "the trained model's output on a new "
                         "input", "the model after single-process SGD gives")
            gathers = sum(n for op, n in got["calls"].items() if "allgather" in op
                          or "all_gather" in op)
            if gathers != 2 * blocks:
                why = ("several blocks in one unit, gathered together" if gathers < blocks else
                       "a block kept whole from its forward to its backward: a unit that no "
                       "other unit holds is a root, and FSDP2 does not free a root's weights "
                       "after its forward" if gathers < 2 * blocks else
                       "more all-gathers than one unit per block needs")
                raise AssertionError(
                    f"{where}: rank {rank}'s first step made {gathers} all-gather(s) for "
                    f"{blocks} blocks, {got['calls']}; within ZeRO-3's budget each block is "
                    "gathered for its forward, freed, and gathered again for its backward: "
                    f"{2 * blocks}. Yours: {why}")


def _oracle_layout(rows, limit):
    fitting = [layout for layout, nbytes in rows if nbytes <= limit]
    return min(fitting, key=lambda layout: (layout[1] * layout[2], layout[2])) \
        if fitting else None


def _oracle_candidates(psi, gpus, gpus_per_node, zero1, layers=None):
    rows = []
    for tp in (t for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0):
        for pp in (p for p in range(1, gpus // tp + 1) if gpus % (tp * p) == 0):
            if layers is not None and layers % pp:
                continue
            dp = gpus // (tp * pp)
            rows.append(((dp, tp, pp), (4 + 12 / (dp if zero1 else 1)) * psi / (tp * pp)))
    return rows


@exercise
def choose_layout(fn, rng):
    # (1e11, 96, 8, True, 60e9, 24): TP 4 x PP 3 x DP 8 by the rules' order, where TP up to
    # a server first would take TP 8 x PP 2 x DP 6 (the two readings the order settles)
    cases = [(1e12, 3072, 8, False, 60e9, 128), (1e12, 3072, 8, True, 60e9, 128),
             (1e11, 96, 8, True, 60e9, 24), (1e11, 96, 8, False, 60e9, 24),
             (1e9, 64, 8, False, 60e9, None), (1e10, 16, 8, False, 60e9, None),
             (4e9, 16, 4, False, 30e9, None), (1e13, 64, 8, False, 60e9, None)]
    for _ in range(40):
        gpus = int(2 ** rng.integers(0, 9) * 3 ** rng.integers(0, 2))
        cases.append((float(10 ** rng.uniform(8, 12)), gpus, int(rng.choice([1, 2, 4, 8])),
                      bool(rng.random() < 0.5), float(rng.choice([16e9, 40e9, 60e9])), None))
    for psi, gpus, per_node, zero1, limit, layers in cases:
        rows = _oracle_candidates(psi, gpus, per_node, zero1, layers)
        order = rng.permutation(len(rows))
        rows = [rows[int(k)] for k in order]
        want = _oracle_layout(rows, limit)
        where = (f"choose_layout(the layouts of {psi:.3g} parameters on {gpus} GPUs, "
                 f"{per_node} a server, zero1={zero1}, limit {limit / 1e9:g} GB"
                 + (f", {layers} layers)" if layers else ")"))
        got = fn(list(rows), limit)
        if got is None or want is None:
            if got != want:
                raise AssertionError(f"{where} is {got}, expected {want}")
            continue
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError):
            raise AssertionError(f"{where} returned {got!r}: expected (dp, tp, pp)") from None
        if got != want:
            fits = dict(rows).get(got, float("inf")) <= limit
            raise AssertionError(
                f"{where} is dp, tp, pp = {got}, expected {want}" + (
                    ": it does not fit" if not fits else
                    f": of the layouts that fit, {want} uses less model parallelism "
                    "(TP x PP) or, as much, fewer pipeline stages"
                    if (want[1] * want[2], want[2]) < (got[1] * got[2], got[2]) else ""))
