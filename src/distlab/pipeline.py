"""Pipeline schedules: simulate and draw an order you give it.

An order says what each rank runs, in sequence: `order[r]` is a list of actions
`(stage, kind, microbatch)`, kind "F" (forward), "B" (backward) or "W" (weight gradient, when
the backward is split into B for the input gradient and W). With v model chunks per rank,
rank r holds stages r, r + S, r + 2S, ...

    tl = simulate(order)               # every action as early as its inputs allow
    tl.makespan, tl.bubble, tl.bubble_over_ideal, tl.messages
    peak_in_flight(order)              # {stage: most micro-batches holding activations}
    print(text_gantt(order))           # one row per rank, one column per time unit
    show_gantt(order)                  # the same as a matplotlib chart
    show_schedules({"GPipe": fn, ...}) # sliders for S, M (and v) over your generators

Costs: `costs["F"]` a forward, `costs["B"]` a whole backward, `costs["W"]` the weight-gradient
part of it; a B whose W is in the order too computes only the rest (B - W). This module makes
no schedules: the generators are yours, in the notebook.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

COSTS = {"F": 1.0, "B": 2.0, "W": 1.0}  # backward ~ twice a forward; W half of it
COLOURS = {"F": "tab:blue", "B": "tab:orange", "W": "tab:green"}
KINDS = tuple(COLOURS)


class ScheduleError(ValueError):
    """An order that cannot run: a missing or repeated action, or ranks waiting forever."""


def _name(action) -> str:
    stage, kind, mb = action
    return f"{kind} of micro-batch {mb} on stage {stage}"


@dataclass
class Timeline:
    """When every action of an order runs (each rank in its order, each action as soon as the
    actions it needs have finished)."""

    order: list
    start: dict  # action -> start time
    end: dict  # action -> end time
    rank_of: dict  # stage -> rank
    makespan: float
    busy: list  # per rank: time spent computing
    messages: int  # dependencies between actions on different ranks (sends)
    num_stages: int = field(default=0)

    @property
    def bubble(self) -> float:
        """Idle share of all ranks' time: idle / (ranks x makespan)."""
        total = len(self.busy) * self.makespan
        return (total - sum(self.busy)) / total if total else 0.0

    @property
    def bubble_over_ideal(self) -> float:
        """Idle time over the compute time: idle / work."""
        work = sum(self.busy)
        return (len(self.busy) * self.makespan - work) / work if work else 0.0


def needs(action, num_stages: int) -> list:
    """The actions this one must wait for."""
    stage, kind, mb = action
    if kind == "F":
        return [(stage - 1, "F", mb)] if stage > 0 else []
    if kind == "B":  # its own forward, and the gradient from the next stage (if any)
        later = [(stage + 1, "B", mb)] if stage + 1 < num_stages else []
        return [(stage, "F", mb), *later]
    return [(stage, "B", mb)]


def _check(order, num_stages, num_microbatches) -> tuple[dict, set, int, int]:
    """rank_of, the (stage, mb) pairs with a W, and the sizes; raise ScheduleError if an action
    is malformed, missing or repeated, or a stage is on two ranks."""
    if not isinstance(order, list | tuple) or not order:
        raise ScheduleError(f"an order is a list with one list of actions per rank, not {order!r}")
    rank_of, seen, split = {}, set(), set()
    for rank, actions in enumerate(order):
        if not isinstance(actions, list | tuple):
            raise ScheduleError(f"rank {rank}: expected a list of actions, got {actions!r}")
        for action in actions:
            if (not isinstance(action, list | tuple) or len(action) != 3
                    or action[1] not in KINDS or not all(
                        isinstance(x, int) and not isinstance(x, bool) and x >= 0
                        for x in (action[0], action[2]))):
                raise ScheduleError(f"rank {rank}: {action!r} is not an action "
                                    "(stage, 'F'/'B'/'W', micro-batch)")
            action = tuple(action)
            if rank_of.setdefault(action[0], rank) != rank:
                raise ScheduleError(f"stage {action[0]} appears on rank {rank_of[action[0]]} "
                                    f"and on rank {rank}")
            if action in seen:
                raise ScheduleError(f"{_name(action)} appears twice (rank {rank})")
            seen.add(action)
            if action[1] == "W":
                split.add((action[0], action[2]))
    stages = num_stages if num_stages is not None else max(rank_of, default=-1) + 1
    mbs = num_microbatches
    if mbs is None:
        mbs = max((a[2] for a in seen), default=-1) + 1
    for action in sorted(seen):
        if action[0] >= stages or action[2] >= mbs:
            raise ScheduleError(f"{_name(action)} does not exist: there are {stages} stages "
                                f"and {mbs} micro-batches")
    for stage in range(stages):
        for mb in range(mbs):
            for kind in "FB":
                if (stage, kind, mb) not in seen:
                    raise ScheduleError(f"{_name((stage, kind, mb))} never runs")
    return rank_of, split, stages, mbs


def simulate(order, costs=None, num_stages=None, num_microbatches=None,
             latency: float = 0.0) -> Timeline:
    """Run `order` on a model clock: each rank takes its actions in sequence, each as soon as
    the actions it needs are done (+ `latency` when they ran on another rank). Raises
    ScheduleError for an action missing or repeated, or ranks that wait on each other forever."""
    costs = {**COSTS, **(costs or {})}
    rank_of, split, stages, _ = _check(order, num_stages, num_microbatches)

    def cost(action):
        stage, kind, mb = action
        if kind == "B" and (stage, mb) in split:
            return costs["B"] - costs["W"]
        return costs[kind]

    order = [[tuple(a) for a in actions] for actions in order]
    start, end, messages = {}, {}, 0
    position, clock = [0] * len(order), [0.0] * len(order)
    progress = True
    while progress:
        progress = False
        for rank, actions in enumerate(order):
            while position[rank] < len(actions):
                action = actions[position[rank]]
                inputs = needs(action, stages)
                if any(need not in end for need in inputs):
                    break
                ready = [end[n] + (latency if rank_of[n[0]] != rank else 0.0) for n in inputs]
                messages += sum(rank_of[n[0]] != rank for n in inputs)
                start[action] = max([clock[rank], *ready])
                end[action] = clock[rank] = start[action] + cost(action)
                position[rank] += 1
                progress = True
    stuck = [(rank, actions[position[rank]]) for rank, actions in enumerate(order)
             if position[rank] < len(actions)]
    if stuck:
        rank, action = stuck[0]
        waits = [n for n in needs(action, stages) if n not in end]
        other = rank_of.get(waits[0][0], rank)
        at = (f"which rank {other} only runs after its own {_name(order[other][position[other]])}"
              if other != rank else f"which comes later in rank {rank}'s own order")
        raise ScheduleError(f"deadlock: rank {rank} waits to run {_name(action)}: it needs "
                            f"{_name(waits[0])}, {at}")
    busy = [sum(end[a] - start[a] for a in actions) for actions in order]
    return Timeline(order, start, end, rank_of, max(end.values(), default=0.0), busy,
                    messages, stages)


def peak_in_flight(order, per: str = "stage"):
    """The most micro-batches holding activations at once: their forward has run and their
    backward (its W, when split) has not. Read off the order alone. per="stage": {stage: peak};
    per="rank": one peak per rank, all its stages (chunks) counted together."""
    if per not in ("stage", "rank"):
        raise ValueError(f"per must be 'stage' or 'rank', not {per!r}")
    split = {(a[0], a[2]) for actions in order for a in actions if a[1] == "W"}
    peaks, by_stage = [], defaultdict(int)
    for actions in order:
        held, stage_held, peak = 0, defaultdict(int), 0
        for stage, kind, mb in actions:
            if kind == "F":
                held, stage_held[stage] = held + 1, stage_held[stage] + 1
                by_stage[stage] = max(by_stage[stage], stage_held[stage])
            elif kind == ("W" if (stage, mb) in split else "B"):
                held, stage_held[stage] = held - 1, stage_held[stage] - 1
            peak = max(peak, held)
        peaks.append(peak)
    return peaks if per == "rank" else dict(sorted(by_stage.items()))


def _timeline(order_or_timeline, costs) -> Timeline:
    if isinstance(order_or_timeline, Timeline):
        return order_or_timeline
    return simulate(order_or_timeline, costs)


def _label(action, num_ranks: int, num_stages: int) -> str:
    stage, kind, mb = action
    chunk = f":{stage // num_ranks}" if num_stages > num_ranks else ""
    return f"{kind}{mb}{chunk}"


def text_gantt(order_or_timeline, costs=None) -> str:
    """One row per rank, one column per time unit: `F3` forward of micro-batch 3, `.` idle
    (with chunks, `F3:1` is micro-batch 3 on the rank's chunk 1). Needs whole-number times."""
    tl = _timeline(order_or_timeline, costs)
    if any(t != int(t) for t in (*tl.start.values(), *tl.end.values())):
        raise ValueError("a text Gantt needs whole-number costs; draw this one with show_gantt")
    ranks, steps = len(tl.order), int(tl.makespan)
    cells = [["."] * steps for _ in range(ranks)]
    for rank, actions in enumerate(tl.order):
        for action in actions:
            for t in range(int(tl.start[action]), int(tl.end[action])):
                cells[rank][t] = _label(action, ranks, tl.num_stages)
    width = max([2, *(len(c) for row in cells for c in row)]) + 1
    head = "t".ljust(7) + "".join(str(t).ljust(width) for t in range(steps))
    rows = [f"rank {r}".ljust(7) + "".join(c.ljust(width) for c in row)
            for r, row in enumerate(cells)]
    return "\n".join(line.rstrip() for line in [head, *rows])


def draw_gantt(timeline: Timeline, ax=None, title: str | None = None):
    """A Gantt chart: one bar per action (blue F, orange B, green W, chunks lighter to darker),
    idle time hatched grey."""
    ranks = len(timeline.order)
    ax = ax or plt.subplots(figsize=(min(3 + timeline.makespan * 0.35, 14), 0.6 + 0.5 * ranks))[1]
    chunks = max(1, math.ceil(timeline.num_stages / ranks))
    for rank, actions in enumerate(timeline.order):
        ax.broken_barh([(0, timeline.makespan)], (rank - 0.4, 0.8), facecolor="whitesmoke",
                       edgecolor="lightgrey", hatch="//", linewidth=0)
        for action in actions:
            begin, length = timeline.start[action], timeline.end[action] - timeline.start[action]
            alpha = 1.0 - 0.45 * (action[0] // ranks) / max(1, chunks - 1) if chunks > 1 else 1
            ax.broken_barh([(begin, length)], (rank - 0.4, 0.8), facecolor=COLOURS[action[1]],
                           alpha=alpha, edgecolor="white", linewidth=0.8)
            if length >= 0.6 and timeline.makespan <= 80:
                ax.text(begin + length / 2, rank, str(action[2]), ha="center", va="center",
                        fontsize=7, color="white")
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xlim(0, timeline.makespan)
    ax.set_xlabel("time")
    used = sorted({a[1] for actions in timeline.order for a in actions}, key=KINDS.index)
    handles = [Patch(color=COLOURS[k], label={"F": "forward", "B": "backward",
                                              "W": "weight grad"}[k]) for k in used]
    handles.append(Patch(facecolor="whitesmoke", edgecolor="lightgrey", hatch="//",
                         label="bubble"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_title(title or f"bubble {timeline.bubble:.1%} of all time "
                 f"({timeline.bubble_over_ideal:.1%} of the compute time)", fontsize=10)
    return ax


def describe(timeline: Timeline, name: str = "schedule") -> str:
    """The chart in words, for screen readers and HTML alt text."""
    peak = max(peak_in_flight(timeline.order, per="rank"), default=0)
    return (f"Gantt chart of the {name} on {len(timeline.order)} ranks: it ends at time "
            f"{timeline.makespan:g}; bubble {timeline.bubble:.1%} of all time; at most "
            f"{peak} micro-batches' activations held on one rank.")


def show_gantt(order_or_timeline, costs=None, title: str | None = None, name: str = "schedule"):
    """Draw one order as a Gantt chart (described in words for screen readers)."""
    from distlab.collectives import _show

    tl = _timeline(order_or_timeline, costs)
    ax = draw_gantt(tl, title=title)
    ax.figure.tight_layout()
    _show(ax.figure, describe(tl, name))


def show_schedules(generators: dict, S: int = 4, M: int = 8, v: int = 2, costs=None):
    """Your generators side by side, with sliders for S, M and v. `generators` maps a name to
    fn(S, M), or fn(S, M, v) for one with v chunks per rank (an action on a chunk then costs
    1/v of a whole stage's). The time axis is shared."""
    import inspect

    from distlab.collectives import _show

    def draw(S=S, M=M, v=v):
        timelines = {}
        for name, fn in generators.items():
            chunked = len(inspect.signature(fn).parameters) >= 3
            scale = v if chunked else 1
            cost = {k: c / scale for k, c in {**COSTS, **(costs or {})}.items()}
            timelines[name] = simulate(fn(S, M, v) if chunked else fn(S, M), cost)
        end = max(tl.makespan for tl in timelines.values())
        fig, axes = plt.subplots(len(timelines), 1, squeeze=False,
                                 figsize=(12, sum(0.9 + 0.4 * S for _ in timelines)))
        for ax, (name, tl) in zip(axes[:, 0], timelines.items(), strict=True):
            peak = max(peak_in_flight(tl.order, per="rank"))
            draw_gantt(tl, ax, f"{name}: bubble {tl.bubble:.1%} of all time, at most {peak} "
                               f"activations held on a rank, {tl.messages} sends")
            ax.set_xlim(0, end)
        fig.tight_layout()
        _show(fig, f"Gantt charts for S={S}, M={M}, v={v}: " + "; ".join(
            f"{name} ends at {tl.makespan:g}, bubble {tl.bubble:.1%}"
            for name, tl in timelines.items()))

    try:
        import ipywidgets as widgets
    except ImportError:
        return draw()
    widgets.interact(draw, S=widgets.IntSlider(value=S, min=1, max=8, description="S"),
                     M=widgets.IntSlider(value=M, min=1, max=24, description="M"),
                     v=widgets.IntSlider(value=v, min=1, max=4, description="v"))
    return None


def show_bars(labels: list, series: dict, title: str):
    """One bar chart per series (e.g. memory, time), the same labels on each."""
    from distlab.collectives import _show

    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items(), strict=True):
        ax.bar(labels, values, color=["tab:grey", "tab:purple"][: len(values)])
        ax.set_title(name, fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{name}: " + ", ".join(f"{label} {value:.3g}" for label, value in
                                zip(labels, values, strict=True))
        for name, values in series.items()))
