"""Hidden tests of notebook 06 (ZeRO): the fewest GPUs predicted from the memory formula, the
parameter assignment against the greedy rule's balance, and the sharded optimizers and the
ZeRO-3 layer against unsharded training in this process.

The classes run on real ranks through a harness of this module (under the judge it travels by
value, as the learner's class does: checks.on_ranks). The oracle (the unsharded model and
optimizer, the layout of the flat buffer) is computed here, never on the ranks, where under the
judge the learner's code runs too. A class that uses another exercise's answer (assign_params,
FlatShard) gets a correct one instead, so one mistake costs points in one exercise only.
"""

from __future__ import annotations

import math
from fractions import Fraction

from autograder.exercises.zero_lm import lm_harness, plan_harness

from autograder.exercises import exercise, zero_lm
from autograder.exercises.checks import (
    calls_of,
    check_tensor,
    describe,
    each_case,
    first_rank_failure,
    fmt,
    rank_values,
    recording,
    run_cases,
    with_trusted,
)
from distlab.memory import settled_bytes

WORLD_SIZES = (1, 2, 4, 3)  # 3 last: the notebook's next check runs on 3 ranks
OPTIMIZERS = {"AdamW": {"lr": 0.05, "weight_decay": 0.1}, "SGD": {"lr": 0.1, "momentum": 0.9}}
STATE_PER_ELEMENT = {"AdamW": 2, "SGD": 1}  # exp_avg and exp_avg_sq; momentum_buffer


# ---------------------------------------------------------------- the memory model


def _oracle_state_bytes(psi, n_d, stage, widths):
    p, g, k = widths
    return (p * psi / (n_d if stage == 3 else 1), g * psi / (n_d if stage >= 2 else 1),
            k * psi / (n_d if stage >= 1 else 1))


def _model_state_bytes(psi, n_d, stage, widths=(2, 2, 12)):
    """The notebook's given model_state_bytes, trusted (the learner's copy may be edited)."""
    return _oracle_state_bytes(psi, n_d, stage, widths)


def _fits(psi, n_d, stage, widths, budget):
    """Exact: a float psi or budget is a binary fraction, so Fraction holds it exactly."""
    return sum(_oracle_state_bytes(Fraction(psi), n_d, stage, widths)) <= Fraction(budget)


def _counted(fn, where):
    """fn seeing, in place of model_state_bytes, a stand-in that refuses every call: the
    prediction is a formula in the byte widths, and calling the table (at trial N_d, or at
    N_d = 1 and a huge N_d to split it) is a search, not a prediction."""

    def model_state_bytes(*args, **kwargs):
        raise AssertionError(
            f"{where} called model_state_bytes: that is a search (or a probe) over N_d; "
            "predict N_d with a formula of the byte widths, without the table")

    return with_trusted(fn, model_state_bytes=model_state_bytes)


@exercise
def fewest_gpus(fn, rng):
    """The learner's N_d against the oracle's model states at N_d and N_d - 1; budgets whose
    answer is up to 10^9 GPUs (no search reaches it), and budgets no N_d meets (None)."""
    import time

    learner = fn
    cases = [(7.5e9, stage, 16e9, (2, 2, 12)) for stage in range(4)]
    cases += [(1000.0, 3, 2000.0, (4, 4, 8)), (1000.0, 0, 16_000.0, (4, 4, 8))]
    # budgets exactly equal to the bytes no N_d removes: None (stage 0: 1), which a search
    # that tries a huge N_d in floating point gets wrong
    cases += [(7.5e9, 2, 15e9, (2, 2, 12)), (7.5e9, 1, 30e9, (2, 2, 12)),
              (1000.0, 1, 8000.0, (4, 4, 8)), (3.0, 2, 6.0, (2, 5, 7)),
              (1000.0, 0, 16_000.0, (4, 4, 8)), (1000.0, 3, 0.0, (4, 4, 8))]
    for _ in range(40):
        psi = float(rng.integers(1, 10 ** int(rng.integers(2, 12))))
        widths = tuple(int(w) for w in rng.integers(1, 17, size=3))
        stage = int(rng.integers(0, 4))
        fixed = sum(_oracle_state_bytes(psi, math.inf, stage, widths))
        shared = sum(_oracle_state_bytes(psi, 1, stage, widths)) - fixed
        # the largest N_d whose neighbour N_d - 1 a double still tells apart at this budget
        top = 1e9 if fixed == 0 else min(1e9, math.sqrt(shared * 0.05 / (fixed * 1e-9) + 1))
        n_d = max(1, int(10 ** rng.uniform(0, math.log10(max(top, 1.0)))))
        budget = fixed + shared / (n_d - rng.uniform(0.05, 0.95)) if rng.random() < 0.8 else \
            fixed * rng.uniform(0.3, 0.99)
        cases.append((psi, stage, float(budget), widths))
    for psi, stage, budget, widths in cases:
        where = f"fewest_gpus({psi:g}, stage={stage}, budget={budget:.6g}, widths={widths})"
        fixed = sum(_oracle_state_bytes(psi, math.inf, stage, widths))
        shared = sum(_oracle_state_bytes(psi, 1, stage, widths)) - fixed
        exact_fixed = Fraction(psi) * sum(w for w, cut in zip(
            widths, (stage >= 3, stage >= 2, stage >= 1), strict=True) if not cut)
        possible = Fraction(budget) > exact_fixed or (shared == 0 and budget >= exact_fixed)
        start = time.perf_counter()
        got = _counted(learner, where)(psi, stage, budget, widths)
        if time.perf_counter() - start > 0.5:  # timed again: a first call may import, or cross
            start = time.perf_counter()  # to the judge's runner for the first time
            got = _counted(learner, where)(psi, stage, budget, widths)
        if time.perf_counter() - start > 0.5:
            raise AssertionError(f"{where} took {time.perf_counter() - start:.1f} s: predict "
                                 "N_d with a formula; no search over N_d reaches 10^9 GPUs")
        if not possible:
            if got is not None:
                raise AssertionError(f"{where} returned {got!r}: no number of GPUs fits: the "
                                     "bytes no N_d removes take the whole budget or more, and "
                                     "the partitioned bytes never reach zero (expected None)")
            continue
        if got is None or isinstance(got, bool) or int(got) != got or got < 1:
            raise AssertionError(f"{where} returned {got!r}: expected a number of GPUs, >= 1")
        got = int(got)
        if not _fits(psi, got, stage, widths, budget):
            raise AssertionError(f"{where} returned {got}: on {got} GPUs one GPU still holds "
                                 f"{sum(_oracle_state_bytes(psi, got, stage, widths)):.6g} "
                                 "bytes, over the budget (only the partitioned bytes shrink "
                                 "with N_d)")
        if got > 1 and _fits(psi, got - 1, stage, widths, budget):
            raise AssertionError(f"{where} returned {got}: {got - 1} GPUs fit already; the "
                                 "fewest is the smallest N_d that fits")


# ---------------------------------------------------------------- owners of parameters


def _oracle_assign(sizes, loads):
    """The greedy rule: largest first, each to the rank that owns the fewest elements so far
    (the lowest such rank on a tie). Returns (owners, loads afterwards)."""
    loads = list(loads)
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        owners[i] = loads.index(min(loads))
        loads[owners[i]] += sizes[i]
    return owners, loads


@exercise
def assign_params(fn, rng):
    cases = [([1, 1, 1, 1, 4], [0, 0]), ([3, 3], [5, 0]), ([240, 24, 168, 7, 112, 16, 48, 3],
                                                         [0, 0, 0]), ([], [0, 0]), ([5], [0])]
    for _ in range(30):
        n = int(rng.integers(1, 6))
        sizes = [int(s) for s in rng.integers(1, 100, size=int(rng.integers(1, 13)))]
        loads = [int(v) for v in rng.integers(0, 100, size=n)] if rng.random() < 0.5 else [0] * n
        cases.append((sizes, loads))
    for sizes, loads in cases:
        where = f"assign_params({sizes}, loads={loads})"
        out = fn(list(sizes), list(loads))
        try:
            owners, mine = out
            owners, mine = [int(o) for o in owners], [int(v) for v in mine]
        except (TypeError, ValueError):
            raise AssertionError(f"{where} returned {out!r}: expected (owners, loads), two "
                                 "lists") from None
        if len(owners) != len(sizes) or any(not 0 <= o < len(loads) for o in owners):
            raise AssertionError(f"{where} returned {owners}: expected one rank in "
                                 f"0..{len(loads) - 1} per parameter")
        grown = [loads[r] + sum(s for s, o in zip(sizes, owners, strict=True) if o == r)
                 for r in range(len(loads))]
        if mine != grown:
            raise AssertionError(f"{where} returned loads {mine}, but the owners {owners} "
                                 f"make them {grown} (add each size to its owner's load)")
        best = _oracle_assign(sizes, loads)[1]
        if max(mine) > max(best):
            raise AssertionError(f"{where}: owners {owners} leave a rank with {max(mine)} "
                                 f"elements; a reference rule's fullest rank has {max(best)}")


# ---------------------------------------------------------------- shared by the rank tests


def _model(widths, seed):
    """Linear layers (float64) with Tanh between them; the global RNG is left as it was."""
    import torch
    from torch import nn

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers = []
        for n_in, n_out in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(n_in, n_out), nn.Tanh()]
        return nn.Sequential(*layers[:-1]).double()


def _batch(widths, n, seed, per_rank=3):
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n * per_rank, widths[0], generator=generator, dtype=torch.float64)
    return x, torch.randn(n * per_rank, widths[-1], generator=generator, dtype=torch.float64)


def _widths(rng, layers):
    return tuple(int(w) for w in rng.integers(1, 10, size=layers + 1))


def _train_unsharded(widths, seed, n, name, steps, late_lr=None):
    """Parameters after `steps` steps of torch.optim.<name> on the whole batch; with late_lr,
    the last Linear joins (at that rate) after the first step."""
    import torch
    import torch.nn.functional as F

    model = _model(widths, seed)
    x, y = _batch(widths, n, seed)
    params = list(model.parameters())
    optimizer = getattr(torch.optim, name)(params[:-2] if late_lr else params, **OPTIMIZERS[name])
    for step in range(steps):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        if late_lr and step == 0:
            optimizer.add_param_group({"params": params[-2:], "lr": late_lr})
    return model


def _case_text(n, widths, name, steps):
    return f"world_size={n}, layer widths {list(widths)}, {name}, {steps} steps"


def _kb(nbytes):
    return f"{nbytes} B" if abs(nbytes) < 2000 else f"{nbytes / 1e3:.1f} kB"


SCALAR_SLACK = 16  # bytes per updated tensor an optimizer may keep besides its state (a step)


# ---------------------------------------------------------------- ZeRO-1


def _zero1_harness(rank, world_size, cls, cases):
    """Train with the learner's ShardedOptimizer (gradients averaged first, as DDP does);
    per case: (parameters, which of them have optimizer state on this rank)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    def one_case(case):
        widths, name, steps, late_lr, seed = case
        model = _model(widths, seed)
        x, y = (t.chunk(world_size)[rank] for t in _batch(widths, world_size, seed))
        params = list(model.parameters())
        before = settled_bytes()  # the model and this rank's batch
        optimizer = cls(params[:-2], getattr(torch.optim, name), **OPTIMIZERS[name])
        summaries = []
        for step in range(steps):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            for p in params:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            with recording(flops=False, saved=False) as rec:
                optimizer.step()
            summaries.append(rec.summary())
            if step == 0:
                optimizer.add_param_group({"params": params[-2:], "lr": late_lr})
        held_bytes = settled_bytes(*[p.grad for p in params]) - before  # what the optimizer added
        held = [any(p is q for q in optimizer.local.state) for p in params]
        return [p.detach().clone() for p in params], held, held_bytes, summaries

    return run_cases(rank, world_size, cases, one_case)


def _zero1_communication(where, rank, n, numels, summaries):
    """Each step: every updated parameter's bytes sent once, from its owner (a broadcast per
    parameter, or an all-gather of padded slices); no all-reduce, which would move each
    parameter twice."""
    if n == 1:
        return
    for step, summary in enumerate(summaries, 1):
        made = describe(summary)
        stepped = 8 * numels[0 if step == 1 else 1]  # the last layer joins after step 1
        sent = sum(c["bytes"] for c in calls_of(summary))
        if calls_of(summary, "all_reduce", "reduce_scatter") or not (
                stepped <= sent <= stepped + 16 * n):  # an all-gather pads each group
            raise AssertionError(
                f"{where}: step {step} on rank {rank} made {made}, for {stepped} B of updated "
                "parameters: ZeRO-1's step sends each updated parameter once, from its owner "
                "(an all-reduce of masked parameters moves every byte twice)")


@exercise
def ShardedOptimizer(cls, rng):  # noqa: N802 - the exercise is named after the learner's class
    from distlab import require_filled

    require_filled(cls)
    cls = with_trusted(cls, assign_params=_oracle_assign)
    for n in WORLD_SIZES:
        cases = [((2, 9, 3), "AdamW", 3, 0.02, int(rng.integers(1000)))]
        cases += [(_widths(rng, int(rng.integers(2, 4))), name, 3, float(rng.uniform(0.01, 0.1)),
                   int(rng.integers(1000))) for name in ("SGD", "AdamW")]
        for case, entries in each_case(_zero1_harness, cls, n, cases):
            widths, name, steps, late_lr, seed = case
            where = _case_text(n, widths, name, steps) + ", the last layer added after step 1"
            first_rank_failure(where, entries)
            model = _train_unsharded(widths, seed, n, name, steps, late_lr)
            params = list(model.parameters())
            owners, loads = _oracle_assign([p.numel() for p in params[:-2]], [0] * n)
            owners += _oracle_assign([p.numel() for p in params[-2:]], loads)[0]
            full_state = 8 * STATE_PER_ELEMENT[name] * sum(p.numel() for p in params)
            numels = [sum(p.numel() for p in params[:-2]), sum(p.numel() for p in params)]
            for rank, (_, (got, held, held_bytes, summaries)) in enumerate(entries):
                for i, (pname, param) in enumerate(model.named_parameters()):
                    check_tensor(got[i], param.detach(), where, rank, f"parameter {pname}",
                                 "unsharded training gives")
                owned = sum(p.numel() for p, o in zip(params, owners, strict=True) if o == rank)
                budget = 8 * STATE_PER_ELEMENT[name] * owned
                if n > 1 and held_bytes > budget + SCALAR_SLACK * len(params):
                    raise AssertionError(
                        f"{where}: after the steps, rank {rank} holds {_kb(held_bytes)} more "
                        f"than the model and its gradients, though its optimizer state is that "
                        f"of the {owned} elements it owns, {_kb(budget)} (the state of every "
                        f"parameter is {_kb(full_state)}): ZeRO-1 keeps each parameter's "
                        "optimizer state on its owner only, wherever it is stored")
                for i, (pname, param) in enumerate(model.named_parameters()):
                    if held[i] != (owners[i] == rank):
                        shape = tuple(param.shape)
                        raise AssertionError(
                            f"{where}: rank {rank} {'keeps' if held[i] else 'has no'} optimizer "
                            f"state for {pname} {shape}, but its owner is rank {owners[i]} "
                            "(the owners assign_params gives)")
                _zero1_communication(where, rank, n, numels, summaries)


# ---------------------------------------------------------------- the flat buffer


class _FlatShard:
    """The layout of the notebook's FlatShard, trusted."""

    def __init__(self, shapes):
        import torch
        import torch.distributed as dist

        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.shapes = [torch.Size(shape) for shape in shapes]
        self.numel = sum(shape.numel() for shape in self.shapes)
        self.size = -(-self.numel // self.world_size)

    def flatten(self, tensors):
        import torch

        flat = torch.zeros(self.size * self.world_size, dtype=tensors[0].dtype)
        flat[: self.numel] = torch.cat([t.reshape(-1) for t in tensors])
        return flat

    def shard_of(self, flat):
        return flat[self.rank * self.size:(self.rank + 1) * self.size]

    def views(self, flat):
        tensors, start = [], 0
        for shape in self.shapes:
            tensors.append(flat[start:start + shape.numel()].view(shape))
            start += shape.numel()
        return tensors


def _padded(tensors, n):
    """The oracle's full buffer: tensors flattened, zeros up to the next multiple of n."""
    import torch

    flat = torch.cat([t.reshape(-1) for t in tensors])
    size = -(-flat.numel() // n)
    return torch.cat([flat, flat.new_zeros(size * n - flat.numel())]), size


def _oracle_grad_peak(numel, n, itemsize):
    """Bytes of gradients a ZeRO-2 rank holds while it reduce-scatters: the padded flat
    gradient it sends and the slice it receives."""
    size = -(-numel // n)
    return itemsize * (n + 1) * size


class _Zero2:
    """The notebook's Zero2Optimizer, trusted (the prediction is measured with it)."""

    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.layout = _FlatShard([p.shape for p in self.params])
        self.flat = self.layout.flatten([p.detach() for p in self.params])
        for p, view in zip(self.params, self.layout.views(self.flat), strict=True):
            p.data = view
        self.shard = self.layout.shard_of(self.flat)
        self.local = optimizer_cls([self.shard], **kwargs)

    def step(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            flat_grad = self.layout.flatten([p.grad for p in self.params])
            for p in self.params:
                p.grad = None
            self.shard.grad = torch.empty_like(self.shard)
            dist.reduce_scatter_single(self.shard.grad, flat_grad, op=dist.ReduceOp.AVG)
            self.local.step()
            dist.all_gather_single(self.flat, self.shard)


def _grad_peak_harness(rank, world_size, _fn, cases):
    """Per case, two AdamW steps of the trusted ZeRO-2 on a model of those widths (in that
    dtype): the most bytes of gradients alive as a step starts its first collective (its
    reduce-scatter), measured from the live tensors as the notebook's check does."""
    import torch
    import torch.nn.functional as F

    from distlab.zero import grads_at_first_collective

    def one_case(case):
        widths, dtype, seed = case
        model = _model(widths, seed).to(getattr(torch, dtype))
        x, y = (t.chunk(world_size)[rank].to(getattr(torch, dtype))
                for t in _batch(widths, world_size, seed))
        optimizer = _Zero2(model.parameters(), torch.optim.AdamW, lr=0.01)
        peaks = []
        for _ in range(2):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            peaks.append(grads_at_first_collective(model, optimizer))
        return max(peaks)

    return run_cases(rank, world_size, cases, one_case)


def _peak_message(where, got, numel, n, itemsize):
    size = -(-numel // n)
    hints = {itemsize * size: "that is the slice the rank receives, all it keeps after "
                              "step(); the flat gradient it sends is alive too",
             itemsize * n * size: "that is the flat gradient it sends; the slice it receives "
                                  "is alive too"}
    hint = hints.get(got, "the gradients alive then are the flat gradient as `flatten` lays "
                          "it out (every element of it) and the slice the rank receives")
    return (f"{where} returned {got!r}: not the bytes of gradients a ZeRO-2 rank holds while "
            f"it reduce-scatters ({hint})")


@exercise
def zero2_held_bytes(fn, rng):
    """The prediction against the gradient bytes measured on real ranks (a trusted ZeRO-2,
    float64 and float32 models, 2 to 4 ranks), then against the oracle on element counts that
    are multiples of the world size, that are not, and that are smaller than it."""
    for n in (2, 3, 4):
        cases = [((int(rng.integers(2, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 9))),
                  dtype, int(rng.integers(1000))) for dtype in ("float64", "float32")]
        for case, entries in each_case(_grad_peak_harness, None, n, cases):
            widths, dtype, _ = case
            numel = sum(w_in * w_out + w_out for w_in, w_out in zip(widths, widths[1:],
                                                                     strict=False))
            itemsize = 8 if dtype == "float64" else 4
            where = f"zero2_held_bytes(numel={numel}, world_size={n}, itemsize={itemsize})"
            measured = max(rank_values(f"world_size={n}, measuring a ZeRO-2 step", entries))
            if measured != _oracle_grad_peak(numel, n, itemsize):  # the oracle is wrong
                raise RuntimeError(f"{where}: measured {measured} B of gradients")
            got = fn(numel, n, itemsize)
            if isinstance(got, bool) or not isinstance(got, int | float) or got != measured:
                raise AssertionError(_peak_message(where, got, numel, n, itemsize))
    cases = [(618, 4, 8), (618, 3, 8), (10, 3, 4), (1, 4, 2), (12, 4, 4), (7, 1, 8)]
    for _ in range(30):
        n = int(rng.integers(1, 65))
        numel = int(rng.integers(1, 10 ** int(rng.integers(1, 7))))
        cases.append((numel, n, int(rng.choice([2, 4, 8]))))
    for numel, n, itemsize in cases:
        where = f"zero2_held_bytes(numel={numel}, world_size={n}, itemsize={itemsize})"
        got = fn(numel, n, itemsize)
        if isinstance(got, bool) or not isinstance(got, int | float) or \
                got != _oracle_grad_peak(numel, n, itemsize):
            raise AssertionError(_peak_message(where, got, numel, n, itemsize))


# ---------------------------------------------------------------- ZeRO-2


def _zero2_harness(rank, world_size, cls, cases):
    """Train with the learner's Zero2Optimizer; per case: (parameters, which still have a
    full gradient after step(), elements of optimizer state on this rank)."""
    import torch
    import torch.nn.functional as F

    def one_case(case):
        widths, name, steps, seed = case
        model = _model(widths, seed)
        x, y = (t.chunk(world_size)[rank] for t in _batch(widths, world_size, seed))
        before = settled_bytes()  # the model and this rank's batch
        optimizer = cls(model.parameters(), getattr(torch.optim, name), **OPTIMIZERS[name])
        summaries = []
        for _ in range(steps):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            with recording(flops=False, saved=False) as rec:
                optimizer.step()
            summaries.append(rec.summary())
        held_bytes = settled_bytes() - before
        left = [p.grad is not None for p in model.parameters()]
        state = sum(t.numel() for s in optimizer.local.state.values() for t in s.values()
                    if isinstance(t, torch.Tensor) and t.dim() > 0)
        return ([p.detach().clone() for p in model.parameters()], left, state, summaries,
                held_bytes)

    return run_cases(rank, world_size, cases, one_case)


@exercise
def Zero2Optimizer(cls, rng):  # noqa: N802 - the exercise is named after the learner's class
    from distlab import require_filled

    require_filled(cls)
    cls = with_trusted(cls, FlatShard=_FlatShard)
    for n in WORLD_SIZES:
        cases = [(_widths(rng, int(rng.integers(1, 4))), name, 3, int(rng.integers(1000)))
                 for name in ("AdamW", "SGD")]
        for case, entries in each_case(_zero2_harness, cls, n, cases):
            widths, name, steps, seed = case
            where = _case_text(n, widths, name, steps)
            first_rank_failure(where, entries)
            model = _train_unsharded(widths, seed, n, name, steps)
            numel = sum(p.numel() for p in model.parameters())
            size = -(-numel // n)
            state = STATE_PER_ELEMENT[name] * size
            for rank, (_, (got, left, held, summaries, held_bytes)) in enumerate(entries):
                for i, (pname, param) in enumerate(model.named_parameters()):
                    check_tensor(got[i], param.detach(), where, rank, f"parameter {pname}",
                                 "unsharded training gives")
                _zero2_communication(where, rank, n, size, summaries)
                if any(left):
                    raise AssertionError(f"{where}: after step(), rank {rank} still holds the "
                                         f"full gradient of {left.count(True)} parameter(s)")
                if held != state:
                    raise AssertionError(f"{where}: rank {rank}'s optimizer holds {held} "
                                         f"elements of state; {name} needs "
                                         f"{STATE_PER_ELEMENT[name]} per element of its slice, "
                                         f"{state}")
                # the padded flat buffer (the parameters moved into it), the state and the
                # gradient of the slice: what ZeRO-2 keeps after a step
                budget = 8 * (size * n - numel + state + size) + SCALAR_SLACK
                if n > 1 and held_bytes > budget:
                    raise AssertionError(
                        f"{where}: after step(), rank {rank} holds {_kb(held_bytes)} more than "
                        f"the model did, where the padding, the state and the gradient of its "
                        f"slice ({size} of {numel} elements) take {_kb(budget)}: ZeRO-2 keeps "
                        "only 1/N of the gradient, the averaged slice this rank owns")


def _zero2_communication(where, rank, n, size, summaries):
    """Each step: one reduce-scatter of the padded flat gradient, no all-reduce, and an
    all-gather of the parameters."""
    if n == 1:
        return
    for step, summary in enumerate(summaries, 1):
        made = describe(summary)
        if calls_of(summary, "all_reduce"):
            raise AssertionError(f"{where}: step {step} on rank {rank} made {made}: ZeRO-2 "
                                 "reduce-scatters the gradients (each rank receives the "
                                 "average of its own slice only), no all-reduce")
        scattered = sum(c["bytes"] for c in calls_of(summary, "reduce_scatter"))
        if scattered != 8 * size * n:
            raise AssertionError(f"{where}: step {step} on rank {rank} made {made}: ZeRO-2 "
                                 f"reduce-scatters the whole padded gradient ({8 * size * n} "
                                 "B) once, so that each rank receives its averaged slice")
        # every rank's updated slice, to every rank (an all-gather, or one broadcast a slice)
        if sum(c["bytes"] for c in calls_of(summary, "all_gather", "broadcast")) != 8 * size * n:
            raise AssertionError(f"{where}: step {step} on rank {rank} made {made}: after "
                                 "the step on its slice, ZeRO-2 all-gathers the padded "
                                 f"parameters ({8 * size * n} B) so every rank has them all")


# ---------------------------------------------------------------- ZeRO-3


def _zero3_harness(rank, world_size, fn, cases):
    """A model of Linear units (distlab's plumbing around the learner's GatheredUnit),
    trained; per case: (first output, input gradient, slices' gradients, slices after
    training, what the first forward and backward did: their recorder summaries and the bytes
    held between them)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from distlab.zero_units import shard_units, units_of

    def one_case(case):
        widths, name, steps, seed = case
        plain = _model(widths, seed)
        forward = shard_units(plain, [m for m in plain if isinstance(m, nn.Linear)], fn,
                              _FlatShard)
        shards = [unit.shard for unit in units_of(forward)]
        x, y = (t.chunk(world_size)[rank] for t in _batch(widths, world_size, seed))
        x = x.clone().requires_grad_()
        before = settled_bytes()  # the slices and this rank's batch
        with recording(flops=False) as fwd:
            out = forward(x)
        between = settled_bytes() - before  # the activations autograd keeps, and whatever else
        loss = F.mse_loss(out, y)
        with recording(flops=False, saved=False) as bwd:
            loss.backward()
        del loss
        first = (out.detach().clone(), None if x.grad is None else x.grad.clone(),
                 [None if s.grad is None else s.grad.clone() for s in shards])
        optimizer = getattr(torch.optim, name)(shards, **OPTIMIZERS[name])
        optimizer.step()
        for _ in range(steps - 1):
            optimizer.zero_grad()
            F.mse_loss(forward(x.detach()), y).backward()
            optimizer.step()
        return (*first, [s.detach().clone() for s in shards],
                (fwd.summary(), between, bwd.summary()))

    return run_cases(rank, world_size, cases, one_case)


def _layer_slices(model, n, rank, grads=False):
    """Per Linear of the unsharded model: rank's slice of the padded flat [W, b] (or grads)."""
    from torch import nn

    slices = []
    for module in model:
        if isinstance(module, nn.Linear):
            pair = [module.weight.grad, module.bias.grad] if grads else [module.weight,
                                                                         module.bias]
            flat, size = _padded([t.detach() for t in pair], n)
            slices.append(flat[rank * size:(rank + 1) * size])
    return slices


@exercise
def GatheredUnit(fn, rng):  # noqa: N802 - the exercise is named after the learner's class
    import torch.nn.functional as F

    from distlab import require_filled

    require_filled(fn)
    for n in WORLD_SIZES:
        cases = [(_widths(rng, int(rng.integers(1, 4))), name, 2, int(rng.integers(1000)))
                 for name in ("SGD", "AdamW")]
        for case, entries in each_case(_zero3_harness, fn, n, cases):
            widths, name, steps, seed = case
            where = _case_text(n, widths, name, steps)
            first_rank_failure(where, entries)
            model = _model(widths, seed)
            x, y = _batch(widths, n, seed)
            F.mse_loss(model(x), y).backward()
            trained = _train_unsharded(widths, seed, n, name, steps)
            for rank, (_, (out, x_grad, grads, final, memory)) in enumerate(entries):
                xr, yr = (t.chunk(n)[rank] for t in (x, y))
                xr = xr.clone().requires_grad_()
                want = _model(widths, seed)(xr)
                F.mse_loss(want, yr).backward()
                check_tensor(out, want.detach(), where, rank, "the output",
                             "the unsharded model gives")
                if x_grad is None:
                    raise AssertionError(f"{where}: rank {rank}'s input got no gradient")
                check_tensor(x_grad, xr.grad, where, rank, "the input's gradient",
                             "the unsharded model gives")
                for layer, (got, want_g) in enumerate(zip(grads, _layer_slices(model, n, rank,
                                                                                 True),
                                                          strict=True)):
                    if got is None:
                        raise AssertionError(f"{where}: rank {rank}'s slice of layer {layer} "
                                             "got no gradient")
                    check_tensor(got, want_g, where, rank, f"the gradient of layer {layer}'s "
                                 "slice", "its slice of the unsharded model's mean gradient is")
                for layer, (got, want_p) in enumerate(zip(final, _layer_slices(trained, n,
                                                                                 rank),
                                                          strict=True)):
                    check_tensor(got, want_p, where, rank, f"layer {layer}'s slice after "
                                 "training", "unsharded training gives")
                if n > 1:
                    _zero3_budget(where, rank, n, widths, len(x) // n, *memory)
    for n, reduce in ((2, "float32"), (4, "bfloat16")):  # bf16 compute, either reduce
        cases = [("bfloat16", reduce, int(rng.integers(1000))),
                 ("float64", "float64", int(rng.integers(1000)))]
        for case, entries in each_case(_lm_harness, fn, n, cases):
            _check_lm(n, case, entries)


def _lm_harness(rank, world_size, fn, cases):
    """zero_lm's harness, with this module's trusted FlatShard and case loop."""
    return lm_harness(rank, world_size, fn, cases, _FlatShard, run_cases)


def _check_lm(n, case, entries):
    """A small transformer's first forward and backward on every rank, and (float64) two
    AdamW steps, against the oracle's; the dtype and bytes of every copy."""

    compute, reduce, seed = case
    where = (f"world_size={n}, a small transformer (embedding, LayerNorms, linears without "
             f"bias, tied LM head, frozen positional embedding), compute in {compute}, "
             f"gradients reduced in {reduce}")
    first_rank_failure(where, entries)
    logits, grads, trained = zero_lm.oracle(n, compute, seed)
    master = "torch.float64" if compute == "float64" else "torch.float32"
    for rank, (_, (got_logits, units, fwd, bwd, full, saved)) in enumerate(entries):
        check_tensor(got_logits, logits[rank], where, rank, "the logits",
                     f"its batch through the model in {compute} gives")
        sizes = zero_lm.unit_sizes(units, n, grads)
        _saved_for_backward(where, rank, n, master, sizes, saved)
        for (names, grad, shard_dtype, grad_dtype, kept), size in zip(units, sizes,
                                                                       strict=True):
            if (shard_dtype, grad_dtype) != (master, master) or not kept:
                raise AssertionError(
                    f"{where}: rank {rank}'s slice of {names} is {shard_dtype} with a "
                    f"{grad_dtype} gradient, {'unchanged' if kept else 'changed'} by the "
                    "forward and backward: the master slice and its gradient stay {master} "
                    "(the optimizer updates them, nothing else); only the gathered copies "
                    "are in the compute dtype")
            flat, _ = _padded([grads[name].detach() for name in names], n)
            want = flat[rank * size:(rank + 1) * size]
            if compute == "float64":
                check_tensor(grad, want, where, rank, f"the gradient of the slice of {names}",
                             "its slice of the mean gradient is")
            elif reduce == "float32" and (grad - want).norm() > (zero_lm.BF16_EXACT_RTOL
                                                                  * want.norm()):
                gap = ((grad - want).norm() / want.norm()).item()
                raise AssertionError(
                    f"{where}: rank {rank}'s slice of {names} got a gradient {gap:.1e} (relative)"
                    f" from the fp32 mean of the ranks' bf16 gradients, where a reduce in fp32 "
                    f"keeps it within {zero_lm.BF16_EXACT_RTOL:.0e}: the master's gradient went "
                    "through bf16 on its way (reduced in the compute dtype, not the reduce "
                    "dtype, or the result cast to the compute dtype); only the gathered copies "
                    "are bf16")
            elif (grad - want).norm() > zero_lm.BF16_GRAD_RTOL * want.norm():
                raise AssertionError(
                    f"{where}: rank {rank}'s slice of {names} got the gradient "
                    f"{fmt(grad.tolist())}, where its slice of the mean of the ranks' bf16 "
                    f"gradients is {fmt(want.tolist())}")
        _lm_communication(where, rank, n, compute, reduce, sizes, fwd, bwd)
        if trained is not None:
            for name, param in trained.items():
                if param.requires_grad:
                    check_tensor(full[name], param.detach(), where, rank,
                                 f"{name} after two AdamW steps", "single-process training "
                                 "gives")


def _saved_for_backward(where, rank, n, master, sizes, saved):
    """What the forward saved for the backward, seen from below (autograd's saved-tensor
    hooks): (dims, elements, dtype, whether it lies in a master slice's memory) per tensor. A
    flat tensor of a gathered unit's length is the unit kept whole; one of a slice's length
    that is not the master slice itself is a copy of it (a bf16 copy sends the master's
    gradient through bf16, and any copy costs memory the slice already takes)."""
    for dims, numel, dtype, is_master in saved:
        if dims != 1 or is_master:
            continue
        if numel in {size * n for size in sizes}:
            raise AssertionError(
                f"{where}: rank {rank}'s forward saved a flat {dtype} tensor of {numel} elements "
                "for the backward, a gathered unit: ZeRO-3 saves each unit's slice, not the "
                "whole unit, and gathers it again in the backward")
        if numel in sizes:
            raise AssertionError(
                f"{where}: rank {rank}'s forward saved a {dtype} copy of a slice ({numel} "
                f"elements) for the backward, where the master slice itself ({master}) is held "
                "anyway: save the master slice, so that its gradient comes back to it without "
                "going through bf16 (and no copy costs memory)")


def _lm_communication(where, rank, n, compute, reduce, sizes, fwd, bwd):
    """Per call of a unit's module (one per block, three for the root's unit: the embedding,
    the last norm, the tied head; the frozen positional embedding none), one all-gather in
    the compute dtype, forward and backward, and one reduce-scatter in the reduce dtype."""
    import torch

    calls = [1] * zero_lm.LAYERS + [3]
    elements = n * sum(c * size for c, size in zip(calls, sizes, strict=True))
    width = {name: torch.empty(0, dtype=getattr(torch, name)).element_size()
             for name in (compute, reduce)}
    for phase, summary in (("forward", fwd), ("backward", bwd)):
        gathered = sum(c["bytes"] for c in calls_of(summary, "all_gather"))
        if calls_of(summary, "all_reduce") or gathered != width[compute] * elements:
            raise AssertionError(
                f"{where}: rank {rank}'s {phase} made {describe(summary)}; ZeRO-3 gathers each "
                f"unit for each call, cast to {compute} before it travels: "
                f"{width[compute] * elements} B in all, and no all-reduce")
    scattered = sum(c["bytes"] for c in calls_of(bwd, "reduce_scatter"))
    if scattered != width[reduce] * elements or calls_of(fwd, "reduce_scatter"):
        raise AssertionError(
            f"{where}: rank {rank}'s backward made {describe(bwd)}: each call's gradient is "
            f"reduce-scattered in the reduce dtype, {reduce}: {width[reduce] * elements} B "
            "in all")


def _zero3_budget(where, rank, n, widths, batch, fwd, between, bwd):
    """ZeRO-3's budget on one rank, 8-byte elements: in the forward one all-gather per layer,
    saved for the backward only each layer's input and slice (and Tanh's output); between
    forward and backward nothing but those activations; in the backward one all-gather and one
    reduce-scatter per layer, no all-reduce."""
    layers = len(widths) - 1
    sizes = [-(-(w_in * w_out + w_out) // n) for w_in, w_out in zip(widths, widths[1:],
                                                                      strict=False)]
    full = [8 * size * n for size in sizes]
    inputs = sum(8 * batch * w for w in widths[:-1])  # what each layer reads, Tanh's outputs
    saved = inputs + sum(8 * size for size in sizes) + sum(8 * batch * w for w in widths[1:-1])
    if fwd["saved_bytes"] > saved:
        raise AssertionError(
            f"{where}: rank {rank}'s forward saved {_kb(fwd['saved_bytes'])} for the backward; "
            f"the layers' inputs and slices are {_kb(saved)}, and a gathered layer is "
            f"{_kb(min(full))} or more: ZeRO-3 saves each layer's slice, not the whole layer, "
            "and gathers the layer again in the backward")
    activations = sum(8 * batch * w for w in widths[1:])
    if between > activations + SCALAR_SLACK:
        raise AssertionError(
            f"{where}: between forward and backward, rank {rank} holds {_kb(between)} beside "
            f"its slices and batch, where the activations are {_kb(activations)} (one gathered "
            f"layer is {_kb(min(full))} or more): ZeRO-3 frees each gathered layer after its "
            "use, copies included, and keeps only its slice until the backward")
    gathered = calls_of(fwd, "all_gather")
    if len(gathered) != layers or calls_of(fwd, "all_reduce", "reduce_scatter"):
        raise AssertionError(f"{where}: rank {rank}'s forward of {layers} layer(s) made "
                             f"{describe(fwd)}: ZeRO-3 all-gathers each layer once, just "
                             "before its use")
    if calls_of(bwd, "all_reduce"):
        raise AssertionError(f"{where}: rank {rank}'s backward made {describe(bwd)}: ZeRO-3 "
                             "reduce-scatters each layer's gradient (each rank keeps the "
                             "average of its own slice), no all-reduce")
    if len(calls_of(bwd, "all_gather")) != layers:
        raise AssertionError(f"{where}: rank {rank}'s backward of {layers} layer(s) made "
                             f"{describe(bwd)}: ZeRO-3 kept only the slices, so the backward "
                             "re-gathers each layer, one all-gather per layer")
    if sorted(c["bytes"] for c in calls_of(bwd, "reduce_scatter")) != sorted(full):
        raise AssertionError(f"{where}: rank {rank}'s backward made {describe(bwd)}: ZeRO-3 "
                             "reduce-scatters each layer's whole padded gradient once")


# ---------------------------------------------------------------- the plan of section 9


def _plan_harness(rank, world_size, fn, cases):
    """zero_lm's plan harness, with this module's case loop and trusted FlatShard."""
    return plan_harness(rank, world_size, fn, cases, run_cases, _FlatShard)


@exercise
def lm_plan(fn, rng):
    """The plan (units, MixedPrecisionPolicy) on transformers of 2 to 4 blocks, measured: one
    step of a trusted ZeRO-3 with its units, the bytes gathered at once and the all-gathers
    against those of one unit per block, and one training step against the unsharded model;
    and the dtypes each collective travels in."""
    cases = [(2, "bfloat16", "float32"), (3, "bfloat16", "bfloat16"), (4, "float16", "float32"),
             (2, None, None), (3, "bfloat16", None), (2, "float32", "float32")]
    for (layers, compute, reduce), [entry] in each_case(_plan_harness, fn, 1, cases):
        where = (f"lm_plan on a transformer of {layers} blocks, compute_dtype={compute}, "
                 f"reduce_dtype={reduce}")
        first_rank_failure(where, [entry])
        plan = entry[1]
        if "error" in plan:
            raise AssertionError(f"{where}: {plan['error']}")
        if plan["nested"]:
            i, j = plan["nested"][0]
            raise AssertionError(f"{where}: unit {i} contains unit {j}: a module is gathered "
                                 "whole for its call, so a unit cannot hold another")
        got, budget = plan["measured"], plan["budget"]
        if "error" in got:
            raise AssertionError(f"{where}: a step with these units fails: {got['error']}")
        if got["gap"] > 1e-5:
            raise AssertionError(f"{where}: after one SGD step with these units the loss is "
                                 f"{got['gap']:.1e} (relative) away from the unsharded model's")
        if got["peak"] > budget["peak"]:
            raise AssertionError(f"{where}: {got['peak']} bytes of gathered parameters alive "
                                 f"at once in bf16, over the budget of {budget['peak']}")
        if got["gathers"] > budget["gathers"]:
            raise AssertionError(f"{where}: {got['gathers']} all-gathers in a step, over the "
                                 f"budget of {budget['gathers']}")
        kind, param, reduce_got = plan["policy"]
        if kind != "MixedPrecisionPolicy":
            raise AssertionError(f"{where}: the policy is a {kind}, not a "
                                 "MixedPrecisionPolicy")
        master = "float32"
        gathered, reduced = param or master, reduce_got or param or master
        if gathered != (compute or master):
            raise AssertionError(f"{where}: the parameters would be all-gathered (and computed "
                                 f"with) in {gathered}, not the compute dtype "
                                 f"{compute or master}")
        if reduced != (reduce or compute or master):
            raise AssertionError(f"{where}: the gradients would be reduced in {reduced}, not "
                                 f"the reduce dtype {reduce or compute or master}")
