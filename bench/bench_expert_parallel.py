"""Notebook 09's MoE layer with expert parallelism on real ranks: one forward and backward of
the reference `ep_moe` per world size and router, the slowest rank's time, and the bytes each
rank's dispatch and combine sent off-rank against the reference `predict_a2a_bytes`.

    python -m bench.bench_expert_parallel

The pieces are the notebook's, from solutions/09_expert_parallel (loaded with
autograder.reference): route_top_k, ep_moe (its all_rows and run_experts), predict_a2a_bytes.
Each rank holds TOKENS tokens of width HIDDEN and 2 experts of inner width FFN, k = 2, a
capacity factor of 1.25. Two routers: a random one (loads near even) and a skewed one whose
scores favour rank 0's experts (the imbalance of the notebook's section 3).

Baseline: the same layer on one process (world size 1: its 2 experts, no communication), in
the same run; ratio = the slowest rank's time / the baseline's (each rank does about the same
work as the baseline when the loads are even: the ratio is the cost of the all-to-alls and of
the imbalance; ranks share this machine's cores).
Times: the median of REPEATS runs after WARMUP, each started together after a barrier.
Bytes: one more forward under distlab.expert_parallel.count_all_to_all; the run raises if any
rank sent other than the reference prediction.
"""

from __future__ import annotations

import math
import statistics
import time

from autograder.reference import module, reference
from bench import pick, table

TOKENS, HIDDEN, FFN, LOCAL, K, FACTOR = 512, 256, 512, 2, 2, 1.25
WARMUP, REPEATS = 2, 7


def _weights(experts, world_size, skew):
    import torch

    g = torch.Generator().manual_seed(0)
    router = torch.randn(HIDDEN, experts, generator=g, dtype=torch.float64) / HIDDEN**0.5
    w1 = torch.randn(experts, HIDDEN, FFN, generator=g, dtype=torch.float64) / HIDDEN**0.5
    w2 = torch.randn(experts, FFN, HIDDEN, generator=g, dtype=torch.float64) / FFN**0.5
    xs = torch.randn(world_size, TOKENS, HIDDEN, generator=g, dtype=torch.float64)
    if skew:
        xs += 0.3
        router[:, :LOCAL] += 0.05
    return router, w1, w2, xs


def _on_rank(rank, world_size, moe, skew, warmup, repeats):
    import torch.distributed as dist

    from distlab.expert_parallel import count_all_to_all

    experts = LOCAL * world_size
    router, w1, w2, xs = _weights(experts, world_size, skew)
    mine = slice(rank * LOCAL, (rank + 1) * LOCAL)
    cap = math.ceil(FACTOR * K * TOKENS / experts)
    a, b = (w[mine].clone().requires_grad_() for w in (w1, w2))
    x = xs[rank].clone().requires_grad_()
    times = []
    for k in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        moe.ep_moe(x, router, a, b, K, cap).pow(2).sum().backward()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    with count_all_to_all() as calls:
        moe.ep_moe(x, router, a, b, K, cap)
    chosen, _, keep = moe.route_top_k(xs[rank] @ router, K, cap)
    return times, calls.off_rank_bytes(rank)[1:], (chosen, keep)


def main() -> list[dict]:
    from distlab import run

    moe = module("09_expert_parallel")
    predict = reference("predict_a2a_bytes")
    sizes, warmup, repeats = pick(((1, 2, 4), WARMUP, REPEATS), ((1, 2), 0, 1))
    rows, base = [], {}
    for skew in (False, True):
        for n in sizes:
            results = run(_on_rank, moe, skew, warmup, repeats, world_size=n, backend="gloo",
                          timeout=300)
            slowest = statistics.median(max(ts) for ts in zip(*(r[0] for r in results),
                                                              strict=True))
            base.setdefault(skew, slowest)
            dispatch, combine = predict([r[2][0] for r in results], [r[2][1] for r in results],
                                        LOCAL, HIDDEN * 8)
            for rank, (_, sent, _) in enumerate(results):
                if sent != [dispatch[rank], combine[rank]]:
                    raise RuntimeError(f"{n} ranks, rank {rank}: sent {sent} B, predicted "
                                       f"{[dispatch[rank], combine[rank]]}")
            loads = [sum(int((r[2][1] & (r[2][0] // LOCAL == q)).sum()) for r in results)
                     for q in range(n)]
            rows.append({
                "router": "skewed" if skew else "random",
                "ranks": ("baseline: " if n == 1 else "") + str(n),
                "rows per rank (max | mean)": f"{max(loads)} | {sum(loads) / n:.0f}",
                "ms fwd+bwd": f"{slowest * 1e3:.1f}",
                "ratio": f"{slowest / base[skew]:.2f}x",
                "dispatch kB sent (max rank)": f"{max(dispatch) / 1e3:.1f}",
                "combine kB sent (max rank)": f"{max(combine) / 1e3:.1f}"})
    table(f"09 expert parallel: ep_moe forward + backward, {TOKENS} tokens a rank (hidden "
          f"{HIDDEN}, float64), {LOCAL} experts a rank (ffn {FFN}), k={K}, capacity factor "
          f"{FACTOR}; ms = median of {repeats}, slowest rank; bytes measured = the reference "
          "predict_a2a_bytes on every rank", rows)
    return rows


if __name__ == "__main__":
    main()
