"""How long does a 4-rank call take through distlab.run, cold and warm, next to mp.spawn?

Run: .venv/bin/python bench/bench_launch.py      (about 20 s on 2 cores)

distlab.run keeps its ranks (and their gloo group) alive between calls, so only the first call
pays for starting processes. torch.multiprocessing.spawn starts fresh interpreters every time,
each importing torch and building its own group; that is what a notebook without a pool pays.
Both run the same trivial function (one all_reduce of one number), shipped with cloudpickle.
"""

from __future__ import annotations

import os
import socket
import statistics
import time

import cloudpickle
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench import pick
from distlab import launch

WORLD_SIZE = 4
WARM_CALLS = 10
SPAWN_CALLS = 3


def trivial(rank, world_size):
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _spawn_entry(rank, world_size, port, payload):
    """What mp.spawn runs in each fresh process: its own group, then the shipped function."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    cloudpickle.loads(payload)(rank, world_size)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> list[dict]:
    """Measure, print the table, and return its rows (seconds) for a top-level bench runner."""
    warm_calls, spawn_calls = pick(WARM_CALLS, 2), pick(SPAWN_CALLS, 1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # same loopback setup as distlab's ranks
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    launch.shutdown()  # a cold start, as in a fresh kernel that has already imported torch
    first = _seconds(lambda: launch.run(trivial, world_size=WORLD_SIZE))
    warm = statistics.median(_seconds(lambda: launch.run(trivial, world_size=WORLD_SIZE))
                             for _ in range(warm_calls))
    refork = _seconds(lambda: launch.run(trivial, world_size=WORLD_SIZE - 1))
    launch.shutdown()

    payload = cloudpickle.dumps(trivial)
    spawn = [_seconds(lambda: mp.spawn(_spawn_entry, args=(WORLD_SIZE, _free_port(), payload),
                                       nprocs=WORLD_SIZE, join=True))
             for _ in range(spawn_calls)]
    spawn_median = statistics.median(spawn)
    rows = [
        {"method": "distlab.run (zygote + warm pool)", "first_s": first, "warm_s": warm},
        {"method": f"distlab.run, new world size ({WORLD_SIZE - 1})", "first_s": refork,
         "warm_s": None},
        {"method": "torch.multiprocessing.spawn", "first_s": spawn[0], "warm_s": spawn_median,
         "spawn_over_warm": spawn_median / warm},
    ]
    print(f"{WORLD_SIZE} ranks, gloo, {torch.get_num_threads()} torch threads in the parent, "
          f"{os.cpu_count()} CPUs; warm = median of {warm_calls} (spawn: of {spawn_calls})")
    print(f"{'method':<38}{'first call':>12}{'warm call':>12}")
    for row in rows:
        warm_text = "" if row["warm_s"] is None else _fmt(row["warm_s"])
        print(f"{row['method']:<38}{_fmt(row['first_s']):>12}{warm_text:>12}")
    print(f"spawn / distlab warm call: {rows[2]['spawn_over_warm']:,.0f}x")
    return rows


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    main()
