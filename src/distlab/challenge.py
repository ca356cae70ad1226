"""The speed challenge (notebook 02, not graded): a send/recv all-reduce as fast as gloo's.

    results = race(fast_all_reduce)          # 2 ranks, 1, 4 and 16 MiB of float32
    show_race(results, busbw, model)         # busbw: yours, dist.all_reduce's, the model's

`fast_all_reduce(tensor)` sums `tensor` in place over the default group, as `dist.all_reduce`
does. Before timing, each size is checked against `dist.all_reduce` on every rank's own random
tensor, and a call to a library collective inside it is refused (the challenge is the
send/recv schedule). The timing itself is distlab.export.runtime.race, the code an exported
script runs on a cluster: the same score there.
"""

from __future__ import annotations

import math

SIZES_MIB = (1, 4, 16)
PAIRS = 20
LIBRARY = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
           "all_gather_into_tensor", "broadcast", "reduce", "all_to_all_single")


class ChallengeError(ValueError):
    """The learner's all-reduce is wrong or uses a library collective: no score."""


def _refuse_library_calls(all_reduce, x):
    """Run all_reduce(x), recording which library collectives it called (the caller refuses
    the score, on every rank alike, when any was)."""
    from distlab.intercept import intercepting

    called = []

    def wrap(name, real):
        def record(*args, **kwargs):
            called.append(name)
            return real(*args, **kwargs)  # finish the call: the other ranks wait for it
        return record

    with intercepting(LIBRARY, wrap):
        all_reduce(x)
    return called


def _race_on_rank(rank, world_size, all_reduce, sizes_mib, pairs):
    import torch
    import torch.distributed as dist

    from distlab.export.runtime import race

    rows = []
    for size in sizes_mib:
        numel = int(size * 2**20) // 4
        x = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
        expected = x.clone()
        dist.all_reduce(expected)
        called = _refuse_library_calls(all_reduce, x)
        # every rank must agree before any rank raises: a lone raise would leave the others
        # waiting in the next collective
        verdict = torch.tensor([float(bool(called)),
                                float(not torch.allclose(x, expected, rtol=1e-4, atol=1e-4))])
        dist.all_reduce(verdict, op=dist.ReduceOp.MAX)
        if verdict[0]:
            raise ChallengeError(f"your all-reduce calls dist.{called[0]}" if called else
                                 "another rank's all-reduce calls a library collective")
        if verdict[1]:
            raise ChallengeError(f"at {size} MiB your all-reduce's result differs from "
                                 "dist.all_reduce's (some rank's values are wrong): a fast "
                                 "wrong answer has no score; fix it first")
        mine, library, score = race(all_reduce, x, pairs)
        rows.append({"MiB": size, "nbytes": numel * 4, "n": world_size, "mine": mine,
                     "library": library, "score": score})
    return rows


def race(all_reduce, sizes_mib=SIZES_MIB, pairs: int = PAIRS, world_size: int = 2,
         show: bool = True) -> list[dict]:
    """Your all-reduce against dist.all_reduce on `world_size` gloo ranks (2: one per core
    here), at each size: median seconds of each, and the score, the library's time over yours
    (median of paired runs), which is your bus bandwidth over the library's: the same bytes
    on the same ranks. Prints a table; returns one dict per size."""
    from distlab import run

    rows = run(_race_on_rank, all_reduce, tuple(sizes_mib), pairs, world_size=world_size,
               backend="gloo", timeout=60 + 2 * pairs)[0]
    if show:
        print(f"{'size':>7} {'yours':>9} {'gloo':>9} {'score':>6}   ({world_size} ranks, "
              f"median of {pairs} paired runs)")
        for r in rows:
            print(f"{r['MiB']:>4} MiB {r['mine'] * 1e3:>7.2f}ms {r['library'] * 1e3:>7.2f}ms "
                  f"{r['score']:>6.2f}")
    return rows


def show_race(rows: list[dict], busbw, model=None, title: str = "the race: bus bandwidth"):
    """Bus bandwidth against the size: yours, dist.all_reduce's and, given model(nbytes, n)
    -> seconds (02's alpha-beta fit), the model's. busbw(nbytes, seconds, n) -> bytes/s of
    an all-reduce (02's bus_bandwidth)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    sizes = np.array([r["nbytes"] for r in rows], float)
    n = rows[0]["n"]
    for key, label, style in (("library", "dist.all_reduce (gloo)", "s-"),
                              ("mine", "yours", "o-")):
        ax.plot(sizes, [busbw(r["nbytes"], r[key], n) / 1e9 for r in rows], style, label=label)
    if model is not None:
        grid = np.logspace(math.log10(sizes.min() / 2), math.log10(sizes.max() * 2), 50)
        ax.plot(grid, [busbw(m, model(m, n), n) / 1e9 for m in grid], "--", color="grey",
                label="alpha-beta model (fitted in §5)")
    for r in rows:
        ax.annotate(f"{r['score']:.2f}x", (r["nbytes"], busbw(r["nbytes"], r["mine"], n) / 1e9),
                    textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{r['MiB']} MiB" for r in rows])
    ax.set_xlabel(f"message size, {n} ranks")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    _show(fig, "bus bandwidth of your all-reduce and of dist.all_reduce at "
          + ", ".join(f"{r['MiB']} MiB: {busbw(r['nbytes'], r['mine'], n) / 1e9:.2f} against "
                      f"{busbw(r['nbytes'], r['library'], n) / 1e9:.2f} GB/s" for r in rows))
