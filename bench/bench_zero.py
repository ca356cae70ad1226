"""Notebook 06's ZeRO stages 0-3 on real ranks: one AdamW training step's time, and the model
states each rank holds (parameters, gradients, optimizer state) against the paper's formula.

    python -m bench.bench_zero

The stages are the notebook's, from solutions/06_zero (loaded with autograder.reference):
stage 0 is plain data parallelism (the full model and AdamW on every rank, each gradient
all-reduced after the backward, as the notebook's `step_counted(..., ddp=True)`); stage 1 the
reference `ShardedOptimizer` (whole parameters owned by ranks, all-reduce + broadcasts);
stage 2 the reference `Zero2Optimizer` (one padded flat buffer, reduce-scatter + all-gather);
stage 3 the notebook's `zero3` (each Linear a unit through its `GatheredUnit`: gathered for its
forward and again for its backward, its gradient reduce-scattered). Each rank builds them as
the notebook's `one_step(rank, world_size, stage)` does, on one float32 model: the notebook's
BIG widths
(64, 256, 128, 256, 64, 16) made 4x wider, so that a step computes something (1.6 M parameters
in 10 tensors; the 1024x512 and 512x1024 weights are a third of the model each), with 63
outputs instead of 64: BIG's layer sizes are all multiples of 4, so on 2 and 4 ranks nothing
is padded; 63 makes the last layer, and Psi, odd. ROWS rows per rank, MSE loss, AdamW.

Baseline: stage 0 on the same ranks, in the same run; ratio = step time / the baseline's.
Times: the median, over repetitions after a warm-up, of the slowest rank's step (the ranks start
each step together, after a barrier). The world sizes are visited in turn, in several rounds,
and the stages alternate step by step, so a slow spell of the machine hits them all.
Sent: one more step of each under distlab.zero.count_collectives, per rank with ring algorithms
(all-reduce 2(N-1)/N of its message, the others (N-1)/N), in units of 4 Psi bytes.

Bytes: after the last step, each rank's parameters, gradients and optimizer state, counted
from the live tensors (distlab.zero.tensor_bytes / state_bytes: a flat buffer once, padding
included), as the notebook's `one_step`; the row shows the fullest rank. The formula is the
reference `model_state_bytes(psi, N, stage, (4, 4, 8))` (fp32 AdamW). The module predicts
every rank's bytes exactly from the layout (padding to a multiple of N, the greedy owners of
the reference `assign_params`, AdamW's 4-byte step counter per tensor it updates) and raises
if a measurement differs from that prediction; the `why` column is that prediction less the
formula.
"""

from __future__ import annotations

import math
import os
import statistics

from autograder.reference import module, reference
from bench import pick, table

# the notebook's BIG (64, 256, 128, 256, 64, 16) made 4x wider, the last layer one narrower
WIDTHS = (256, 1024, 512, 1024, 256, 63)
ROWS = 64  # per rank
STAGES = (0, 1, 2, 3)
WORLD_SIZES = (2, 4)
WARMUP, REPEATS, ROUNDS = 2, 7, 3  # per round; medians over REPEATS x ROUNDS steps
WIDTH_BYTES = (4, 4, 8)  # fp32 parameter, gradient, AdamW's exp_avg + exp_avg_sq
COUNTER_BYTES = 4  # AdamW's `step`: a float32 scalar tensor per parameter tensor it updates
RING = {"all_reduce": 2, "reduce_scatter_single": 1, "all_gather_single": 1, "broadcast": 1,
        "reduce": 1}
NAMES = {0: "stage 0: DDP-style (all-reduce each grad)", 1: "stage 1: ShardedOptimizer",
         2: "stage 2: Zero2Optimizer", 3: "stage 3: zero3 (GatheredUnit)"}


def _time_stages(rank, world_size, zero, widths, rows, warmup, repeats):
    """On every rank: the model and AdamW of each ZeRO stage (as the notebook's one_step),
    `warmup` untimed steps of each, `repeats` timed ones, alternating, then one counted step
    of each. Returns {stage: ([seconds...], [(collective, bytes)...], (params, grads,
    optimizer state) bytes, step counters, elements the local optimizer updates)}."""
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from distlab.zero import count_collectives, state_bytes, tensor_bytes

    steps, held = {}, {}
    for stage in STAGES:
        model = zero.make_model(widths, dtype=torch.float32)
        x, y = zero.my_part(zero.make_batch(world_size, per_rank=rows, widths=widths,
                                            dtype=torch.float32), rank, world_size)
        if stage == 3:
            model = zero.zero3(model)
        if stage in (0, 3):
            optimizer = local = torch.optim.AdamW(model.parameters(), lr=1e-3)
        elif stage == 1:
            optimizer = zero.ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
            local = optimizer.local
        else:
            optimizer = zero.Zero2Optimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
            local = optimizer.local

        def step(model=model, x=x, y=y, optimizer=optimizer, ddp=stage < 2):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            if ddp:
                for p in model.parameters():
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            optimizer.step()

        def measure(model=model, optimizer=optimizer, local=local, stage=stage):
            params = list(model.parameters())
            grads = [p.grad for p in params] + ([optimizer.shard.grad] if stage == 2 else [])
            counters = sum(1 for state in local.state.values() if "step" in state)
            updated = sum(p.numel() for group in local.param_groups for p in group["params"])
            return (tensor_bytes(params), tensor_bytes(grads), state_bytes(local)), counters, \
                updated

        steps[stage], held[stage] = step, measure
        for _ in range(warmup):
            step()
    times = {stage: [] for stage in steps}
    for _ in range(repeats):
        for stage, step in steps.items():
            dist.barrier()
            start = time.perf_counter()
            step()
            times[stage].append(time.perf_counter() - start)
    results = {}
    for stage, step in steps.items():
        with count_collectives() as counter:
            step()
        results[stage] = (times[stage], counter.calls, *held[stage]())
    return results


def _plural(count, word):
    return f"{count:g} {word}{'' if count == 1 else 's'}"


def _counters(count):
    return _plural(count, "step counter")


def _percent(share):
    """share as a percentage with two significant digits, without an exponent."""
    if share == 0:
        return "0%"
    decimals = max(2, 1 - math.floor(math.log10(abs(100 * share))))
    return f"{100 * share:+.{decimals}f}%"


def _predicted(stage, n, rank, sizes, layer_sizes, assign_params):
    """(params, grads, optimizer) bytes rank `rank` of n should hold after a step of `stage`,
    and what makes them differ from the formula: {reason: bytes}."""
    p, g, k = WIDTH_BYTES
    psi, tensors = sum(sizes), len(sizes)
    if stage == 0:
        return (p * psi, g * psi, k * psi + COUNTER_BYTES * tensors), \
            {_counters(tensors): COUNTER_BYTES * tensors}
    if stage == 1:
        owners, _ = assign_params(sizes, [0] * n)
        owned = sum(s for s, o in zip(sizes, owners, strict=True) if o == rank)
        count = owners.count(rank)
        return (p * psi, g * psi, k * owned + COUNTER_BYTES * count), \
            {f"owns {owned} of {psi} elements (whole parameters, greedy)": k * (owned - psi / n),
             _counters(count): COUNTER_BYTES * count}
    if stage == 2:  # one flat buffer, padded to n equal slices; params view the whole of it
        size = math.ceil(psi / n)
        pad = n * size - psi
        return (p * n * size, g * size, k * size + COUNTER_BYTES), \
            {f"padding: {_plural(pad, 'element')} in the flat buffer, {pad / n:g} per slice":
                p * pad + (g + k) * pad / n, _counters(1): COUNTER_BYTES}
    slices = [math.ceil(m / n) for m in layer_sizes]  # stage 3: one padded buffer per layer
    pad = n * sum(slices) - psi
    return (p * sum(slices), g * sum(slices), k * sum(slices) + COUNTER_BYTES * len(slices)), \
        {f"padding: {_plural(pad, 'element')} over {len(slices)} layers, {pad / n:g} per rank":
            (p + g + k) * pad / n, _counters(len(slices)): COUNTER_BYTES * len(slices)}


def main() -> list[dict]:
    from distlab import run

    zero = module("06_zero")  # the solved notebook's definitions: model, data, zero3, ...
    model_state_bytes, assign_params = reference("model_state_bytes"), reference("assign_params")
    model = zero.make_model(WIDTHS)
    sizes = [t.numel() for t in model.parameters()]
    layer_sizes = [sum(t.numel() for t in layer.parameters()) for layer in model
                   if any(True for _ in layer.parameters())]
    psi = sum(sizes)
    world_sizes, warmup, repeats, rounds = pick((WORLD_SIZES, WARMUP, REPEATS, ROUNDS),
                                                ((2,), 1, 1, 1))
    cores, load_before = os.cpu_count(), os.getloadavg()[0]
    slowest = {(n, stage): [] for n in world_sizes for stage in STAGES}
    results = {}
    for _ in range(rounds):
        for n in world_sizes:
            per_rank = run(_time_stages, zero, WIDTHS, ROWS, warmup, repeats, world_size=n,
                           backend="gloo", timeout=300)
            for stage in STAGES:
                slowest[n, stage] += [max(ts) for ts in zip(*(r[stage][0] for r in per_rank),
                                                            strict=True)]
                results[n, stage] = [r[stage][1:] for r in per_rank]
    rows = []
    for n in world_sizes:
        base_s = statistics.median(slowest[n, 0])
        for stage in STAGES:
            seconds = statistics.median(slowest[n, stage])
            totals, whys = [], None
            for rank, (calls, held, counters, updated) in enumerate(results[n, stage]):
                want, why = _predicted(stage, n, rank, sizes, layer_sizes, assign_params)
                if held != want:
                    raise RuntimeError(f"{NAMES[stage]}, rank {rank} of {n}: holds {held} bytes "
                                       f"(params, grads, optimizer; {counters} step counters, "
                                       f"{updated} elements updated), predicted {want}")
                if not totals or sum(held) > max(totals):
                    fullest, whys, fullest_calls = held, why, calls
                totals.append(sum(held))
            formula = model_state_bytes(psi, n, stage, WIDTH_BYTES)
            diff = sum(fullest) - sum(formula)
            if abs(diff - sum(whys.values())) > 1e-6 * sum(formula):
                raise RuntimeError(f"{NAMES[stage]}, {n} ranks: {diff:g} bytes over the formula,"
                                   f" the reasons add up to {sum(whys.values()):g}")
            sent = sum(RING[name] * (n - 1) / n * nbytes for name, nbytes in fullest_calls)
            what = f"{NAMES[stage]}, {n} ranks" + (
                f" (oversubscribed: {n} ranks on {cores} cores)" if n > cores else "")
            rows.append({
                "what": ("baseline: " if stage == 0 else "") + what,
                "ms/step": f"{seconds * 1e3:.1f}", "ratio": f"{seconds / base_s:.2f}x",
                "sent/rank (calls)": f"{sent / (4 * psi):.2f} x 4Psi ({len(fullest_calls)})",
                "params B": f"{fullest[0]}", "grads B": f"{fullest[1]}",
                "optimizer B": f"{fullest[2]}",
                "total B (fullest; per rank)": f"{sum(fullest)}" + (
                    "" if len(set(totals)) == 1 else f" ({', '.join(map(str, totals))})"),
                "formula B": f"{sum(formula):.0f}", "diff": _percent(diff / sum(formula)),
                "why (bytes over the formula)": "; ".join(
                    f"{reason} {value:+,.0f}" for reason, value in whys.items())})
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    table(f"06 ZeRO stages 0-3, one AdamW step (fwd+bwd+step), MLP {'-'.join(map(str, WIDTHS))}"
          f" (Psi={psi} float32 in {len(sizes)} tensors), {ROWS} rows/rank, gloo, {cores} cores "
          f"(4 ranks oversubscribed; load average {load}); ms = median of {repeats * rounds}, "
          "slowest rank; ratio vs stage 0 on the same ranks (same run); bytes: live tensors "
          "after the step on the fullest rank, formula = reference model_state_bytes with fp32 "
          "AdamW widths (4, 4, 8); every rank's bytes match the layout's prediction", rows)
    return rows


if __name__ == "__main__":
    main()
