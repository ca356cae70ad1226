"""Pictures and an all-to-all counter for notebook 09 (expert parallelism).

    with count_all_to_all() as calls:    # on a rank: every dist.all_to_all_single in the block
        ...                              # (the autograd one of torch.distributed.nn too)
    calls.rows                           # per call: the rows it gives each rank, rank by rank
    calls.off_rank_bytes(rank)           # per call: bytes of the rows that leave this rank
    ep_group(ep)                         # on a rank: its EP group (a row of the (N/ep, ep) grid)
    show_loads(panels, experts_per_rank) # tokens per expert, coloured by rank; returns rank totals
    show_bytes(rows, title)              # predicted vs measured bytes per rank, as bars

Nothing here routes a token, counts a split or predicts a byte: the notebook's exercises do.
(matplotlib is imported by the pictures only: the counter runs on ranks.)
"""

from __future__ import annotations

import contextlib
import inspect
import math

import numpy as np

from distlab.intercept import intercepting


class AllToAllCalls:
    """What one rank's all_to_all_single calls carried: for each call, the rows it gave every
    rank of its group (rank by rank, its own included) and the bytes of one row."""

    def __init__(self):
        self.rows: list[list[int]] = []
        self.row_bytes: list[int] = []

    def off_rank_bytes(self, rank: int) -> list[int]:
        """Per call, the bytes of the rows given to the ranks other than `rank`."""
        return [sum(n for peer, n in enumerate(rows) if peer != rank) * size
                for rows, size in zip(self.rows, self.row_bytes, strict=True)]


@contextlib.contextmanager
def count_all_to_all():
    """On a rank: record every torch.distributed.all_to_all_single in the block, with the rows
    it gives each rank (its input_split_sizes, or equal parts when there are none)."""
    import torch.distributed as dist

    calls = AllToAllCalls()

    def counting(name, real):
        signature = inspect.signature(real)

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            tensor = bound.arguments["input"]
            splits = bound.arguments.get("input_split_sizes")
            n = dist.get_world_size(bound.arguments.get("group"))
            rows = [int(s) for s in splits] if splits else [len(tensor) // n] * n
            per_row = math.prod(tensor.shape[1:]) * tensor.element_size()
            calls.rows.append(rows)
            calls.row_bytes.append(per_row)
            return real(*args, **kwargs)
        return call

    with intercepting(["all_to_all_single"], counting):
        yield calls


def ep_group(ep: int):
    """On every rank of an (N // ep, ep) grid (rank = d * ep + e): this rank's EP group, the
    row of ep consecutive ranks it is in. Every rank makes every row's group."""
    import torch.distributed as dist

    rows = [list(range(d * ep, d * ep + ep)) for d in range(dist.get_world_size() // ep)]
    return dist.new_subgroups_by_enumeration(rows)[0]


def show_loads(panels: list, experts_per_rank: int, title: str) -> list[list[int]]:
    """panels: (label, tokens per expert) side by side; each expert's bar coloured by the rank
    that holds it (experts_per_rank consecutive experts a rank), each rank's total written.
    Returns each panel's totals per rank."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 2.8), sharey=True)
    axes = np.atleast_1d(axes)
    cmap = plt.get_cmap("tab10")
    words, per_panel = [], []
    for ax, (label, counts) in zip(axes, panels, strict=True):
        counts = [int(c) for c in counts]
        ranks = [e // experts_per_rank for e in range(len(counts))]
        ax.bar(range(len(counts)), counts, color=[cmap(r % 10) for r in ranks])
        totals = [sum(counts[r * experts_per_rank:(r + 1) * experts_per_rank])
                  for r in range(len(counts) // experts_per_rank)]
        per_panel.append(totals)
        for r, total in enumerate(totals):
            ax.text((r + 0.5) * experts_per_rank - 0.5, max(counts) * 1.02 + 0.1,
                    f"rank {r}: {total}", ha="center", fontsize=7)
        ax.set_xticks(range(len(counts)))
        ax.set_xlabel("expert")
        ax.set_title(label, fontsize=9)
        words.append(f"{label}: per expert {counts}, per rank {totals}")
    axes[0].set_ylabel("tokens")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(words))
    return per_panel


def show_bytes(rows: list, title: str):
    """rows: (label, {column: bytes}) for each label; a bar per column, side by side."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    columns = list(rows[0][1])
    fig, ax = plt.subplots(figsize=(7, 2.8))
    width = 0.8 / len(columns)
    for k, column in enumerate(columns):
        ax.bar(np.arange(len(rows)) + (k - (len(columns) - 1) / 2) * width,
               [row[column] for _, row in rows], width, label=column)
    ax.set_xticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_ylabel("bytes")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{label}: " + ", ".join(f"{c} {v:.0f} B" for c, v in row.items()) for label, row in rows))
