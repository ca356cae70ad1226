"""Notebook 05's pipeline on real ranks: one training step with the GPipe and the 1F1B order on
2 gloo ranks, its time, the activations it keeps, and its bubble against the formula.

    python -m bench.bench_pipeline_parallel

Each rank runs its stage with the reference `run_stage` of solutions/05_pipeline_parallel (the
function the notebook runs an order with), the orders made by the reference `gpipe_table` (read
row by row, as the notebook's `gpipe_order`) and `one_f_one_b_order`. The model: 2 stages of
LAYERS x (Linear(WIDTH, WIDTH), tanh), one per rank, 2 ranks on 2 cores (one each); the batch
of ROWS rows is cut into M micro-batches, the loss is the MSE.

Baseline: the unsplit model's step (forward, MSE loss, backward) on the whole batch, on one
distlab rank (one process, one torch thread, as each pipeline rank has), in the same run;
ratio = step time / baseline step time. The row after it runs the same M micro-batches one
after the other on that one process (gradient accumulation): what micro-batching alone costs.
Times: the median, over repetitions after a warm-up, of the slowest rank's step; the world
sizes are visited in turn, in several rounds, and the variants alternate step by step.

In flight: the most micro-batches a stage held at once, as run_stage measures it, and as
distlab.pipeline_parallel.peak_in_flight reads it off the order (the module raises if they differ).
Saved: the peak bytes of activations that autograd held for the backward on each stage,
counted with saved_tensors_hooks (each storage once, the weights, the batch and the targets
left out), against in flight x the bytes one micro-batch saves, (LAYERS + 1) x rows x WIDTH x 4
(the stage's input and each tanh's output); on one process, the whole model's (each tanh's
output: the input is the batch itself).

Bubble: measured, 1 - (time the ranks computed) / (2 ranks x the step), where a rank's compute
time is its step less the time it spent in dist.recv and waiting for its sends; simulated,
distlab.pipeline_parallel.simulate(order).bubble (F = 1, B = 2); the formula (S-1)/(M+S-1).
"""

from __future__ import annotations

import contextlib
import os
import statistics

from autograder.reference import reference
from bench import pick, table

S = 2  # stages, one per rank
LAYERS, WIDTH, ROWS = 2, 512, 512  # per stage; the whole batch: ROWS x WIDTH float32
MICROBATCHES = (4, 8)
WARMUP, REPEATS, ROUNDS = 2, 5, 3  # per round; medians over REPEATS x ROUNDS steps


def _model(num_stages):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(*[m for _ in range(LAYERS)
                                           for m in (nn.Linear(WIDTH, WIDTH), nn.Tanh())])
                           for _ in range(num_stages)])


def _batch():
    import torch

    gen = torch.Generator().manual_seed(1)
    return torch.randn(ROWS, WIDTH, generator=gen), torch.randn(ROWS, WIDTH, generator=gen)


@contextlib.contextmanager
def _saved_bytes(persistent):
    """Count the bytes autograd saves for the backward while they are held: yields a dict whose
    "peak" is the most held at once. Each storage counts once; `persistent` storages (weights,
    data) not at all. A saved tensor is let go when its holder is (after its backward)."""
    import weakref

    import torch

    class Held:
        __slots__ = ("tensor", "__weakref__")

    live, stats = {}, {"now": 0, "peak": 0}

    def release(ptr):
        live[ptr][0] -= 1
        if live[ptr][0] == 0:
            stats["now"] -= live.pop(ptr)[1]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in persistent:
            return t
        if ptr in live:
            live[ptr][0] += 1
        else:
            live[ptr] = [1, storage.nbytes()]
            stats["now"] += storage.nbytes()
            stats["peak"] = max(stats["peak"], stats["now"])
        held = Held()
        held.tensor = t
        weakref.finalize(held, release, ptr)
        return held

    with torch.autograd.graph.saved_tensors_hooks(
            pack, lambda held: held.tensor if isinstance(held, Held) else held):
        yield stats


@contextlib.contextmanager
def _waits(waited):
    """Add to waited[0] the seconds spent in dist.recv and in the wait() of dist.isend's
    requests inside the block."""
    import time

    import torch.distributed as dist

    recv, isend = dist.recv, dist.isend

    class Timed:
        def __init__(self, request):
            self.request = request

        def wait(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return self.request.wait(*args, **kwargs)
            finally:
                waited[0] += time.perf_counter() - start

    def timed_recv(*args, **kwargs):
        start = time.perf_counter()
        try:
            return recv(*args, **kwargs)
        finally:
            waited[0] += time.perf_counter() - start

    dist.recv, dist.isend = timed_recv, lambda *args, **kwargs: Timed(isend(*args, **kwargs))
    try:
        yield
    finally:
        dist.recv, dist.isend = recv, isend


def _time_steps(rank, world_size, run_stage, variants, warmup, repeats):
    """On every rank: variants maps a name to (M, order), run with the reference run_stage
    (order None: the unsplit model on this one rank, M micro-batches one after the other).
    `warmup` untimed steps of each, `repeats` timed ones, alternating, then one step of each
    counting the saved bytes. Returns {name: ([(seconds, seconds waiting)...], peak
    micro-batches held, peak saved bytes, losses)}."""
    import time

    import torch.distributed as dist
    import torch.nn.functional as F

    model = _model(S)  # the whole model on every rank: stage `rank` of it on a pipeline rank
    x, y = _batch()
    stage = model[rank]
    params = list(model.parameters())
    persistent = {t.untyped_storage().data_ptr() for t in (x, y, *params)}
    first, last = rank == 0, rank == world_size - 1

    def step(num_microbatches, order):
        for p in params:
            p.grad = None
        if order is None:  # the unsplit model
            losses = []
            for xs, ys in zip(x.chunk(num_microbatches), y.chunk(num_microbatches), strict=True):
                loss = F.mse_loss(model(xs), ys)
                (loss / num_microbatches).backward()
                losses.append(loss.item())
            return losses, 1
        inputs = list(x.chunk(num_microbatches)) if first else None
        targets = list(y.chunk(num_microbatches)) if last else None
        return run_stage(rank, world_size, stage, order[rank], inputs, targets,
                         (ROWS // num_microbatches, WIDTH))

    for args in variants.values():
        for _ in range(warmup):
            step(*args)
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, args in variants.items():
            waited = [0.0]
            dist.barrier()
            with _waits(waited):
                start = time.perf_counter()
                step(*args)
                times[name].append((time.perf_counter() - start, waited[0]))
    results = {}
    for name, args in variants.items():
        with _saved_bytes(persistent) as saved:
            losses, peak = step(*args)
        results[name] = (times[name], peak, saved["peak"], losses)
    return results


def main() -> list[dict]:
    from distlab import run
    from distlab.pipeline_parallel import peak_in_flight, simulate

    run_stage, gpipe_table, one_f_one_b_order = (
        reference(name) for name in ("run_stage", "gpipe_table", "one_f_one_b_order"))

    def gpipe_order(num_stages, num_microbatches):  # the notebook's: the table's rows
        return [[a for a in row if a is not None]
                for row in gpipe_table(num_stages, num_microbatches)[0]]

    microbatches, warmup, repeats, rounds = pick((MICROBATCHES, WARMUP, REPEATS, ROUNDS),
                                                 ((4,), 1, 1, 1))
    cores, load_before = os.cpu_count(), os.getloadavg()[0]
    single = {"baseline: unsplit model, whole batch, 1 process": (1, None)}
    single.update({f"unsplit, {m} micro-batches accumulated, 1 process": (m, None)
                   for m in microbatches})
    piped = {f"{name}, S={S} ranks, M={m}": (m, make(S, m)) for m in microbatches
             for name, make in (("GPipe", gpipe_order), ("1F1B", one_f_one_b_order))}
    samples = {name: [] for name in (*single, *piped)}
    results = {}
    for _ in range(rounds):
        for world_size, variants in ((1, single), (S, piped)):
            per_rank = run(_time_steps, run_stage, variants, warmup, repeats,
                           world_size=world_size, backend="gloo", timeout=300)
            for name in variants:
                for steps in zip(*(r[name][0] for r in per_rank), strict=True):
                    makespan = max(seconds for seconds, _ in steps)
                    busy = sum(seconds - waited for seconds, waited in steps)
                    samples[name].append((makespan, 1 - busy / (len(steps) * makespan)))
                results[name] = [r[name] for r in per_rank]  # per rank
    base_s = statistics.median(t for t, _ in samples[next(iter(single))])
    base_losses = results[next(iter(single))][0][3]
    per_mb_bytes = {m: (LAYERS + 1) * ROWS // m * WIDTH * 4 for m in microbatches}
    rows = []
    for name, (m, order) in {**single, **piped}.items():
        seconds = statistics.median(t for t, _ in samples[name])
        held = [r[1] for r in results[name]]
        saved = [r[2] for r in results[name]]
        losses = results[name][-1][3]
        if abs(sum(losses) / len(losses) - base_losses[0]) > 1e-5:
            raise RuntimeError(f"{name}: mean loss {sum(losses) / len(losses)}, the unsplit "
                               f"model's {base_losses[0]}")
        row = {"what": name, "ms/step": f"{seconds * 1e3:.1f}",
               "ratio": f"{seconds / base_s:.2f}x"}
        if order is None:
            row.update({"in flight/stage (run_stage; simulated)": f"{m} batch at once" if m == 1
                        else "1 micro-batch at once",
                        "saved KiB/stage at peak (= in flight x per mb)":
                            f"{saved[0] / 1024:g} (whole model)",
                        "bubble measured": "", "simulated": "", "formula (S-1)/(M+S-1)": ""})
        else:
            simulated_peaks = list(peak_in_flight(order).values())
            if held != simulated_peaks:
                raise RuntimeError(f"{name}: run_stage held {held} micro-batches per stage, "
                                   f"peak_in_flight says {simulated_peaks}")
            expected = [h * per_mb_bytes[m] for h in held]
            bubble = statistics.median(b for _, b in samples[name])
            row.update({"in flight/stage (run_stage; simulated)": f"{held}; {simulated_peaks}",
                        "saved KiB/stage at peak (= in flight x per mb)":
                            f"{[s / 1024 for s in saved]}".replace(".0", "")
                            + (" (=)" if saved == expected else f" (expected {expected})"),
                        "bubble measured": f"{bubble:.1%}",
                        "simulated": f"{simulate(order).bubble:.1%}",
                        "formula (S-1)/(M+S-1)": f"{(S - 1) / (m + S - 1):.1%}"})
        rows.append(row)
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    table(f"05 pipeline step (fwd+bwd), GPipe vs 1F1B on {S} gloo ranks ({cores} cores, one rank "
          f"each; load average {load}), {S} stages x {LAYERS} x Linear({WIDTH}, {WIDTH})+tanh, "
          f"batch {ROWS} rows float32; ms = median of {repeats * rounds}, slowest rank; ratio "
          "vs the baseline (same run)", rows)
    return rows


if __name__ == "__main__":
    main()
