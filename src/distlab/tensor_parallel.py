"""Pictures and a byte counter for notebook 04 (tensor parallelism).

    show_split("column", world_size=4)   # nn.Linear's weight (out x in) cut: a colour per rank
    show_split("row")                    # who holds what, before the ranks do anything
    show_matrices([(name, rows, cols, split, caption), ...], world_size, title, description)

    with count_collectives() as calls:   # on a rank: every collective the code inside calls
        y = layer(x)
        y.backward(grad)
    print(format_calls(calls))           # per call: phase, tensor bytes, what a ring sends

    show_comm_table(rows)                # a table of collectives per layer, as a figure
    region_gradients(x, weights, c)      # the f/g check's gradients, on one process

Nothing here computes a parallel layer or says what the ranks must do: the notebook's
exercises do that.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch
import torch.distributed as dist

from distlab.intercept import intercepting

# matplotlib is imported by the pictures only: the ranks import this module for
# count_collectives, and a fresh set of ranks would pay seconds for matplotlib each time.


def _ring_share(name: str, n: int) -> float:
    """The bytes one rank sends in a ring implementation, as a fraction of S, the bytes of the
    whole (reduced or gathered) tensor, as notebook 01 derived them: an all-reduce 2(N-1)/N; a
    broadcast down a chain S at most (every rank but the last passes the whole tensor on, and
    each rank is charged that most), and a reduce, its mirror, S too (up the chain, every rank
    but the root passes on a whole partial sum); every other collective (N-1)/N, as an
    all-gather, where a rank sends all but its own 1/N."""
    if n == 1:
        return 0.0
    if name.startswith("all_reduce"):
        return 2 * (n - 1) / n
    return 1.0 if name in ("broadcast", "reduce") else (n - 1) / n


def _collectives() -> list[str]:
    """The names of torch.distributed's collectives: its public functions that take async_op
    (read from the module's dictionary, so that no deprecated alias is touched)."""
    import types

    names = []
    for name, value in vars(dist).items():
        if name.startswith("_") or type(value) is not types.FunctionType:
            continue
        try:
            parameters = inspect.signature(value).parameters
        except (TypeError, ValueError):
            continue
        if "async_op" in parameters:
            names.append(name)
    return names


def region_gradients(x, weights, c):
    """Notebook 04's check of f and g, on one process: (dL/dx, dL/dweights) by autograd, for
    x (the input of every rank), weights (row r: rank r's weight) and c, the loss's weights."""
    x, a = x.clone().requires_grad_(), weights.clone().requires_grad_()
    (c * a * x).sum().backward()
    return x.grad, a.grad


@dataclass(frozen=True)
class Call:
    """One collective call on this rank."""

    name: str  # "all_reduce", "all_gather", ...
    shape: tuple  # of the whole tensor (the first piece's, times N, for a list)
    nbytes: int  # S: bytes of the whole tensor
    sent: float  # bytes this rank sends in a ring: a share of S (_ring_share)
    world_size: int
    backward: bool  # called while autograd ran a backward pass


def _graph_task() -> int:
    # -1 outside a backward pass; torch has no public way to ask, and this one is stable since 1.x
    return getattr(torch._C, "_current_graph_task_id", lambda: -1)()


def _tensors(value) -> list:
    """The tensors of one argument: a tensor, or a list (or tuple) of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def _whole(arguments: dict) -> tuple[tuple, int] | None:
    """(shape, bytes) of the largest tensor argument, a list counting as the N pieces of one
    (its shape: N, then the first piece's); None if the call has no tensor."""
    best = None
    for value in arguments.values():
        tensors = _tensors(value)
        if not tensors:
            continue
        nbytes = sum(t.nbytes for t in tensors)
        shape = tuple(tensors[0].shape) if isinstance(value, torch.Tensor) else \
            (len(tensors), *tensors[0].shape)
        if best is None or nbytes > best[1]:
            best = (shape, nbytes)
    return best


@contextlib.contextmanager
def count_collectives():
    """Record every collective called through `torch.distributed.<name>` inside the block.

    Yields the list that fills up with a `Call` per collective. Use it on a rank (inside the
    function that `run` calls), where the process group exists."""
    calls: list[Call] = []

    def wrap(name, original):
        signature = inspect.signature(original)

        def counted(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs).arguments
            whole = _whole(arguments)
            if whole is not None:  # a barrier sends no tensor
                n = dist.get_world_size(arguments.get("group"))
                shape, nbytes = whole
                calls.append(Call(name, shape, nbytes, _ring_share(name, n) * nbytes, n,
                                  _graph_task() != -1))
            return original(*args, **kwargs)

        counted.__name__ = counted.__qualname__ = name
        return counted

    with intercepting(_collectives(), wrap):
        yield calls


def format_calls(calls: list[Call]) -> str:
    """One line per call, then the totals: what a reader compares with the formula."""
    lines = [f"{'phase':<9}{'collective':<23}{'shape':<14}{'S (bytes)':>10}{'ring sends':>12}"]
    for c in calls:
        phase = "backward" if c.backward else "forward"
        lines.append(f"{phase:<9}{c.name:<23}{'x'.join(map(str, c.shape)):<14}"
                     f"{c.nbytes:>10}{c.sent:>12g}")
    total = sum(c.sent for c in calls)
    lines.append(f"{len(calls)} collective(s); every rank sends {total:g} bytes in all")
    return "\n".join(lines)


# ---------------------------------------------------------------- pictures

GREY = "#d9d9d9"


def _colour(rank: int):
    import matplotlib

    return matplotlib.colormaps["tab10"](rank % 10)


def _matrix(ax, left, rows, cols, name, split, n, caption="", labels=None):
    """A rows x cols matrix whose top-left corner is at (left, 0); split: "rows" or "cols"
    (band r is rank r's), "partial" (every rank holds a partial sum) or None (whole, replicated).
    """
    from matplotlib.patches import Rectangle

    if split in ("rows", "cols"):
        for r in range(n):
            if split == "rows":
                xy, w, h = (left, -(r + 1) * rows / n), cols, rows / n
            else:
                xy, w, h = (left + r * cols / n, -rows), cols / n, rows
            ax.add_patch(Rectangle(xy, w, h, facecolor=_colour(r), edgecolor="white", lw=1.5))
            text = labels[r] if labels else f"rank {r}"
            ax.text(xy[0] + w / 2, xy[1] + h / 2, text, ha="center", va="center", fontsize=8,
                    rotation=90 if split == "cols" and w < 3 else 0, color="white")
    else:
        hatch = "//" if split == "partial" else None
        ax.add_patch(Rectangle((left, -rows), cols, rows, facecolor=GREY, edgecolor="grey",
                               hatch=hatch))
    ax.add_patch(Rectangle((left, -rows), cols, rows, fill=False, edgecolor="black", lw=1))
    ax.text(left + cols / 2, 0.6, name, ha="center", va="bottom", fontsize=10)
    ax.text(left + cols / 2, -rows - 0.6, caption, ha="center", va="top", fontsize=8)
    return left + cols


def _layout(kind: str, n: int):
    """(matrices, title, description) of a linear layer's situation: who holds what, never
    what the ranks then do. Each matrix: (name, rows, cols, split, caption)."""
    if kind == "column":
        return ([("x (batch x in)", 3, 6, None, "whole on every rank"),
                 ("W (out x in)", 8, 6, "rows", "rank r: out/N rows"),
                 ("y = x Wᵀ + b", 3, 8, None, "needed whole\non every rank")],
                f"a linear layer's weight cut into bands of rows, over {n} ranks",
                f"Linear layer on {n} ranks: the input x is whole on every rank; nn.Linear's "
                "weight, stored out x in, is cut into bands of rows, one per rank (the bias "
                "likewise); every rank needs the whole output y.")
    if kind == "row":
        return ([("x (batch x in)", 3, 8, "cols", "rank r: its columns"),
                 ("W (out x in)", 6, 8, "cols", "rank r: in/N columns"),
                 ("y = x Wᵀ + b", 3, 6, None, "needed whole\non every rank")],
                f"a linear layer's weight cut into bands of columns, over {n} ranks",
                f"Linear layer on {n} ranks: the input features are split, so rank r holds a "
                "band of columns of x and of nn.Linear's weight (out x in); the bias is whole "
                "on every rank; every rank needs the whole output y.")
    raise ValueError(f"kind must be 'column' or 'row', not {kind!r}")


def show_split(kind: str = "column", world_size: int = 4):
    """Who holds which part of a linear layer's weight: "column" (bands of rows of
    nn.Linear.weight) or "row" (bands of columns)."""
    matrices, title, description = _layout(kind, world_size)
    show_matrices(matrices, world_size, title, description)


def show_matrices(matrices, world_size: int = 4, title: str = "", description: str = ""):
    """Draw matrices side by side. Each is (name, rows, cols, split, caption[, labels]):
    split "rows" or "cols" (band r is rank r's, labelled by labels[r] if given), "partial"
    (every rank holds a partial sum) or None (whole, replicated); description is the figure's
    text for screen readers."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(matrices), 3.2))
    left = 0.0
    for name, rows, cols, split, caption, *labels in matrices:
        left = _matrix(ax, left, rows, cols, name, split, world_size, caption,
                       labels[0] if labels else None) + 3
    ax.set(xlim=(-1, left - 2), ylim=(-11, 2.5), aspect="equal", title=title)
    ax.axis("off")
    _show(fig, description or title)


def show_comm_table(rows, title: str = "collectives per transformer layer"):
    """rows: (what, forward, backward) strings, one row each, drawn as a table."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(10, 0.4 + 0.35 * (len(rows) + 1)))
    ax.axis("off")
    table = ax.table(cellText=[list(r) for r in rows], colLabels=["", "forward", "backward"],
                     loc="center", cellLoc="left", colWidths=[0.3, 0.3, 0.4])
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1, 1.4)
    for (row, _), cell in table.get_celld().items():
        if row == 0:
            cell.set_facecolor(GREY)
    ax.set_title(title, fontsize=10)
    _show(fig, f"Table, {title}: " + "; ".join(f"{w}: forward {f}, backward {b}"
                                                for w, f, b in rows) + ".")
