"""Notebook 04's tensor-parallel MLP: one training step (forward + backward) on 2 and 4 gloo
ranks, its time and the bytes it communicates.

    python -m bench.bench_tensor_parallel

The MLP is the reference `tp_mlp` of solutions/04_tensor_parallel (Megatron's f and g from
`megatron_f_g` around a column- then a row-parallel layer, the two ends `tp_region` returns),
loaded with autograder.reference.
Baseline: the single-device MLP of the same sizes, F.linear, GeLU, F.linear, forward +
backward on one distlab rank (one process, one torch thread, as each tensor-parallel rank
has), in the same run; ratio = step time / baseline step time (below 1: faster).

As in the notebook, `tp_mlp` takes the whole weights and slices them (`shard`), so autograd
builds every weight gradient full-size (zeros, and a `cat` of the pieces) on every rank. The
second tensor-parallel row isolates that cost: the same f and g and the same collectives, but
each rank holds only its own contiguous shards as leaves, as Megatron-LM does.

Times: the median, over repetitions after a warm-up, of the slowest rank's step (the ranks
start each step together, after a barrier). The world sizes are visited in turn, in several
rounds, and the variants alternate step by step, so a slow spell of the machine hits them all.

Bytes: one more step under `count_collectives`, which records every collective and what a ring
sends per rank; the formula is two all-reduces (g forward, f backward) of the b x d float32
output, 2(N-1)/N of its bytes each. The module raises if the two differ.
"""

from __future__ import annotations

import functools
import os
import statistics

import torch

from autograder.reference import reference
from bench import pick, table

ROWS, D, H = 128, 512, 2048  # b x d input, h = 4d hidden units, float32
WARMUP, REPEATS, ROUNDS = 2, 7, 3  # per round; medians over REPEATS x ROUNDS steps
WORLD_SIZES = (2, 4)


def _single_device_mlp(rank, world_size, x, w1, w2):
    import torch.nn.functional as F

    return F.linear(F.gelu(F.linear(x, w1)), w2)


def _tp_mlp_own_shards(megatron_f_g, rank, world_size, x, w1_shard, w2_shard):
    """tp_mlp (no biases) with this rank's shards given (contiguous leaves), not sliced from
    the whole."""
    import torch.nn.functional as F

    f, g = megatron_f_g()
    return g.apply(F.linear(F.gelu(F.linear(f.apply(x), w1_shard)), w2_shard))


def _time_steps(rank, world_size, variants, x, params, grad_y, warmup, repeats):
    """On every rank: for each variant (name -> (mlp, own_shards)), `warmup` untimed steps of
    mlp forward + backward, then `repeats` timed steps of each, alternating, then one counted
    step of each. Returns {name: ([seconds...], [Call...])} of this rank."""
    import time

    import torch.distributed as dist

    from distlab.tensor_parallel import count_collectives

    w1, w2 = params
    own = [t.chunk(world_size, dim)[rank].contiguous() for t, dim in ((w1, 0), (w2, 1))]
    steps = {}
    for name, (mlp, own_shards) in variants.items():
        weights = own if own_shards else params
        leaves = [t.clone().requires_grad_() for t in (x, *weights)]  # x too: f's backward runs

        def step(mlp=mlp, leaves=leaves):
            for leaf in leaves:
                leaf.grad = None
            mlp(rank, world_size, *leaves).backward(grad_y)

        steps[name] = step
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            dist.barrier()
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    results = {}
    for name, step in steps.items():
        with count_collectives() as calls:
            step()
        results[name] = (times[name], calls)
    return results


def main() -> list[dict]:
    from distlab import run

    tp_mlp, megatron_f_g = reference("tp_mlp"), reference("megatron_f_g")
    world_sizes, warmup, repeats, rounds = pick((WORLD_SIZES, WARMUP, REPEATS, ROUNDS),
                                                ((2,), 1, 1, 1))
    gen = torch.Generator().manual_seed(0)
    x, grad_y = torch.randn(ROWS, D, generator=gen), torch.randn(ROWS, D, generator=gen)
    params = [torch.randn(H, D, generator=gen) / D**0.5,
              torch.randn(D, H, generator=gen) / H**0.5]  # w1, w2: the MLP has no biases
    cores, load_before = os.cpu_count(), os.getloadavg()[0]
    variants = {1: {"baseline: single-device MLP, 1 process": (_single_device_mlp, False)}}
    for n in world_sizes:
        variants[n] = {f"tp_mlp (reference), {n} ranks": (tp_mlp, False),
                       f"tp_mlp on own shards, {n} ranks":
                           (functools.partial(_tp_mlp_own_shards, megatron_f_g), True)}
    slowest = {name: [] for per_n in variants.values() for name in per_n}
    calls = {}
    for _ in range(rounds):
        for n, per_n in variants.items():
            per_rank = run(_time_steps, per_n, x, params, grad_y, warmup, repeats,
                           world_size=n, backend="gloo", timeout=300)
            for name in per_n:
                slowest[name] += [max(ts) for ts in zip(*(r[name][0] for r in per_rank),
                                                        strict=True)]
                calls[name] = [r[name][1] for r in per_rank]
    seconds = {name: statistics.median(ts) for name, ts in slowest.items()}
    base_s = next(iter(seconds.values()))
    rows = []
    for n, per_n in variants.items():
        # g forward + f backward: two all-reduces of the b x d float32 output
        formula = 2 * (2 * (n - 1) / n * ROWS * D * 4) if n > 1 else 0
        for name in per_n:
            for rank, rank_calls in enumerate(calls[name]):
                measured = sum(c.sent for c in rank_calls)
                kinds = [(c.name, c.backward) for c in rank_calls]
                expected = [("all_reduce", False), ("all_reduce", True)] if n > 1 else []
                if measured != formula or kinds != expected:
                    raise RuntimeError(f"{name}, rank {rank}: {kinds} send {measured:g} bytes; "
                                       f"the formula says {expected}, {formula:g} bytes")
            what = name + (f" (oversubscribed: {n} ranks on {cores} cores)" if n > cores else "")
            rows.append({"what": what, "ms/step": f"{seconds[name] * 1e3:.1f}",
                         "ratio": f"{seconds[name] / base_s:.2f}x",
                         "collectives/rank": "2 all_reduce: g fwd, f bwd" if n > 1 else "none",
                         "sent/rank B (measured)": f"{measured:g}",
                         "formula 2x2(N-1)/N*b*d*4": f"{formula:g}",
                         "measured == formula": "yes" if measured == formula else "NO"})
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    table(f"04 tensor-parallel MLP, one step (fwd+bwd), b={ROWS} d={D} h={H} float32, gloo, "
          f"{cores} cores (4 ranks oversubscribed; load average {load}); ms = median of "
          f"{repeats * rounds}, slowest rank; ratio vs the baseline (same run); bytes: "
          "count_collectives, ring all-reduce", rows)
    return rows


if __name__ == "__main__":
    main()
