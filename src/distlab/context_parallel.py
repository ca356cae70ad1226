"""Helpers for notebook 08 (context parallelism: the sequence split over ranks).

    attention(q, k, v, causal)      # plain softmax attention on one process (the reference)
    all_to_all(x)                   # on a rank: dist.all_to_all_single of x, differentiable
    ring_shift(x)                   # on a rank: x to the next rank, the previous rank's back
    to_seq(o)                       # Ulysses' way back: (b, H/N, N L, d) -> (b, H, L, d)
    check_ring_pass(results, weight)  # RingPass's check, against one process's autograd
    saved_bytes(fn, *args)          # bytes autograd keeps for the backward of fn(*args)
    with count_bytes() as sent:     # on a rank: what its isend / all_to_all_single calls carry
        ...
    sent.total("isend")             # bytes this rank handed to isend
    show_memory(lengths, series, title)  # a line per series against the sequence length
    show_work(rows, title)          # each rank's work as bars, one group per layout
    show_bytes(rows, title)         # predicted vs measured bytes as bars

The forward's ring step (`ring_shift`) and Ulysses' way back (`to_seq`) are given code here;
the merge of a softmax, the backward's peers, the schedule and the way in are the notebook's.
(matplotlib is imported by the pictures only: the counter runs on ranks.)
"""

from __future__ import annotations

import contextlib
import math

_COUNTED = ("isend", "send", "all_to_all_single", "all_gather", "all_gather_into_tensor",
            "broadcast")


def attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v over the last two dimensions; with causal, position i sees
    positions 0..i only (q and k of the same length)."""
    import torch

    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        rows, cols = scores.shape[-2:]
        future = torch.ones(rows, cols, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def all_to_all(x):
    """On a rank of the default group: x cut along dimension 0 into N equal pieces, piece j
    sent to rank j; returns what arrived, piece j from rank j. Differentiable: the backward
    sends the gradients' pieces back where they came from, an all-to-all of the same shape."""
    if not _ALL_TO_ALL:  # made on first use: importing this module costs no torch
        _ALL_TO_ALL.append(_all_to_all_function())
    return _ALL_TO_ALL[0].apply(x)


_ALL_TO_ALL: list = []


def _all_to_all_function():
    import torch
    import torch.distributed as dist

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
            dist.all_to_all_single(out, x.contiguous())
            return out

        @staticmethod
        def backward(ctx, grad):
            out = torch.empty_like(grad, memory_format=torch.contiguous_format)
            dist.all_to_all_single(out, grad.contiguous())
            return out

    return AllToAll


def ring_shift(x):
    """On a rank of the default group: x goes to the next rank of the ring (rank + 1 mod N),
    and what the previous rank sent comes back. Not differentiable."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    arrived = torch.empty_like(x, memory_format=torch.contiguous_format)
    pending = dist.irecv(arrived, src=(rank + n - 1) % n)
    dist.send(x.contiguous(), dst=(rank + 1) % n)
    pending.wait()
    return arrived


def to_seq(o):
    """On a rank of N: Ulysses' return swap. o holds this rank's group of H/N heads over the
    whole sequence, (batch, H/N, N L, d); the result is this rank's L positions of all H
    heads, (batch, H, L, d), heads in order. One all_to_all."""
    import torch.distributed as dist

    n = dist.get_world_size()
    b, hl, total, d = o.shape
    arrived = all_to_all(o.reshape(b, hl, n, total // n, d).permute(2, 0, 1, 3, 4))
    return arrived.transpose(0, 1).reshape(b, n * hl, total // n, d)


def check_ring_pass(results, weight):
    """RingPass's check. results: per rank r, (x, y, x's gradient) after
    (y * weight(r)).sum().backward(). The same computation in one process, its gradients by
    autograd, compared; prints each rank's and returns True when all match."""
    import torch

    n = len(results)
    xs = [torch.tensor(x, requires_grad=True) for x, _, _ in results]
    ys = [xs[(r + n - 1) % n] for r in range(n)]  # what the forward delivers
    sum((y * weight(r)).sum() for r, y in enumerate(ys)).backward()
    right = True
    for r, (_, y, grad) in enumerate(results):
        ok = torch.allclose(torch.tensor(grad), xs[r].grad)
        right = right and ok
        print(f"rank {r}: received {y}, its x's gradient {grad}" +
              ("" if ok else "  ✗ not what one process's autograd gives"))
    return right


def saved_bytes(fn, *args) -> int:
    """Bytes of the tensors autograd keeps for the backward while fn(*args) runs (each storage
    once, the inputs' own storages left out: they are in memory anyway)."""
    import torch

    inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    seen: dict[int, int] = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in inputs:
            seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(seen.values())


class Sent:
    """What one rank's counted calls carried: `calls` is a list of (name, bytes)."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def total(self, *names: str) -> int:
        return sum(size for name, size in self.calls if not names or name in names)

    def count(self, *names: str) -> int:
        return sum(1 for name, _ in self.calls if not names or name in names)


@contextlib.contextmanager
def count_bytes():
    """On a rank: record each torch.distributed isend, send, all_to_all_single, all_gather,
    all_gather_into_tensor and broadcast made in the block (through `dist.<name>`), with the
    bytes of the tensor it was handed (for all_to_all_single, the bytes of its input that go to
    other ranks)."""
    import torch

    from distlab.intercept import intercepting

    sent = Sent()

    def size(value):
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, list | tuple):
            return sum(size(v) for v in value)
        return 0

    def counting(name, real):
        def call(*args, **kwargs):
            if name == "all_to_all_single":  # what leaves: the input but the rank's piece
                import torch.distributed as dist

                handed = args[1] if len(args) > 1 else kwargs.get("input")
                group = kwargs.get("group")
                n, me = dist.get_world_size(group), dist.get_rank(group)
                splits = kwargs.get("input_split_sizes") or [handed.shape[0] // n] * n
                row = size(handed) // max(1, handed.shape[0])
                sent.calls.append((name, size(handed) - splits[me] * row))
                return real(*args, **kwargs)
            elif name in ("all_gather", "all_gather_into_tensor"):
                handed = args[1] if len(args) > 1 else kwargs.get("tensor",
                                                                    kwargs.get("input_tensor"))
            else:
                handed = args[0] if args else kwargs.get("tensor")
            sent.calls.append((name, size(handed)))
            return real(*args, **kwargs)
        return call

    with intercepting(_COUNTED, counting):
        yield sent


def show_memory(lengths, series: dict, title: str):
    """series: {label: [bytes at each length]}; lines on log axes against the sequence length."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, values in series.items():
        ax.plot(lengths, [v / 2**20 for v in values], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{label}: " + ", ".join(f"{v / 2**20:.2f}" for v in values) + " MiB"
        for label, values in series.items()))


def show_work(rows: list, title: str, unit: str = "MFLOP"):
    """rows: (layout, [work of rank 0, rank 1, ...]); a bar per rank, a group per layout."""
    import matplotlib.pyplot as plt
    import numpy as np

    from distlab.collectives import _show

    n = len(rows[0][1])
    fig, ax = plt.subplots(figsize=(6.5, 3))
    width = 0.8 / n
    for r in range(n):
        ax.bar(np.arange(len(rows)) + (r - (n - 1) / 2) * width,
               [work[r] for _, work in rows], width, label=f"rank {r}")
    ax.set_xticks(range(len(rows)), [layout for layout, _ in rows])
    ax.set_ylabel(unit)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{layout}: " + ", ".join(f"{w:.3g}" for w in work) for layout, work in rows))


def show_bytes(rows: list, title: str):
    """rows: (label, {column: bytes}); a bar per column, side by side."""
    import matplotlib.pyplot as plt
    import numpy as np

    from distlab.collectives import _show

    columns = list(rows[0][1])
    fig, ax = plt.subplots(figsize=(6.5, 3))
    width = 0.8 / len(columns)
    for k, column in enumerate(columns):
        ax.bar(np.arange(len(rows)) + (k - (len(columns) - 1) / 2) * width,
               [row[column] / 1e3 for _, row in rows], width, label=column)
    ax.set_xticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylabel("kB sent per rank per layer")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{label}: " + ", ".join(f"{c} {v:.0f} B" for c, v in row.items())
        for label, row in rows))
