"""The notebook's ring all-reduce (send/recv on gloo) against dist.all_reduce, 1 KiB to 64 MiB.

    python bench/bench_collectives.py                 # 2 and 4 ranks, a table each
    python bench/bench_collectives.py --world-sizes 8 --max-mib 16

The ring is the reference answer of `ring_allreduce_p2p` in solutions/01_collectives, loaded
with autograder.reference, so the benchmark always measures what the course teaches.

Each row: the median over repetitions of the slowest rank's time (every rank starts together,
after a barrier, on a freshly filled float32 tensor), algbw = size / time, and busbw = algbw *
2(N-1)/N, the nccl-tests convention that makes a ring all-reduce's number comparable with the
link speed (each rank sends and receives 2(N-1)/N of the data). ratio = ring / all_reduce time.

Compare on as many ranks as cores (2 here): with more, a rank that blocks in dist.recv waits
for a neighbour the scheduler has not run yet, once per step of the ring (2(N-1) steps,
against gloo's own loop in C++), and the ratio measures the scheduler more than the ring.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the course's packages first
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(ROOT / "src"))

KIB = 1024


def _time_ops(rank, world_size, ring, sizes, budget_s, min_reps):
    """On every rank: per size, alternating timed all_reduce and ring runs. Returns
    {size: {"all_reduce": [seconds...], "ring": [...]}} of this rank."""
    import torch
    import torch.distributed as dist

    ops = {"all_reduce": lambda t: dist.all_reduce(t),
           "ring": lambda t: ring(rank, world_size, t, op="sum")}
    gen = torch.Generator().manual_seed(rank)
    results = {}
    for size in sizes:
        source = torch.randn(size // 4, generator=gen)
        work = torch.empty_like(source)
        warm = time.perf_counter()
        for op in ops.values():  # warm-up: buffers, connections, caches
            work.copy_(source)
            op(work)
        # every rank must run the same number of repetitions: agree on the slowest estimate
        estimate = torch.tensor([time.perf_counter() - warm])
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
        reps = int(min(200, max(min_reps, budget_s / max(float(estimate), 1e-9))))
        times = {name: [] for name in ops}
        for _ in range(reps):
            for name, op in ops.items():
                work.copy_(source)
                dist.barrier()
                t0 = time.perf_counter()
                op(work)
                times[name].append(time.perf_counter() - t0)
        results[size] = times
    return results


def _fmt_size(size: int) -> str:
    return f"{size // (KIB * KIB)} MiB" if size >= KIB * KIB else f"{size // KIB} KiB"


def main(world_sizes=(2, 4), max_mib: int = 64, budget_s: float = 0.5,
         quiet: bool = False) -> list[dict]:
    """Run the benchmark on each world size; print a table per world size (unless quiet) and
    return the rows as dicts, each with its world size as "n"."""
    import os

    from autograder.reference import reference
    from bench import pick
    from distlab import run

    ring = reference("ring_allreduce_p2p")
    sizes = [KIB * 4**k for k in range(20) if KIB * 4**k <= max_mib * KIB * KIB]
    world_sizes, sizes, budget_s, min_reps = pick((world_sizes, sizes, budget_s, 9),
                                                  ((2,), sizes[:1], 0.0, 1))
    rows = []
    for world_size in world_sizes:
        per_rank = run(_time_ops, ring, sizes, budget_s, min_reps, world_size=world_size,
                       backend="gloo", timeout=600)
        factor = 2 * (world_size - 1) / world_size
        mine = []
        for size in sizes:
            row = {"n": world_size, "bytes": size}
            for name in ("all_reduce", "ring"):
                slowest = [max(ts) for ts in zip(*(r[size][name] for r in per_rank),
                                                 strict=True)]
                seconds = statistics.median(slowest)
                row[name] = {"time_s": seconds, "algbw_GBps": size / seconds / 1e9,
                             "busbw_GBps": size / seconds / 1e9 * factor}
            row["ratio"] = row["ring"]["time_s"] / row["all_reduce"]["time_s"]
            mine.append(row)
        rows += mine
        if quiet:
            continue
        cores = len(os.sched_getaffinity(0))
        crowded = (f" (oversubscribed: {world_size} ranks on {cores} cores, a rank waits for "
                   "a neighbour that is not running)" if world_size > cores else "")
        print(f"ring all-reduce (send/recv) vs dist.all_reduce, gloo, {world_size} ranks, "
              f"float32{crowded}")
        print(f"{'size':>8} | {'all_reduce':>10} {'algbw':>7} {'busbw':>7} | "
              f"{'ring':>10} {'algbw':>7} {'busbw':>7} | {'ratio':>5}")
        for row in mine:
            a, r = row["all_reduce"], row["ring"]
            print(f"{_fmt_size(row['bytes']):>8} | {a['time_s'] * 1e3:8.3f}ms "
                  f"{a['algbw_GBps']:7.3f} {a['busbw_GBps']:7.3f} | {r['time_s'] * 1e3:8.3f}ms "
                  f"{r['algbw_GBps']:7.3f} {r['busbw_GBps']:7.3f} | {row['ratio']:5.2f}")
        print("algbw, busbw in GB/s; ratio = ring time / all_reduce time")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--budget", type=float, default=0.5,
                        help="seconds of repetitions per size (at least 9 of each op)")
    args = parser.parse_args()
    main(tuple(args.world_sizes), args.max_mib, args.budget)
