"""Notebook 03's hand-built DDPs against PyTorch's: one training step's time on 2 and 4 gloo
ranks, and how much of the all-reduce time the backward hides.

    python -m bench.bench_data_parallel

The wrappers are the reference `DDPBucketed` and `DDPIndividualParameters` of
solutions/03_data_parallel (loaded with autograder.reference), beside
torch.nn.parallel.DistributedDataParallel. The model and data are the notebook's timeline's
(section 3d): distlab.data_parallel.mlp((256, 1024, 1024, 1024, 10)), 2.4 M parameters, 9 MiB
of float32 gradients, ROWS random rows per rank, cross-entropy; one step is the notebook's
`timed_step` (forward, backward, `finish_gradient_synchronization` for ours) plus SGD's step
and zero_grad. Both bucketed wrappers get the same BUCKET_MB cap, but not the same buckets:
the reference closes a bucket before a gradient would take it past the cap (a larger
gradient alone), torch DDP's assignment closes one once it has reached the cap (the 4 MiB
weights join the bucket before them); here 5 all-reduces against DDP's 3, of the same bytes.

Baseline: torch DDP with bucket_cap_mb=BUCKET_MB on the same ranks, in the same run; ratio =
step time / the baseline's (the target for DDPBucketed: at most 1.2x). Times: the median,
over repetitions after a warm-up, of the slowest rank's step (the ranks start each step
together, after a barrier). The world sizes are visited in turn, in several rounds, and the
wrappers alternate step by step, so a slow spell of the machine hits them all. After each
round the module checks that every wrapper's model ended where torch DDP's did.

Overlap: the notebook's distlab.data_parallel.overlap_fraction, the share of a rank's
all-reduce time (the union of its calls' spans, from distlab.data_parallel.watch_all_reduce)
that ran while the backward was still computing, measured on separate, instrumented copies of
each wrapper (the timed ones run bare). The backward's compute ends when the last parameter
gradient is ready (a post-accumulate-grad hook on every parameter), not when loss.backward()
returns: torch DDP's backward returns only once its all-reduces are done. torch DDP's
all-reduces are made by its C++ reducer, out of Python's sight, so its instrumented copy gets
a comm hook that all-reduces each bucket through dist.all_reduce
(distlab.data_parallel.count_bucket_all_reduces, DDP's own default hook run from Python).
"""

from __future__ import annotations

import functools
import os
import statistics

from autograder.reference import reference
from bench import pick, table

SIZES = (256, 1024, 1024, 1024, 10)  # the notebook's TIMELINE_SIZES
ROWS = 128  # per rank, as the notebook's timed_step
BUCKET_MB = 2  # as the notebook's timeline and comparison
WORLD_SIZES = (2, 4)
WARMUP, REPEATS, ROUNDS, WATCHED = 2, 6, 3, 2  # per round; WATCHED: instrumented steps
TARGET = 1.2  # DDPBucketed's step time over torch DDP's, at most


def _time_wrappers(rank, world_size, wrappers, sizes, rows, warmup, repeats, watched):
    """On every rank: for each wrapper (name -> (wrap, is torch DDP)), a model wrapped for
    timing and another, instrumented, for the overlap. `warmup` untimed steps of each, `repeats`
    timed ones, alternating, then `watched` instrumented steps of each. Returns {name:
    ([seconds...], [overlap...], all-reduces per step, bytes all-reduced per step, the timed
    model's parameters, flattened)}."""
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from distlab.data_parallel import (
        count_bucket_all_reduces,
        flat_params,
        mlp,
        overlap_fraction,
        watch_all_reduce,
    )

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(rows, sizes[0], generator=gen)
    y = torch.randint(0, sizes[-1], (rows,), generator=gen)

    def build(wrap, is_torch, instrumented):
        model = mlp(sizes, seed=0)
        ddp = wrap(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        ready = []  # when each gradient was ready, in the last backward
        if instrumented:
            if is_torch:
                count_bucket_all_reduces(ddp)  # its buckets through dist.all_reduce
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(
                    lambda p: ready.append(time.perf_counter()))

        def step():
            if hasattr(ddp, "on_train_batch_start"):
                ddp.on_train_batch_start()
            loss = F.cross_entropy(ddp(x), y)
            if not is_torch:  # 03's wrappers sum: their training loop scales the loss itself
                loss = loss / world_size
            ready.clear()
            start = time.perf_counter()
            loss.backward()
            if hasattr(ddp, "finish_gradient_synchronization"):
                ddp.finish_gradient_synchronization()
            optimizer.step()
            optimizer.zero_grad()
            return start, max(ready, default=start)

        return step, model

    timed, models, instrumented = {}, {}, {}
    for name, (wrap, is_torch) in wrappers.items():
        timed[name], models[name] = build(wrap, is_torch, False)
        instrumented[name] = build(wrap, is_torch, True)[0]
        for _ in range(warmup):
            timed[name]()
            instrumented[name]()
    times = {name: [] for name in timed}
    for _ in range(repeats):
        for name, step in timed.items():
            dist.barrier()
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    results = {}
    for name, step in instrumented.items():
        overlaps = []
        for _ in range(watched):
            dist.barrier()
            with watch_all_reduce() as log:
                begin, end = step()
                dist.barrier()  # every all-reduce of the step has finished on every rank
            overlaps.append(overlap_fraction({"backward": (begin, end),
                                              "all_reduces": log.spans()}))
        results[name] = (times[name], overlaps, len(log.calls), log.total_bytes(),
                         flat_params(models[name]))
    return results


def main() -> list[dict]:
    from torch.nn.parallel import DistributedDataParallel

    from distlab import run

    bucketed, individual = reference("DDPBucketed"), reference("DDPIndividualParameters")
    baseline = f"torch DDP, bucket_cap_mb={BUCKET_MB}"
    wrappers = {
        baseline: (functools.partial(DistributedDataParallel, bucket_cap_mb=BUCKET_MB), True),
        f"DDPBucketed (reference), bucket_size_mb={BUCKET_MB}":
            (functools.partial(bucketed, bucket_size_mb=BUCKET_MB), False),
        "DDPIndividualParameters (reference)": (individual, False)}
    world_sizes, warmup, repeats, rounds, watched = pick(
        (WORLD_SIZES, WARMUP, REPEATS, ROUNDS, WATCHED), ((2,), 1, 1, 1, 1))
    cores, load_before = os.cpu_count(), os.getloadavg()[0]
    slowest = {(n, name): [] for n in world_sizes for name in wrappers}
    overlaps = {(n, name): [] for n in world_sizes for name in wrappers}
    calls = {}
    for _ in range(rounds):
        for n in world_sizes:
            per_rank = run(_time_wrappers, wrappers, SIZES, ROWS, warmup, repeats, watched,
                           world_size=n, backend="gloo", timeout=300)
            for rank, result in enumerate(per_rank):
                want = result[baseline][4]
                for name, (_, rank_overlaps, count, nbytes, params) in result.items():
                    gap = (params - want).abs().max().item()
                    if gap > 1e-5:
                        raise RuntimeError(f"{name}, rank {rank} of {n}: parameters differ from "
                                           f"torch DDP's by {gap:.1e} after the same steps")
                    overlaps[n, name].append(rank_overlaps)
                    calls[n, name] = (count, nbytes)
            for name in wrappers:
                slowest[n, name] += [max(ts) for ts in zip(*(r[name][0] for r in per_rank),
                                                           strict=True)]
    rows = []
    for n in world_sizes:
        base_s = statistics.median(slowest[n, baseline])
        for name in wrappers:
            seconds = statistics.median(slowest[n, name])
            ratio = seconds / base_s
            count, nbytes = calls[n, name]
            # overlaps[n, name]: one list per run() call and rank, the ranks in turn
            per_rank = [statistics.median(o for steps in overlaps[n, name][k::n] for o in steps)
                        for k in range(n)]
            what = ("baseline: " if name == baseline else "") + f"{name}, {n} ranks" + (
                f" (oversubscribed: {n} ranks on {cores} cores)" if n > cores else "")
            rows.append({
                "what": what, "ms/step": f"{seconds * 1e3:.1f}", "ratio": f"{ratio:.2f}x",
                f"within {TARGET}x": ("yes" if ratio <= TARGET else "NO")
                if name.startswith("DDPBucketed") else "",
                "all-reduces/step (MiB)": f"{count} ({nbytes / 2**20:.1f})",
                "overlap with backward (median per rank)":
                    ", ".join(f"{o:.0%}" for o in per_rank)})
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    table(f"03 data parallel, one SGD step (fwd+bwd+sync+step), MLP {'-'.join(map(str, SIZES))}"
          f", {ROWS} rows/rank, gloo, {cores} cores (4 ranks oversubscribed; load average "
          f"{load}); ms = median of {repeats * rounds}, slowest rank; ratio vs torch DDP on the "
          f"same ranks (same run); overlap: instrumented copies, {watched * rounds} steps; "
          "every wrapper's parameters equal torch DDP's after the same steps", rows)
    return rows


if __name__ == "__main__":
    main()
