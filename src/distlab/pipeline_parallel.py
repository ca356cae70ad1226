"""Pipeline schedules: simulate and draw an order you give it (this module makes none).

An order says what each rank runs, in sequence: `order[r]` is a list of actions
`(stage, kind, microbatch)`, kind "F" (forward), "B" (backward) or "W" (weight gradient, when
the backward is split into B, the input gradient, and W). With v chunks per rank, rank r holds
stages r, r + S, r + 2S, ...

    tl = simulate(order)          # each action as early as its inputs allow: tl.makespan,
                                  # tl.bubble, tl.bubble_over_ideal, tl.messages, tl.start
    peak_in_flight(order)         # {stage: most micro-batches holding activations at once}
    print(text_gantt(order))      # show_gantt(order): the same as a chart
    show_schedules({"GPipe": gpipe_order, ...})   # your generators, with sliders for S, M, v

Costs: `costs["F"]` a forward, `costs["B"]` a whole backward, `costs["W"]` the weight-gradient
part of it; a B whose W is in the order too computes only the rest (B - W).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from distlab.collectives import _show

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
    num_stages: int

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


def _check(order, num_stages, num_microbatches) -> tuple[dict, set, int]:
    """rank_of, the (stage, mb) pairs with a W, and the number of stages; raise ScheduleError
    if an action is malformed, missing or repeated, or a stage is on two ranks."""
    if not isinstance(order, list | tuple) or not all(isinstance(a, list | tuple) for a in order):
        raise ScheduleError(f"an order is a list with one list of actions per rank, not {order!r}")
    rank_of, seen = {}, set()
    for rank, actions in enumerate(order):
        for action in map(tuple, actions):
            if len(action) != 3 or action[1] not in KINDS or not all(
                    type(x) is int and x >= 0 for x in (action[0], action[2])):
                raise ScheduleError(f"rank {rank}: {action!r} is not an action "
                                    "(stage, 'F'/'B'/'W', micro-batch)")
            if rank_of.setdefault(action[0], rank) != rank:
                raise ScheduleError(f"stage {action[0]} appears on rank {rank_of[action[0]]} "
                                    f"and on rank {rank}")
            if action in seen:
                raise ScheduleError(f"{_name(action)} appears twice (rank {rank})")
            seen.add(action)
    stages = max(rank_of, default=-1) + 1 if num_stages is None else num_stages
    mbs = max((a[2] for a in seen), default=-1) + 1 if num_microbatches is None else \
        num_microbatches
    for action in sorted(seen):
        if action[0] >= stages or action[2] >= mbs:
            raise ScheduleError(f"{_name(action)} does not exist: there are {stages} stages "
                                f"and {mbs} micro-batches")
    for stage, kind, mb in ((s, k, m) for s in range(stages) for m in range(mbs) for k in "FB"):
        if (stage, kind, mb) not in seen:
            raise ScheduleError(f"{_name((stage, kind, mb))} never runs")
    return rank_of, {(a[0], a[2]) for a in seen if a[1] == "W"}, stages


def simulate(order, costs=None, num_stages=None, num_microbatches=None,
             latency: float = 0.0) -> Timeline:
    """Run `order` on a model clock: each rank takes its actions in sequence, each as soon as
    the actions it needs are done (+ `latency` when they ran on another rank). Raises
    ScheduleError for an action missing or repeated, or ranks that wait on each other forever."""
    costs = {**COSTS, **(costs or {})}
    rank_of, split, stages = _check(order, num_stages, num_microbatches)

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
    stuck = [rank for rank, actions in enumerate(order) if position[rank] < len(actions)]
    if stuck:
        raise ScheduleError("deadlock: " + _wait_chain(order, position, stuck[0], stages, end,
                                                       rank_of))
    busy = [sum(end[a] - start[a] for a in actions) for actions in order]
    return Timeline(order, start, end, rank_of, max(end.values(), default=0.0), busy,
                    messages, stages)


def _wait_chain(order, position, rank, stages, end, rank_of) -> str:
    """Who waits for whom, from `rank` along the chain of waiting ranks."""
    text, seen = f"rank {rank} waits to run {_name(order[rank][position[rank]])}: it needs ", set()
    while True:
        seen.add(rank)
        need = next(n for n in needs(order[rank][position[rank]], stages) if n not in end)
        other = rank_of[need[0]]
        if other == rank:
            return text + f"{_name(need)}, which comes later in rank {rank}'s own order"
        ahead = order[other][position[other]]
        if ahead != need:
            return text + f"{_name(need)}, which rank {other} only runs after its own " \
                          f"{_name(ahead)}"
        if other in seen:
            return text + f"{_name(need)} from rank {other}, which waits too"
        text += f"{_name(need)} from rank {other}, which waits for "
        rank = other


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
    return order_or_timeline if isinstance(order_or_timeline, Timeline) else \
        simulate(order_or_timeline, costs)


def text_gantt(order_or_timeline, costs=None) -> str:
    """One row per rank, one column per time unit: `F3` forward of micro-batch 3, `.` idle
    (with chunks, `F3:1` is micro-batch 3 on the rank's chunk 1). Needs whole-number times."""
    tl = _timeline(order_or_timeline, costs)
    if any(t != int(t) for t in (*tl.start.values(), *tl.end.values())):
        raise ValueError("a text Gantt needs whole-number costs; draw this one with show_gantt")
    ranks, steps = len(tl.order), int(tl.makespan)
    cells = [["."] * steps for _ in range(ranks)]
    for rank, actions in enumerate(tl.order):
        for stage, kind, mb in actions:
            chunk = f":{stage // ranks}" if tl.num_stages > ranks else ""
            for t in range(int(tl.start[stage, kind, mb]), int(tl.end[stage, kind, mb])):
                cells[rank][t] = f"{kind}{mb}{chunk}"
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


def show_gantt(order_or_timeline, costs=None, title: str | None = None, name: str = "schedule"):
    """Draw one order as a Gantt chart (described in words for screen readers)."""
    tl = _timeline(order_or_timeline, costs)
    ax = draw_gantt(tl, title=title)
    ax.figure.tight_layout()
    peak = max(peak_in_flight(tl.order, per="rank"), default=0)
    _show(ax.figure, f"Gantt chart of the {name} on {len(tl.order)} ranks: it ends at time "
          f"{tl.makespan:g}; bubble {tl.bubble:.1%} of all time; at most {peak} micro-batches' "
          "activations held on one rank.")


def show_schedules(generators: dict, S: int = 4, M: int = 8, v: int = 2, costs=None):
    """Your generators side by side, with sliders for S, M and v. `generators` maps a name to
    fn(S, M), or fn(S, M, v) for one with v chunks per rank (an action on a chunk then costs
    1/v of a whole stage's). The time axis is shared."""
    import inspect

    def draw(S=S, M=M, v=v):
        timelines, scales = {}, {}
        for name, fn in generators.items():
            chunked = len(inspect.signature(fn).parameters) >= 3
            scales[name] = v if chunked else 1
            cost = {k: c / scales[name] for k, c in {**COSTS, **(costs or {})}.items()}
            timelines[name] = simulate(fn(S, M, v) if chunked else fn(S, M), cost)
        end = max(tl.makespan for tl in timelines.values())
        fig, axes = plt.subplots(len(timelines), 1, squeeze=False,
                                 figsize=(12, sum(0.9 + 0.4 * S for _ in timelines)))
        for ax, (name, tl) in zip(axes[:, 0], timelines.items(), strict=True):
            peak = max(peak_in_flight(tl.order, per="rank")) / scales[name]  # a chunk's: 1/v
            draw_gantt(tl, ax, f"{name}: bubble {tl.bubble:.1%} of all time, at most {peak:g} "
                               f"micro-batches' activations on a rank, {tl.messages} sends")
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
    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items(), strict=True):
        ax.bar(labels, values, color="tab:purple")
        ax.set_title(name, fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{name}: " + ", ".join(f"{label} {value:.3g}" for label, value in
                                zip(labels, values, strict=True))
        for name, values in series.items()))
