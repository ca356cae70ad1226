"""Pictures and measurements for notebook 02 (cost models).

    show_message_cost(alpha=5e-6, bw=10e9)                  # one message: latency, then bytes
    show_allreduce_costs({"ring": f, "tree": g}, 1e-6, 10e9, crossover=h)  # with an N slider
    records = measure({"all_reduce": None, "ring": my_ring}, sizes, world_sizes=(2,))
    show_fit(records, fits, model)                          # measured vs fitted model
    show_iteration_costs(rows, capacity)                    # stacked bars, one per layout
    copy_bandwidth()                                        # bytes/s one core copies

Every formula a learner writes comes in as an argument (their function); this module only
evaluates what it is given, draws it, and times real collectives on real ranks.
"""

from __future__ import annotations

import math
import time

import matplotlib.pyplot as plt
import numpy as np

from distlab.collectives import _show

GB = 1e9  # bytes: the network vendors' gigabyte
MiB = 2**20
COLOURS = {"ring": "tab:blue", "tree": "tab:orange", "all-to-one": "tab:grey",
           "recursive doubling": "tab:brown", "halving-doubling": "tab:purple",
           "flat ring": "tab:red", "flat, one ring per card": "tab:pink",
           "hierarchical": "tab:green"}
PARTS = [("compute", "tab:grey"), ("bubble", "lightgrey"), ("dp", "tab:blue"),
         ("tp", "tab:orange"), ("pp", "tab:green")]


def human_bytes(nbytes: float) -> str:
    """1536 -> '1.5 KiB' (powers of 1024, as memory sizes are counted)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} TiB"


def human_seconds(seconds: float) -> str:
    """0.00042 -> '420 µs'."""
    if seconds == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-6:.3g} µs"


def _log_axes(ax):
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)"), ax.set_ylabel("time (s)")
    ax.grid(True, which="major", alpha=0.3)


def show_message_cost(alpha: float, bw: float):
    """One message of n bytes costs alpha + n / bw: flat while alpha dominates, then a line."""
    sizes = np.logspace(0, 10, 200)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(sizes, alpha + sizes / bw, color="k", label="alpha + n / B")
    ax.plot(sizes, np.full_like(sizes, alpha), "--", color="tab:purple", label="alpha alone")
    ax.plot(sizes, sizes / bw, "--", color="tab:cyan", label="n / B alone")
    knee = alpha * bw
    ax.axvline(knee, color="grey", lw=0.8)
    ax.text(knee, 2 * alpha, f"  n = alpha·B = {human_bytes(knee)}", fontsize=8)
    _log_axes(ax)
    ax.set_ylim(alpha / 3, None)
    ax.set_title(f"one message, alpha = {human_seconds(alpha)}, B = {bw / GB:g} GB/s")
    ax.legend(fontsize=8)
    _show(fig, f"Log-log plot of the time of one message against its size: flat at alpha "
          f"= {human_seconds(alpha)} for small messages, then rising as size / bandwidth; the "
          f"two terms are equal at {human_bytes(knee)}.")


def draw_allreduce_costs(curves: dict, n: int, alpha: float, bw: float, crossover=None):
    """Time against message size for each curves[name](nbytes, n, alpha, bw); a curve that
    raises ValueError for this n (an algorithm for powers of two only) is left out."""
    sizes = np.logspace(0, 10, 121)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, fn in curves.items():
        try:
            times = [fn(float(size), n, alpha, bw) for size in sizes]
        except ValueError:
            continue
        ax.plot(sizes, np.maximum(times, 1e-12), label=name, color=COLOURS.get(name))
    where = crossover(n, alpha, bw) if crossover else None
    if where is not None and math.isfinite(where):
        ax.axvline(where, color="k", ls=":", lw=1)
        ax.text(where, ax.get_ylim()[1] / 3, f" ring wins above {human_bytes(where)}",
                fontsize=8)
    _log_axes(ax)
    ax.set_title(f"all-reduce on N = {n} ranks, alpha = {human_seconds(alpha)}, "
                 f"B = {bw / GB:g} GB/s")
    ax.legend(fontsize=8)
    return fig, where


def show_allreduce_costs(curves: dict, alpha: float, bw: float, n: int | None = None,
                         crossover=None):
    """The all-reduce times of `curves` for one N, or a slider over N when n is None."""

    def draw(n: int = 8):
        fig, where = draw_allreduce_costs(curves, n, alpha, bw, crossover)
        said = (f"the ring becomes faster than the tree above {human_bytes(where)}"
                if where is not None and math.isfinite(where)
                else "no crossover is marked")
        _show(fig, f"Log-log plot of all-reduce time against message size on {n} ranks for "
              f"{', '.join(curves)}; {said}.")

    if n is not None:
        return draw(n)
    import ipywidgets as widgets

    choice = widgets.SelectionSlider(options=[2, 3, 4, 8, 16, 64, 256, 1024], value=8,
                                     description="N ranks")
    widgets.interact(draw, n=choice)
    return None


def show_topology(curves: dict, nodes: int, gpus_per_node: int, intra, inter):
    """Time against size for curves[name](nbytes, nodes, gpus_per_node, intra, inter)."""
    sizes = np.logspace(0, 10, 121)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, fn in curves.items():
        times = [fn(float(s), nodes, gpus_per_node, intra, inter) for s in sizes]
        ax.plot(sizes, times, label=name, color=COLOURS.get(name))
    _log_axes(ax)
    ax.set_title(f"{nodes} nodes x {gpus_per_node} GPUs: inside {intra[1] / GB:g} GB/s, "
                 f"between {inter[1] / GB:g} GB/s")
    ax.legend(fontsize=8)
    big = [fn(1e10, nodes, gpus_per_node, intra, inter) for fn in curves.values()]
    _show(fig, f"Log-log plot of all-reduce time against message size on {nodes} nodes of "
          f"{gpus_per_node} GPUs for {', '.join(curves)}; at 10 GB they take "
          f"{', '.join(human_seconds(t) for t in big)}.")


# ---------------------------------------------------------------- per-iteration analyzer


def draw_iteration_costs(rows: list, capacity: float, highlight=None):
    """rows: (label, costs) with costs holding the PARTS in seconds, "memory" and "fits".
    Compute is left out of the bars when it is the same for every layout (it then hides the
    differences), and said in the title. Returns (figure, total seconds per row)."""
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(rows) + 2), 4.2))
    x = np.arange(len(rows))
    totals = np.array([sum(costs[part] for part, _ in PARTS) for _, costs in rows])
    computes = [costs["compute"] for _, costs in rows]
    same = np.allclose(computes, computes[0], rtol=1e-9)
    parts = PARTS[1:] if same else PARTS
    bottom = np.zeros(len(rows))
    for part, colour in parts:
        heights = np.array([costs[part] for _, costs in rows], dtype=float)
        ax.bar(x, heights, bottom=bottom, color=colour, label=part, edgecolor="white", lw=0.5)
        bottom += heights
    # a few ruinous layouts must not flatten the rest: cut the axis, print their totals
    cap = min(bottom.max(), 3 * float(np.median(bottom))) or 1.0
    for i, (label, costs) in enumerate(rows):
        if not costs["fits"]:
            ax.bar(i, min(bottom[i], 1.3 * cap), fill=False, hatch="//", edgecolor="tab:red",
                   lw=0)
        if label == highlight:
            ax.bar(i, min(bottom[i], 1.3 * cap), fill=False, edgecolor="k", lw=2)
        if bottom[i] > cap:
            ax.text(i, 1.01 * cap, f"{bottom[i]:.3g} s", ha="center", va="bottom", fontsize=7,
                    rotation=90)
    ax.set_xticks(x, [label for label, _ in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("seconds per iteration" + (" beyond compute" if same else ""))
    extra = f" on top of {human_seconds(computes[0])} of compute" if same else ""
    ax.set_title(f"per-iteration time{extra} (hatched: over {capacity / GB:g} GB per GPU)",
                 fontsize=10)
    ax.legend(fontsize=8, ncols=5, loc="upper left")
    ax.set_ylim(0, 1.35 * cap)
    return fig, totals


def show_iteration_costs(rows: list, capacity: float, highlight=None, name_best=True):
    """Stacked bars of (compute,) bubble, DP, TP and PP time for each layout in rows; the
    description names the fastest layout that fits only if `name_best`."""
    fig, totals = draw_iteration_costs(rows, capacity, highlight)
    fitting = [(t, label) for t, (label, costs) in zip(totals, rows, strict=True)
               if costs["fits"]]
    best = f"the fastest that fits is {min(fitting)[1]}" if fitting else "none fits"
    said = f"; {best}" if name_best else f"; {len(fitting)} of them fit"
    _show(fig, f"Stacked bar chart of {fig.axes[0].get_title()} for {len(rows)} layouts, "
          f"split into bubble and DP, TP, PP communication{said}.")


def explore_layouts(costs_of, layouts: list, capacity: float):
    """Dropdowns for TP and PP; shows every layout's bars, the chosen one outlined.

    costs_of(dp, tp, pp) -> costs; layouts: the valid (dp, tp, pp)."""
    import ipywidgets as widgets

    rows = [(f"dp{dp} tp{tp} pp{pp}", costs_of(dp, tp, pp)) for dp, tp, pp in layouts]
    by_split = {(tp, pp): dp for dp, tp, pp in layouts}

    def draw(tp: int, pp: int):
        if (tp, pp) not in by_split:
            print(f"tp={tp}, pp={pp} is not a valid layout for this model and cluster")
            return
        dp = by_split[(tp, pp)]
        costs = costs_of(dp, tp, pp)
        total = sum(costs[part] for part, _ in PARTS)
        verdict = "fits" if costs["fits"] else "does NOT fit"
        print(f"dp={dp} tp={tp} pp={pp}: {human_seconds(total)} per iteration; "
              f"{costs['memory'] / GB:.1f} GB per GPU of {capacity / GB:g} GB: {verdict}")
        show_iteration_costs(rows, capacity, highlight=f"dp{dp} tp{tp} pp{pp}", name_best=False)

    tps = sorted({tp for _, tp, _ in layouts})
    pps = sorted({pp for _, _, pp in layouts})
    widgets.interact(draw, tp=widgets.Dropdown(options=tps, value=tps[0], description="TP"),
                     pp=widgets.Dropdown(options=pps, value=pps[0], description="PP"))


# ---------------------------------------------------------------- measured here


def time_on_rank(rank, world_size, collective, nbytes, repeats):
    """Seconds of one all-reduce of nbytes (float32) on this group, as its slowest rank saw it:
    the lower quartile of `repeats` calls. collective(tensor) reduces in place; None means
    dist.all_reduce."""
    import torch
    import torch.distributed as dist

    x = torch.zeros(max(nbytes // 4, 1))
    reduce = collective or dist.all_reduce
    reduce(x)  # warm-up: the first call sets up connections and buffers
    dist.barrier()
    times = torch.empty(repeats, dtype=torch.float64)
    for i in range(repeats):
        start = time.perf_counter()
        reduce(x)
        times[i] = time.perf_counter() - start
    # a collective has finished when its slowest rank has
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    # on a shared machine other processes take the CPU at random moments, for milliseconds:
    # that is not the collective's time, so keep a call that was mostly left alone
    return float(torch.quantile(times, 0.25))


def copy_bandwidth(nbytes: int = 64 * MiB, repeats: int = 10) -> float:
    """Bytes per second one core copies from one tensor into another (the best of `repeats`
    copies of `nbytes`): a yardstick for a bandwidth measured on this machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        source = torch.ones(nbytes // 4)
        target = torch.empty_like(source)
        target.copy_(source)  # warm-up: the pages are touched once
        best = math.inf
        for _ in range(repeats):
            start = time.perf_counter()
            target.copy_(source)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return source.numel() * 4 / best


def repeats_for(nbytes: int) -> int:
    """Many repeats where one call is short and noisy, few where it is long."""
    return 40 if nbytes <= 64 * 1024 else 12 if nbytes <= 4 * MiB else 4


def _progress(total: int):
    """(update(done, text), close()): a progress bar in a notebook, nothing elsewhere."""
    from IPython import get_ipython

    if get_ipython() is None:
        return (lambda done, text: None), (lambda: None)
    import ipywidgets as widgets
    from IPython.display import display

    bar = widgets.IntProgress(value=0, min=0, max=total, description="measuring")
    label = widgets.Label()
    box = widgets.HBox([bar, label])
    display(box)

    def update(done, text):
        bar.value, label.value = done, text

    return update, box.close


def measure(collectives: dict, sizes, world_sizes=(2,), only=None) -> list[dict]:
    """Time each collective (name -> fn(tensor), or None for dist.all_reduce) at each size on
    each world size. only: {name: world sizes} to measure a collective on fewer world sizes.
    Returns records {name, n, nbytes, seconds}."""
    from distlab import run

    plan = [(name, n, int(size)) for n in world_sizes for name in collectives
            if n in (only or {}).get(name, world_sizes) for size in sizes]
    update, close = _progress(len(plan))
    records, start = [], time.perf_counter()
    for done, (name, n, size) in enumerate(plan):
        update(done, f"{name} on {n} ranks, {human_bytes(size)}")
        seconds = run(time_on_rank, collectives[name], size, repeats_for(size), world_size=n)[0]
        records.append({"name": name, "n": n, "nbytes": size, "seconds": seconds})
    close()
    print(f"measured {len(records)} points in {time.perf_counter() - start:.1f} s")
    return records


def show_fit(records: list, fits: dict, model, held_out=()):
    """Left: measured times (held-out sizes hollow) and the model with the fitted alpha and
    beta; right: the model's relative error per size. fits: (name, n) -> (alpha, beta);
    model(nbytes, n, alpha, bw) is the ring time."""
    fig, (ax, err_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = np.logspace(0, math.log10(max(r["nbytes"] for r in records)), 100)
    held = []
    for k, ((name, n), (alpha, beta)) in enumerate(fits.items()):
        colour = f"C{k}"
        mine = [r for r in records if (r["name"], r["n"]) == (name, n)]
        x = np.array([r["nbytes"] for r in mine], float)
        y = np.array([r["seconds"] for r in mine])
        out = np.isin(x, held_out)
        ax.plot(sizes, [model(s, n, alpha, 1 / beta) for s in sizes], color=colour,
                label=f"{name}, {n} ranks: alpha {human_seconds(alpha)}, "
                      f"1/beta {1 / beta / GB:.2g} GB/s")
        ax.scatter(x[~out], y[~out], color=colour, s=18)
        ax.scatter(x[out], y[out], facecolor="none", edgecolor=colour, s=30)
        error = np.array([model(s, n, alpha, 1 / beta) for s in x]) / y - 1
        err_ax.plot(x, 100 * error, "o-", color=colour, ms=4, label=f"{name}, {n} ranks")
        if out.any():
            held.append(f"{name} on {n} ranks {100 * np.median(abs(error[out])):.0f}%")
    _log_axes(ax)
    ax.set_title("measured (dots; hollow: held out of the fit) and model", fontsize=10)
    ax.legend(fontsize=7)
    err_ax.set_xscale("log"), err_ax.axhline(0, color="k", lw=0.8)
    err_ax.set_xlabel("message size (bytes)"), err_ax.set_ylabel("model / measured - 1 (%)")
    err_ax.set_title("the model's error", fontsize=10)
    err_ax.legend(fontsize=7)
    _show(fig, "Left: log-log plot of measured all-reduce times against message size, with "
          "the fitted alpha-beta model as lines; right: the model's relative error per size. "
          f"Median error on held-out sizes: {'; '.join(held) or 'none held out'}.")
