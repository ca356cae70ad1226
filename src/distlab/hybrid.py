"""Pictures and a per-group byte counter for notebook 07 (DP x TP x PP on one grid of ranks).

    show_grid((2, 2, 2), groups_of, coords_of)  # the grid, a panel per dimension, a colour
                                         # per group, each rank drawn at coords_of(rank, shape)
    with count_by_group(names) as calls: # on a rank: every all_reduce / send / recv made
        ...                              # through torch.distributed, with its group's ranks
    calls.bytes_by("tp")                 # message bytes of the calls in the group named "tp"
    show_bytes(rows)                     # predicted vs measured bytes per group, as bars
    show_layouts(rows, limit, title, label)  # memory per GPU of every layout, the limit drawn

Nothing here computes a coordinate, a group, a split or a cost: the notebook's exercises do.
(matplotlib is imported by the pictures only: the counter runs on ranks.)
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np

from distlab.intercept import intercepting

DIMS = ("pp", "dp", "tp")
_COUNTED = {"all_reduce": "tensor", "send": "tensor", "recv": "tensor", "broadcast": "tensor"}


def show_grid(shape, groups_of, coords_of, title: str = ""):
    """The ranks of a (pp, dp, tp) grid as pp panels of dp rows and tp columns, drawn three
    times: each rank coloured by its PP group, its DP group, its TP group. `groups_of(shape,
    dim)` lists the groups of dimension dim (0 pp, 1 dp, 2 tp) as lists of ranks;
    `coords_of(rank, shape)` is where a rank is drawn, (p, d, t)."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    pp, dp, tp = shape
    fig, axes = plt.subplots(1, 3, figsize=(3.3 * 3, 1.2 + 0.55 * dp))
    cmap = plt.get_cmap("tab20")
    lines = []
    for dim, (ax, name) in enumerate(zip(axes, DIMS, strict=True)):
        groups = groups_of(shape, dim)
        colour = {rank: k for k, ranks in enumerate(groups) for rank in ranks}
        lines.append(f"{name} groups {groups}")
        for rank in range(pp * dp * tp):
            p, d, t = (int(c) for c in coords_of(rank, shape))
            x, y = p * (tp + 0.6) + t, -d
            k = colour.get(rank)
            ax.add_patch(plt.Rectangle((x, y), 0.92, 0.92, color="lightgrey" if k is None
                                       else cmap(k % 20)))
            ax.text(x + 0.46, y + 0.46, str(rank), ha="center", va="center", fontsize=9)
        for p in range(pp):
            ax.text(p * (tp + 0.6) + tp / 2, 1.15, f"stage {p}", ha="center", fontsize=8)
        ax.set_xlim(-0.2, pp * (tp + 0.6))
        ax.set_ylim(-dp + 0.7, 1.5)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"{name.upper()} groups: {len(groups)}", fontsize=10)
    fig.suptitle(title or f"{pp} x {dp} x {tp} grid (pp, dp, tp): rows dp, columns tp",
                 fontsize=10)
    fig.tight_layout()
    _show(fig, f"{shape}: " + "; ".join(lines))


class GroupCalls:
    """What one rank's all_reduce, broadcast, send and recv calls carried: `calls` is a list of
    (kind, the global ranks of the call's group, bytes of its tensor)."""

    def __init__(self, names: dict):
        self.calls: list[tuple[str, tuple, int]] = []
        self.names = names  # group name -> its ranks (tuple), e.g. {"tp": (0, 1), ...}

    def bytes_by(self, name: str) -> int:
        """Message bytes of the calls made in the group called `name`."""
        ranks = tuple(self.names[name])
        return sum(nbytes for _, group, nbytes in self.calls if group == ranks)

    def by_group(self) -> dict:
        """{group name (or the ranks of an unnamed group): message bytes}."""
        named = {tuple(ranks): name for name, ranks in self.names.items()}
        out: dict = {}
        for _, group, nbytes in self.calls:
            key = named.get(group, group)
            out[key] = out.get(key, 0) + nbytes
        return out


@contextlib.contextmanager
def count_by_group(names: dict):
    """On a rank: record every torch.distributed all_reduce, broadcast, send and recv in the
    block with its group's ranks (none on a group of one rank: it moves nothing). A send or
    recv belongs to the group of its two ranks: `names` may name such a pair (e.g.
    {"pp": (0, 4)}) to see it; names maps group names to ranks."""
    import torch.distributed as dist

    counter = GroupCalls({name: tuple(ranks) for name, ranks in names.items()})

    def counting(name, real):
        signature = inspect.signature(real)

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            tensor, group = bound.arguments[_COUNTED[name]], bound.arguments.get("group")
            if name in ("send", "recv"):
                peer = bound.arguments.get("dst", bound.arguments.get("src"))
                ranks = tuple(sorted((dist.get_rank(), int(peer))))
                ranks = _pair_group(counter.names, ranks)
            else:
                ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
            if len(ranks) > 1:  # a group of one rank moves nothing
                counter.calls.append((name, ranks, tensor.numel() * tensor.element_size()))
            return real(*args, **kwargs)
        return call

    with intercepting(_COUNTED, counting):
        yield counter


def _pair_group(names: dict, pair: tuple) -> tuple:
    """The named group both ranks of a send/recv belong to (their pipeline), else the pair."""
    for ranks in names.values():
        if set(pair) <= set(ranks):
            return tuple(ranks)
    return pair


def show_bytes(rows: list, title: str):
    """rows: (group, {column: bytes}) for each group; a bar per column, side by side."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    columns = list(rows[0][1])
    fig, ax = plt.subplots(figsize=(7, 3))
    width = 0.8 / len(columns)
    for k, column in enumerate(columns):
        values = [row[column] / 1e3 for _, row in rows]
        ax.bar(np.arange(len(rows)) + (k - (len(columns) - 1) / 2) * width, values, width,
               label=column)
    ax.set_xticks(range(len(rows)), [group for group, _ in rows])
    ax.set_ylabel("kB per rank per step")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{group}: " + ", ".join(f"{c} {v:.0f} B" for c, v in row.items()) for group, row in rows))


def show_layouts(rows: list, limit: float, title: str, limit_label: str = "memory limit"):
    """rows: (label, bytes per GPU, chosen?) of every layout; bars, `limit` a line named
    `limit_label`: green the chosen layout, blue the others within the limit."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(8, 3.2))
    values = [nbytes / 1e9 for _, nbytes, _ in rows]
    colours = ["tab:green" if chosen else "tab:blue" if nbytes <= limit else "lightgrey"
               for _, nbytes, chosen in rows]
    ax.bar(range(len(rows)), values, color=colours)
    ax.axhline(limit / 1e9, color="tab:red", linestyle="--", label=limit_label)
    ax.set_xticks(range(len(rows)), [label for label, _, _ in rows], rotation=90, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("GB per GPU")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    chosen = [label for label, _, c in rows if c]
    _show(fig, f"{title}: {len(rows)} layouts, chosen {chosen}")
