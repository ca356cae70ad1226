"""Hidden tests of notebook 05 (pipeline parallelism): schedules checked by simulation, stages
run on real ranks checked against an unsplit model.

A schedule is never compared as text. The learner's order (or table) is run on
`distlab.pipeline_parallel`'s model clock: every action exactly once, every dependency respected, no
ranks waiting on each other forever; then its length and the activations it holds are compared
with the oracle generators below (written here, not imported from the notebook). Any order that
is as fast and holds no more passes.

The real-rank tests run a harness of this module on the ranks, as in collectives.py; gradients
and losses are compared here with a single-process model built from the same seed.
"""

from __future__ import annotations

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import (
    check_close,
    check_tensor,
    each_case,
    first_rank_failure,
    rank_values,
    recording,
    run_cases,
    with_trusted,
)

TABLE_COSTS = {"F": 1, "B": 1, "W": 0}  # the GPipe table's steps
ZB_COSTS = {"F": 1, "B": 2, "W": 1}  # split: B and W one step each

# ---------------------------------------------------------------- oracle generators


def _gpipe(S: int, M: int) -> list:
    return [[(s, "F", mb) for mb in range(M)] + [(s, "B", mb) for mb in range(M)]
            for s in range(S)]


def _one_f_one_b(S: int, M: int) -> list:
    """1F1B: stage s warms up with min(S - s - 1, M) forwards. Also stands in for the learner's
    1F1B inside zb_h1_order, so a mistake there costs points once."""
    order = []
    for s in range(S):
        forwards = [(s, "F", mb) for mb in range(M)]
        backwards = [(s, "B", mb) for mb in range(M)]
        warmup = min(S - s - 1, M)
        steady = [a for pair in zip(forwards[warmup:], backwards, strict=False) for a in pair]
        order.append(forwards[:warmup] + steady + backwards[M - warmup:])
    return order


def _interleaved(S: int, M: int, v: int) -> list:
    rounds = np.array_split(np.arange(M), max(1, M // S))
    order = []
    for r in range(S):
        forwards = [(c * S + r, "F", int(mb)) for group in rounds for c in range(v)
                    for mb in group]
        backwards = [(c * S + r, "B", int(mb)) for group in rounds for c in reversed(range(v))
                     for mb in group]
        warmup = min((v - 1) * len(rounds[0]) + S - 1 - r, len(forwards))
        steady = [a for pair in zip(forwards[warmup:], backwards, strict=False) for a in pair]
        order.append(forwards[:warmup] + steady + backwards[len(forwards) - warmup:])
    return order


def _zb_h1(S: int, M: int) -> list:
    order = []
    for s, actions in enumerate(_one_f_one_b(S, M)):
        out, waiting = [], []
        for stage, kind, mb in actions:
            out.append((stage, kind, mb))
            if kind == "B":
                waiting.append((stage, "W", mb))
                if len(waiting) > s:
                    out.append(waiting.pop(0))
        order.append(out + waiting)
    return order


# ---------------------------------------------------------------- checking an order


def _action(item, where: str, rank: int):
    if isinstance(item, list | tuple) and len(item) == 3:
        stage, kind, mb = item
        if (isinstance(stage, int | np.integer) and isinstance(mb, int | np.integer)
                and kind in ("F", "B", "W")):
            return int(stage), kind, int(mb)
    raise AssertionError(f"{where}: rank {rank} has {item!r}, not an action "
                         "(stage, 'F'/'B'/'W', microbatch)")


def _order(out, S: int, where: str) -> list:
    """The learner's order as lists of plain (stage, kind, mb) tuples, one list per rank."""
    if not isinstance(out, list | tuple) or len(out) != S:
        got = len(out) if isinstance(out, list | tuple) else type(out).__name__
        raise AssertionError(f"{where}: expected one list of actions per rank ({S}), got {got}")
    order = []
    for rank, actions in enumerate(out):
        if not isinstance(actions, list | tuple):
            raise AssertionError(f"{where}: rank {rank} has {actions!r}, not a list of actions")
        order.append([_action(item, where, rank) for item in actions])
    return order


def _simulate(order, where: str, **options):
    from distlab.pipeline_parallel import ScheduleError, simulate

    try:
        return simulate(order, **options)
    except ScheduleError as err:
        raise AssertionError(f"{where}: {err}") from None


def _check_layout(order, S: int, v: int, where: str) -> None:
    for rank, actions in enumerate(order):
        stages = sorted({a[0] for a in actions})
        want = [c * S + rank for c in range(v)]
        if stages != want:
            raise AssertionError(f"{where}: rank {rank} runs stages {stages}, but it holds "
                                 f"stages {want}")


def _check_time_and_memory(order, oracle, where: str, name: str, costs=None, per="stage",
                           slow: str = "", held: str = "", **options) -> None:
    """As fast as the oracle order, and holding no more activations anywhere; `slow` and `held`
    say the idea a slower or a hungrier order misses."""
    from distlab.pipeline_parallel import peak_in_flight

    got, want = _simulate(order, where, costs=costs, **options), _simulate(oracle, where,
                                                                            costs=costs)
    if got.makespan > want.makespan:
        raise AssertionError(f"{where}: the order takes {got.makespan:g} time units; {name} "
                             f"takes {want.makespan:g}{slow}")
    peaks, limits = peak_in_flight(order, per), peak_in_flight(oracle, per)
    places = range(len(order)) if per == "rank" else limits
    for place in places:
        if peaks[place] > limits[place]:
            raise AssertionError(f"{where}: {per} {place} holds up to {peaks[place]} "
                                 f"micro-batches' activations at once; {name} needs only "
                                 f"{limits[place]}{held}")


def _sizes(rng, count: int, stages: int = 8, micro: int = 16) -> list:
    return [(int(rng.integers(1, stages + 1)), int(rng.integers(1, micro + 1)))
            for _ in range(count)]


# ---------------------------------------------------------------- the schedules


def _name(action) -> str:
    stage, kind, mb = action
    return f"{kind} of micro-batch {mb} on stage {stage}"


def _table(out, S: int, where: str) -> tuple[list, object, dict, int]:
    """(order, bubble ratio, {action: column}, columns) of what gpipe_table returned."""
    try:
        table, ratio = out
    except (TypeError, ValueError):
        raise AssertionError(f"{where}: expected (table, bubble_ratio), got {out!r:.80}"
                             ) from None
    if (not isinstance(table, list | tuple) or len(table) != S
            or not all(isinstance(row, list | tuple) for row in table)):
        raise AssertionError(f"{where}: expected a table of {S} rows (one per stage), got "
                             f"{table!r:.80}")
    if any(len(row) != len(table[0]) for row in table):
        raise AssertionError(f"{where}: the rows of the table differ in length")
    order = _order([[a for a in row if a is not None] for row in table], S, where)
    column = {_action(item, where, s): t for s, row in enumerate(table)
              for t, item in enumerate(row) if item is not None}
    return order, ratio, column, len(table[0])


@exercise
def gpipe_table(fn, rng):
    from distlab.pipeline_parallel import needs

    for S, M in [(4, 6), (1, 1), (1, 5), (5, 1), (4, 2), (3, 3)] + _sizes(rng, 14):
        where = f"S={S}, M={M}"
        order, ratio, column, columns = _table(fn(S, M), S, where)
        timeline = _simulate(order, where, costs=TABLE_COSTS, num_stages=S,
                             num_microbatches=M)
        _check_layout(order, S, 1, where)
        for s, actions in enumerate(order):
            if "".join(a[1] for a in actions) != "F" * M + "B" * M:
                raise AssertionError(f"{where}: in GPipe stage {s} runs all its forwards, then "
                                     "all its backwards")
        for action, t in column.items():
            for need in needs(action, S):
                if column[need] >= t:
                    raise AssertionError(f"{where}: the table runs {_name(action)} at step {t}, "
                                         f"but it needs {_name(need)}, at step {column[need]}")
            if t != timeline.start[action]:
                raise AssertionError(f"{where}: the table runs {_name(action)} at step {t}, "
                                     f"but it could run at step {timeline.start[action]:g}")
        if columns != timeline.makespan:
            raise AssertionError(f"{where}: the table has {columns} steps; its work is done "
                                 f"after {timeline.makespan:g}")
        check_close(ratio, (S - 1) / (M + S - 1), where, "the bubble ratio")


@exercise
def one_f_one_b_order(fn, rng):
    from distlab.pipeline_parallel import peak_in_flight

    for S, M in [(4, 6), (4, 8), (1, 1), (1, 4), (4, 1), (4, 2), (3, 3)] + _sizes(rng, 14):
        where = f"S={S}, M={M}"
        order = _order(fn(S, M), S, where)
        _check_layout(order, S, 1, where)
        timeline = _simulate(order, where, num_stages=S, num_microbatches=M)
        gpipe = _simulate(_gpipe(S, M), where)
        if timeline.makespan != gpipe.makespan:
            raise AssertionError(f"{where}: the order takes {timeline.makespan:g} time units "
                                 f"(a backward 2, a forward 1); GPipe takes {gpipe.makespan:g}, "
                                 "and 1F1B has the same bubble")
        peaks, want = peak_in_flight(order), peak_in_flight(_one_f_one_b(S, M))
        for s in range(S):
            if peaks[s] != want[s]:
                raise AssertionError(f"{where}: stage {s} holds up to {peaks[s]} micro-batches "
                                     f"at once; in 1F1B it holds {want[s]}")


@exercise
def interleaved_order(fn, rng):
    cases = [(4, 8, 2), (4, 8, 4), (2, 5, 3), (4, 2, 2), (1, 3, 2), (3, 1, 3), (5, 7, 2),
             (3, 9, 1)]
    cases += [(S, M, int(rng.integers(2, 5))) for S, M in _sizes(rng, 12, stages=6)]
    for S, M, v in cases:
        where = f"S={S}, M={M}, v={v}"
        order = _order(fn(S, M, v), S, where)
        _check_layout(order, S, v, where)
        _check_time_and_memory(order, _interleaved(S, M, v), where, "interleaved 1F1B",
                               per="rank", num_stages=S * v, num_microbatches=M,
                               slow=": a rank whose warm-up ends before the gradient of its "
                               "first backward can reach it waits",
                               held=": the warm-up asked is the minimum, the fewest forwards "
                               "after which the rank never waits")


@exercise
def zb_h1_order(fn, rng):
    fn = with_trusted(fn, one_f_one_b_order=_one_f_one_b)
    for S, M in [(4, 8), (4, 6), (1, 1), (1, 4), (4, 1), (3, 2), (8, 16)] + _sizes(rng, 12):
        where = f"S={S}, M={M}"
        order = _order(fn(S, M), S, where)
        _check_layout(order, S, 1, where)
        done = {(a[0], a[2]) for actions in order for a in actions if a[1] == "W"}
        missing = sorted((s, mb) for s in range(S) for mb in range(M) if (s, mb) not in done)
        if missing:
            s, mb = missing[0]
            raise AssertionError(f"{where}: {_name((s, 'W', mb))} never runs: every backward "
                                 "is split into B and W")
        _check_time_and_memory(order, _zb_h1(S, M), where, "ZB-H1", costs=ZB_COSTS,
                               num_stages=S, num_microbatches=M,
                               slow=": the W's kept waiting fill the time a stage would idle "
                               "at its end, so a stage keeps as many waiting as it would idle",
                               held=": a waiting W holds its micro-batch's activations, so a "
                               "stage keeps no more waiting than fill its idle end")


# ---------------------------------------------------------------- real ranks: run_stage

WIDTH, ROWS = 4, 2  # activations: micro-batches of 2 rows of 4 numbers


def _stage_model(seed: int, S: int):
    """S stages of Linear + tanh, weights from `seed` (the global RNG left alone)."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                            for _ in range(S)])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.7)
    return model


def _stage_batch(seed: int, M: int):
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(M * ROWS, WIDTH, generator=generator),
            torch.randn(M * ROWS, WIDTH, generator=generator))


def _measured(stage, fn, *args):
    """fn(*args) with the stage watched from below: (its return value, what it did), where what
    it did is {"held": the most micro-batches whose activations autograd kept at once, "kept":
    the most micro-batch inputs still alive after their backward (the latest one aside, which
    the loop's variables may still name), "calls": its sends and receives (kind, bytes, peer)}.

    A micro-batch is one forward of the stage; it is held while any tensor autograd saved for
    its backward (the stage's and, on the last rank, the loss's; weights aside) is alive."""
    import weakref

    import torch

    weights = {p.untyped_storage().data_ptr() for p in stage.parameters()}
    live, inputs, done = {}, {}, []  # forward -> saved tensors alive; its input; backwards run
    state = {"forward": -1, "held": 0, "kept": 0}

    class Saved:
        """A saved tensor, counted while autograd keeps it."""

        __slots__ = ("forward", "tensor")

        def __init__(self, tensor, forward):
            self.tensor, self.forward = tensor, forward
            live[forward] = live.get(forward, 0) + 1

        def __del__(self):
            live[self.forward] -= 1

    def pack(tensor):
        if state["forward"] < 0 or tensor.untyped_storage().data_ptr() in weights:
            return tensor
        return Saved(tensor, state["forward"])

    def unpack(saved):
        return saved.tensor if isinstance(saved, Saved) else saved

    def before(module, inputs_):
        state["forward"] += 1
        if inputs_ and isinstance(inputs_[0], torch.Tensor):
            inputs[state["forward"]] = weakref.ref(inputs_[0])
        kept = [f for f in done[:-1] if f in inputs and inputs[f]() is not None]
        state["kept"] = max(state["kept"], len(kept))

    def after(module, inputs_, output):
        forward = state["forward"]
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad, forward=forward: done.append(forward))
        state["held"] = max(state["held"], sum(count > 0 for count in live.values()))

    handles = [stage.register_forward_pre_hook(before), stage.register_forward_hook(after)]
    try:
        with recording(flops=False, saved=False) as record, \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = fn(args[0], args[1], stage, *args[2:])
    finally:
        for handle in handles:
            handle.remove()
    calls = [(c["kind"], c["bytes"], c["peer"]) for c in record.summary()["calls"]
             if c["kind"] in ("send", "recv")]
    return out, {"held": state["held"], "kept": state["kept"], "calls": calls}


def _messages(rank: int, world_size: int, actions: list) -> list:
    """The sends and receives rank `rank` makes for its actions, in order: a forward receives
    its input from the previous rank and sends its output on; a backward receives the output's
    gradient from the next rank and sends the input's back."""
    size, prev, nxt = ROWS * WIDTH * 4, rank - 1, rank + 1
    calls = []
    for _, kind, _ in actions:
        if kind == "F":
            calls += [("recv", size, prev)] * (prev >= 0) + [("send", size, nxt)] * (
                nxt < world_size)
        else:
            calls += [("recv", size, nxt)] * (nxt < world_size) + [("send", size, prev)] * (
                prev >= 0)
    return calls


def _stage_harness(rank, world_size, fn, cases):
    """Each case (name, order, M, seed): the learner's run_stage on this rank's stage. Returns
    per case (its return value, the stage's gradients, what it sent) through the case loop
    (checks.run_cases)."""
    def one_case(case):
        _, order, M, seed = case
        stage = _stage_model(seed, world_size)[rank]
        x, y = _stage_batch(seed, M)
        inputs = list(x.split(ROWS)) if rank == 0 else None
        targets = list(y.split(ROWS)) if rank == world_size - 1 else None
        out, measured = _measured(stage, fn, rank, world_size, [tuple(a) for a in order[rank]],
                                  inputs, targets, (ROWS, WIDTH))
        grads = [None if p.grad is None else p.grad.detach().clone() for p in stage.parameters()]
        return out, grads, measured

    return run_cases(rank, world_size, cases, one_case)


def _two_flushes(S: int, M: int) -> list:
    """GPipe over the first M - 1 micro-batches, then the last one alone: the most held is
    not what is held at the last forward."""
    return [[(s, "F", mb) for mb in range(M - 1)] + [(s, "B", mb) for mb in range(M - 1)]
            + [(s, "F", M - 1), (s, "B", M - 1)] for s in range(S)]


def _check_messages(where: str, rank: int, S: int, order: list, measured: dict) -> None:
    """Rank `rank`'s sends and receives against what its actions make, in order."""
    want_calls, calls = _messages(rank, S, order[rank]), measured["calls"]
    if calls != want_calls:
        at = next((i for i, (a, b) in enumerate(zip(calls, want_calls, strict=False))
                   if a != b),
                  min(len(calls), len(want_calls)))
        got_call = "nothing" if at >= len(calls) else "a {} of {} B with rank {}".format(
            *calls[at])
        want_call = "nothing" if at >= len(want_calls) else \
            "a {} of {} B with rank {}".format(*want_calls[at])
        raise AssertionError(f"{where}: rank {rank}'s message {at + 1} is {got_call}, "
                             f"but running its actions in order it is {want_call} "
                             f"({len(calls)} sends and receives, expected "
                             f"{len(want_calls)})")


def _stage_verdict(S: int, cases) -> None:
    import torch
    import torch.nn.functional as F

    from distlab.pipeline_parallel import peak_in_flight

    for (name, order, M, seed), entries in cases:
        where = f"world_size={S}, {name} order, M={M}"
        for rank, entry in enumerate(entries):  # the ranks that finished first: a wrong message
            if entry[0] == "ok":  # there names the mistake, where a peer left waiting only broke
                _check_messages(where, rank, S, order, entry[1][2])
        first_rank_failure(where, entries)
        model = _stage_model(seed, S)
        x, y = _stage_batch(seed, M)
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            losses = [F.mse_loss(model(xs), ys).item()
                      for xs, ys in zip(x.split(ROWS), y.split(ROWS), strict=True)]
        peaks = peak_in_flight(order)
        for rank, (_, (out, grads, measured)) in enumerate(entries):
            try:
                got_losses, peak = out
            except (TypeError, ValueError):
                raise AssertionError(f"{where}: rank {rank} returned {out!r:.80}, expected "
                                     "(losses, peak)") from None
            if rank == S - 1:
                check_close(got_losses, losses, f"{where}, rank {rank}", "the losses",
                            rtol=1e-5, atol=1e-6)
            _check_messages(where, rank, S, order, measured)
            if measured["held"] != peaks[rank]:
                raise AssertionError(f"{where}: rank {rank} held the activations of up to "
                                     f"{measured['held']} micro-batches at once (counted from "
                                     "what autograd kept for their backward while it ran), but "
                                     f"its actions in this order hold at most {peaks[rank]}: "
                                     "run them in the order given")
            if measured["kept"]:
                raise AssertionError(f"{where}: rank {rank} still held the input of "
                                     f"{measured['kept']} micro-batch(es) after their backward "
                                     "had run: take a micro-batch out of the stash at its "
                                     "backward, so that its memory can go")
            if peak != measured["held"]:
                raise AssertionError(f"{where}: rank {rank} reports a peak of {peak!r} "
                                     f"micro-batches held, but it held up to "
                                     f"{measured['held']} at once (measured while it ran)")
            for (pname, param), got in zip(model[rank].named_parameters(), grads, strict=True):
                if got is None:
                    raise AssertionError(f"{where}: rank {rank}'s stage got no gradient for "
                                         f"its {pname}")
                check_tensor(got, param.grad, where, rank, f"the gradient of its {pname}",
                             "the unsplit model's is")


@exercise
def run_stage(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    for S in (1, 2, 3, 4):
        cases = []
        for name, make in (("GPipe", _gpipe), ("1F1B", _one_f_one_b),
                           ("two-flush", _two_flushes)):
            M = int(rng.integers(3 if name == "two-flush" else 1, 7))
            cases.append((name, make(S, M), M, int(rng.integers(0, 1000))))
        _stage_verdict(S, each_case(_stage_harness, fn, S, cases))


# ---------------------------------------------------------------- real ranks: torch pipelining


def _recording_steps(fn, steps: list):
    """fn, but with schedules whose `step` appends to `steps` what it was given: (how many
    positional arguments, {keyword: whether it is not None}). The learner's own function keeps
    its code; only the schedule classes it names are wrapped."""
    import types

    globs = getattr(fn, "__globals__", None)
    if not isinstance(fn, types.FunctionType) or globs is None:
        return fn

    def recording(base):
        class Recorded(base):
            def step(self, *args, **kwargs):
                steps.append((len(args), {k: v is not None for k, v in kwargs.items()}))
                return super().step(*args, **kwargs)

        Recorded.__name__, Recorded.__qualname__ = base.__name__, base.__qualname__
        return Recorded

    names = {name: recording(globs[name]) for name in ("ScheduleGPipe", "Schedule1F1B")
             if isinstance(globs.get(name), type)}
    return with_trusted(fn, **names)


def _pipelining_harness(rank, world_size, fn, cases):
    """Each case (schedule, M, seed): the learner's pipelining_step on this rank's stage of
    the model. Returns ("ok", (losses, gradients, what step was given)) or (kind, text) per
    case."""
    steps = []
    fn = _recording_steps(fn, steps)

    def one_case(case):
        schedule, M, seed = case
        part = _stage_model(seed, world_size)[rank]
        x, y = _stage_batch(seed, M)
        steps.clear()
        try:
            out = fn(rank, world_size, part, schedule, x, y, M)
        except Exception as err:
            if str(err):
                raise
            # torch's pipelining asserts without a message
            raise type(err)("(a check inside torch.distributed.pipelining failed)") from err
        grads = [None if p.grad is None else p.grad.detach().clone() for p in part.parameters()]
        return out, grads, list(steps)

    return run_cases(rank, world_size, cases, one_case)


def _check_step_inputs(steps, rank: int, S: int, where: str):
    """Each rank gives step what its stage needs: the batch on the first, the targets and the
    loss list on the last, nothing in between."""
    for positional, keywords in steps:
        if rank == 0 and positional == 0 and not keywords:
            raise AssertionError(f"{where}: rank 0 gave step no input: the first stage is the "
                                 "one that feeds the batch into the pipeline")
        if rank > 0 and positional:
            raise AssertionError(f"{where}: rank {rank} gave step the batch: only the first "
                                 "stage reads it; the others receive activations")
        if rank < S - 1 and keywords.get("target"):
            raise AssertionError(f"{where}: rank {rank} gave step the targets: only the last "
                                 "stage computes the loss, so only it needs them")


@exercise
def pipelining_step(fn, rng):
    import torch
    import torch.nn.functional as F

    from distlab import require_filled

    require_filled(fn)
    for S in (2, 3):
        cases = [(schedule, S + int(rng.integers(0, 3)), int(rng.integers(0, 1000)))
                 for schedule in ("GPipe", "1F1B")]
        for (schedule, M, seed), entries in each_case(_pipelining_harness, fn, S, cases):
            where = f"world_size={S}, {schedule}, M={M}"
            first_rank_failure(where, entries)
            model = _stage_model(seed, S)
            x, y = _stage_batch(seed, M)
            F.mse_loss(model(x), y).backward()
            with torch.no_grad():
                losses = [F.mse_loss(model(xs), ys).item()
                          for xs, ys in zip(x.tensor_split(M), y.tensor_split(M), strict=True)]
            for rank, (_, (out, grads, steps)) in enumerate(entries):
                _check_step_inputs(steps, rank, S, where)
                if rank == S - 1:
                    check_close(out, losses, f"{where}, rank {rank}", "the losses", rtol=1e-5,
                                atol=1e-6)
                for (pname, param), got in zip(model[rank].named_parameters(), grads,
                                               strict=True):
                    if got is None:
                        raise AssertionError(f"{where}: rank {rank}'s stage got no gradient "
                                             f"for its {pname}")
                    check_tensor(got, param.grad, where, rank, f"the gradient of its {pname}",
                                 "the unsplit model's is")


# ---------------------------------------------------------------- activation checkpointing


def _saved_oracle(depth: int, width: int, batch: int, plain: int, seed: int):
    """(bytes of non-weight tensors autograd saves, gradients) for the notebook's block stack,
    built as make_blocks builds it, its first `plain` blocks run as they are and the others
    checkpointed, the global RNG restored afterwards."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        blocks = nn.ModuleList([nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                              nn.Linear(4 * width, width))
                                for _ in range(depth)])
        h = torch.randn(batch, width)
    weights = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    sizes = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for i, block in enumerate(blocks):
            h = block(h) if i < plain else checkpoint(block, h, use_reentrant=False)
        loss = h.square().mean()
    loss.backward()
    return sum(sizes), [p.grad for p in blocks.parameters()]


def _fewest(depth: int, width: int, batch: int, budget: float, seed: int):
    """(bytes, gradients) of the step with as few blocks checkpointed as fit `budget` (every
    block if none fits), each count measured by running it, and the bytes of every count."""
    measured = [_saved_oracle(depth, width, batch, plain, seed) for plain in range(depth + 1)]
    fits = [plain for plain, (saved, _) in enumerate(measured) if saved <= budget]
    return measured[max(fits) if fits else 0], [saved for saved, _ in measured]


def _blocks(depth: int, width: int):
    """The notebook's make_blocks, built here (the RNG as the caller left it)."""
    from torch import nn

    return nn.ModuleList([nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                        nn.Linear(4 * width, width)) for _ in range(depth)])


def _counted_call(fn, depth: int, width: int, batch: int, budget: float, seed: int):
    """(what fn returned, the bytes of non-weight tensors autograd kept while it ran).

    The count does not trust the function's own: our saved_tensors_hooks sit outside the call,
    and any saved_tensors_hooks the function opens (the notebook's count) passes every tensor
    through ours first (only the innermost hooks see a saved tensor). make_blocks is ours, so
    the weights are known."""
    import torch

    original = torch.autograd.graph.saved_tensors_hooks
    built, counted = [], [0]

    def make_blocks(depth_, width_):
        blocks = _blocks(depth_, width_)
        built.append({p.untyped_storage().data_ptr() for p in blocks.parameters()})
        return blocks

    def count(t):
        if not any(t.untyped_storage().data_ptr() in weights for weights in built):
            counted[0] += t.numel() * t.element_size()
        return t

    class Counted(original):
        def __init__(self, pack_hook, unpack_hook):
            super().__init__(lambda t: pack_hook(count(t)), unpack_hook)

    learner = with_trusted(fn, make_blocks=make_blocks)
    torch.autograd.graph.saved_tensors_hooks = Counted
    try:
        with original(count, lambda t: t):
            out = learner(depth, width, batch, budget, seed=seed)
    finally:
        torch.autograd.graph.saved_tensors_hooks = original
    return out, counted[0]


def _saved_harness(rank, world_size, fn, cases):
    """Each case (depth, width, batch, budget, seed): the learner's activation_bytes run
    with what autograd keeps counted from below: ("ok", (reported bytes, counted bytes, grads))
    or (kind, text), stopping at the first failure."""
    def one_case(case):
        out, counted = _counted_call(fn, *case)
        try:
            reported, grads, _ = out
        except (TypeError, ValueError):
            raise ValueError(f"expected (saved, grads, seconds), got {out!r:.80}") from None
        if isinstance(grads, list | tuple):
            grads = [None if g is None else g.detach().clone() for g in grads]
        return reported, counted, grads

    return run_cases(rank, world_size, cases, one_case)


@exercise
def activation_bytes(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    sizes = [(1, 2, 1), (2, 4, 3), (3, 8, 2), (5, 4, 1)]
    sizes += [(int(rng.integers(1, 6)), int(rng.integers(2, 17)), int(rng.integers(1, 9)))
              for _ in range(4)]
    cases = []
    for depth, width, batch in sizes:
        seed, unit = int(rng.integers(0, 1000)), batch * width * 4
        _, totals = _fewest(depth, width, batch, 0, seed)
        plain = int(rng.integers(0, depth + 1))  # a budget at, or just above, some count's bytes
        budgets = [totals[plain], totals[plain] + int(rng.integers(1, 8)) * unit,
                   totals[plain] + 7 * unit + unit // 2, totals[0] - unit, float("inf")]
        cases += [(depth, width, batch, budget, seed) for budget in budgets]
    for (depth, width, batch, budget, seed), entries in each_case(_saved_harness, fn, 1, cases):
        unit = batch * width * 4
        shown = "unlimited" if budget == float("inf") else f"{budget / unit:g} units"
        where = f"depth={depth}, width={width}, batch={batch}, budget={shown}"
        ((reported, counted, grads),) = rank_values(where, entries)
        (want, want_grads), totals = _fewest(depth, width, batch, budget, seed)
        if counted > max(budget, totals[0]):
            raise AssertionError(
                f"{where}: autograd kept {counted / unit:g} (batch, width) tensors' worth for "
                "the backward (counted while it ran), over the budget: a plain block keeps what "
                "each of its operations' backward needs, a checkpointed block only its input")
        if counted != want:
            raise AssertionError(
                f"{where}: autograd kept {counted / unit:g} (batch, width) tensors' worth for "
                f"the backward (counted while it ran); with fewer blocks checkpointed the step "
                f"keeps {want / unit:g} and stays within the budget: each checkpointed block "
                "costs one more forward, so checkpoint only as many as the budget needs")
        check_close(reported, counted, where, "the activation bytes reported (autograd kept "
                    f"{counted} B, counted while it ran)")
        if not isinstance(grads, list | tuple) or len(grads) != len(want_grads):
            raise AssertionError(f"{where}: expected one gradient per parameter "
                                 f"({len(want_grads)})")
        for number, (got, expected) in enumerate(zip(grads, want_grads, strict=True)):
            if got is None:
                raise AssertionError(f"{where}: parameter {number} got no gradient")
            check_tensor(got, expected, where, what=f"the gradient of parameter {number}")


@exercise
def predicted_activation_bytes(fn, rng):
    cases = [(1, 2, 1), (2, 4, 3), (8, 256, 64), (3, 8, 2)]
    cases += [(int(rng.integers(1, 7)), int(rng.integers(2, 33)), int(rng.integers(1, 17)))
              for _ in range(6)]
    for depth, width, batch in cases:
        unit = batch * width * 4
        for checkpointed in (False, True):
            where = (f"depth={depth}, width={width}, batch={batch}, "
                     f"checkpointed={checkpointed}")
            got = fn(depth, width, batch, checkpointed)
            want, _ = _saved_oracle(depth, width, batch, 0 if checkpointed else depth, 0)
            if not isinstance(got, int | float | np.integer | np.floating):
                raise AssertionError(f"{where}: expected a number of bytes, got {got!r:.80}")
            if got != want:  # not the count itself: the prediction is asked before it
                raise AssertionError(f"{where}: you predict {got / unit:g} (batch, width) "
                                     f"tensors' worth of bytes; autograd keeps "
                                     f"{'more' if want > got else 'fewer'} (counted with "
                                     "saved_tensors_hooks)")
