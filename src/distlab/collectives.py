"""Pictures for the notebooks: ring AllReduce step by step, the binary broadcast tree.

    show_ring()                        # the notebook's example ring, a slider
    show_ring(step=3)                  # one static figure: the state after step 3
    show_tree(10)                      # ranks coloured by the step they receive in

The ring's states are data (ring_example.json), recorded by the course's grading side for the
notebook's one example: the picture is right whatever state the learner's exercise is in, it
never calls the learner's code, and `show_ring??` shows no rule the learner is asked to derive
from the picture.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REDUCE, GATHER = "tab:orange", "tab:green"


def __getattr__(name: str):
    """`plt`, imported on first use: importing this module (as every rank of a notebook that
    imports it does) costs no matplotlib."""
    if name == "plt":
        import matplotlib.pyplot as plt

        return plt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class RingState:
    """What every GPU holds after `step` steps of the ring (step 0: before any)."""

    step: int
    phase: str  # "start", "phase 1", "phase 2"
    values: list  # values[i][j]: GPU i's copy of chunk j
    counts: np.ndarray  # counts[i, j]: how many GPUs' contributions that copy contains
    sends: list  # (src, dst, chunk) of the step that led here


EXAMPLE = Path(__file__).with_name("ring_example.json")


def ring_states() -> list[RingState]:
    """The 2(N-1) + 1 states of the ring AllReduce (sum) the notebook draws, for its example
    gradients [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]: data recorded by
    the course's grading side (ring_example.json), not computed here."""
    return [RingState(state["step"], state["phase"], state["values"], np.array(state["counts"]),
                      [tuple(send) for send in state["sends"]])
            for state in json.loads(EXAMPLE.read_text())]


def _label(chunk: list) -> str:
    if len(chunk) <= 2:
        return "\n".join(f"{v:g}" for v in chunk) or "(empty)"
    return f"{chunk[0]:g}, ...\n({len(chunk)} values)"


def draw_ring_state(state: RingState, n: int, fig=None):
    """Left: the ring and this step's sends. Right: every GPU's chunks (colour = how many
    contributions a copy holds; thick border = changed in this step)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig = fig or plt.figure(figsize=(10, 4.2))
    ax_ring, ax_table = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    colour = REDUCE if state.phase == "phase 1" else GATHER
    total = 2 * (n - 1)
    fig.suptitle(f"after step {state.step} of {total}: {state.phase}"
                 if state.step else f"start: every GPU holds only its own gradient "
                 f"({total} steps to go)")

    angles = [math.pi / 2 - 2 * math.pi * i / n for i in range(n)]
    xy = [(math.cos(a), math.sin(a)) for a in angles]
    for src, dst, j in state.sends:
        arrow = FancyArrowPatch(xy[src], xy[dst], connectionstyle="arc3,rad=-0.25",
                                arrowstyle="-|>", mutation_scale=16, color=colour, lw=2,
                                shrinkA=20, shrinkB=20)
        ax_ring.add_patch(arrow)
        # label just outside the arc's midpoint (arc3: midpoint + rad/2 * (dy, -dx))
        (x0, y0), (x1, y1) = xy[src], xy[dst]
        lx, ly = (x0 + x1) / 2 - 0.4 * (y1 - y0), (y0 + y1) / 2 + 0.4 * (x1 - x0)
        ax_ring.text(lx, ly, f"c{j}", color=colour, ha="center", va="center",
                     fontweight="bold")
    for i, (x, y) in enumerate(xy):
        ax_ring.add_patch(plt.Circle((x, y), 0.2, color="tab:blue", zorder=3))
        ax_ring.text(x, y, f"GPU{i}", color="white", ha="center", va="center", zorder=4,
                     fontsize=9)
    ax_ring.set(xlim=(-1.6, 1.6), ylim=(-1.6, 1.6), aspect="equal")
    ax_ring.axis("off")

    ax_table.imshow(state.counts / n, cmap="Blues", vmin=0, vmax=1.6)
    changed = {(dst, j) for _, dst, j in state.sends}
    for i in range(n):
        for j in range(n):
            ax_table.text(j, i, _label(state.values[i][j]), ha="center", va="center",
                          fontsize=9 if n <= 5 else 7)
            if (i, j) in changed:
                ax_table.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                             edgecolor=colour, lw=3))
    ax_table.set_xticks(range(n), [f"c{j}" for j in range(n)])
    ax_table.set_yticks(range(n), [f"GPU{i}" for i in range(n)])
    ax_table.set_title("what each GPU holds (darker = more GPUs' contributions)", fontsize=9)
    return fig


def _show(fig, description: str) -> None:
    """Show fig, described in words for screen readers (and the alt text of HTML exports)."""
    import matplotlib.pyplot as plt
    from IPython import get_ipython

    if get_ipython() is None:  # a script: matplotlib's own window, or nothing (Agg)
        plt.show()
        return
    from IPython.display import display

    display(fig, metadata={"image/png": {"alt": description}})
    plt.close(fig)  # or the inline backend shows it a second time, without the words


def show_ring(step: int | None = None):
    """The notebook's ring AllReduce: a slider over the steps, or one step if given."""
    states = ring_states()
    n = len(states[0].values)

    def draw(step: int = 0):
        state = states[step]
        what = (f"after step {state.step} of {2 * (n - 1)}, {state.phase}" if state.step
                else "before the first step")
        _show(draw_ring_state(state, n), f"Ring AllReduce over {n} GPUs {what}: the ring with "
              "this step's sends, and what each GPU holds per chunk.")

    if step is not None:
        return draw(step)
    try:
        import ipywidgets as widgets
    except ImportError:  # no widgets: show every step
        for s in range(len(states)):
            draw(s)
        return None
    slider = widgets.IntSlider(value=0, min=0, max=len(states) - 1, description="step")
    widgets.interact(draw, step=slider)
    return None


def tree_edges(num_nodes: int) -> list[tuple[int, int]]:
    """(parent, child) of the broadcast tree, built level by level: going through the ranks in
    order, each takes the next two ranks that have no parent yet as its children."""
    edges, unplaced = [], iter(range(1, num_nodes))
    for parent in range(num_nodes):
        edges += [(parent, child) for child in (next(unplaced, None), next(unplaced, None))
                  if child is not None]
    return edges


def tree_levels(num_nodes: int) -> list[int]:
    """The step in which each rank receives in a binary-tree broadcast from rank 0."""
    levels = [0] * num_nodes
    for parent, child in tree_edges(num_nodes):
        levels[child] = levels[parent] + 1
    return levels


def show_tree(num_nodes: int):
    """The broadcast tree, ranks numbered level by level and coloured by receive step."""
    levels = tree_levels(num_nodes)
    depth = max(levels)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(min(2 + num_nodes, 10), 1.2 + 1.1 * depth))
    pos, seen = {}, [0] * (depth + 1)
    for i, level in enumerate(levels):  # left to right within a level, 2**level slots
        pos[i] = ((seen[level] + 0.5) / 2**level, -level)
        seen[level] += 1
    cmap = plt.get_cmap("viridis", depth + 1)
    for parent, child in tree_edges(num_nodes):
        ax.plot(*zip(pos[parent], pos[child], strict=True), color="grey", zorder=1)
    for i, (x, y) in pos.items():
        ax.scatter([x], [y], s=500, color=cmap(levels[i]), zorder=2)
        ax.text(x, y, str(i), ha="center", va="center", color="white", zorder=3)
    for level in range(depth + 1):
        ax.text(-0.05, -level, "root" if level == 0 else f"step {level}", ha="right",
                va="center")
    ax.set(xlim=(-0.3, 1.05), ylim=(-depth - 0.5, 0.5))
    ax.axis("off")
    ax.set_title(f"{num_nodes} ranks: {depth} steps (a linear broadcast needs "
                 f"{num_nodes - 1})")
    _show(fig, f"Binary-tree broadcast from rank 0 to {num_nodes} ranks, numbered level by "
          f"level: each rank sends to its two children in one step, and the last rank receives "
          f"in step {depth} (a linear broadcast needs {num_nodes - 1}).")
