"""Notebook 08's context parallelism on real ranks: one attention layer's forward and backward
through ring attention (contiguous and zig-zag chunks) and Ulysses, against attention on one
process, with the bytes each rank sent against the reference prediction.

    python -m bench.bench_context_parallel

The pieces are the notebook's, from solutions/08_context_parallel (loaded with
autograder.reference): the reference `ring_attention` (its RingPass and merge_block),
`ulysses_attention`, `zigzag_chunks` and `predicted_bytes`. Batch BATCH, HEADS heads of
HEAD_DIM, SEQ positions, float32, a causal mask.

Baseline: distlab's `attention` on the whole sequence on one process, in the same run; ratio =
the slowest rank's time / the baseline's. Times: the median of REPEATS forward+backward passes
after WARMUP, each started together after a barrier. Bytes: one more forward and backward
under distlab.context_parallel.count_bytes (send and isend tensors; all-to-all inputs less the
rank's own piece), the busiest rank's; the bench raises if any rank sent other than the reference
`predicted_bytes` says.
"""

from __future__ import annotations

import statistics
import time

from autograder.reference import reference
from bench import pick, table

BATCH, HEADS, HEAD_DIM, SEQ = 1, 8, 64, 2048
WARMUP, REPEATS = 1, 5


def _baseline(batch, heads, seq, head_dim, warmup, repeats):
    import torch

    from distlab.context_parallel import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, requires_grad=True) for _ in range(3))
    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        attention(q, k, v, causal=True).sum().backward()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _on_rank(rank, world_size, kind, fns, dims, warmup, repeats):
    import torch
    import torch.distributed as dist

    from distlab.context_parallel import count_bytes

    batch, heads, seq, head_dim = dims
    ring_attention, ulysses_attention, zigzag_chunks = fns
    torch.manual_seed(0)
    whole = [torch.randn(batch, heads, seq, head_dim) for _ in range(3)]
    if kind == "ulysses":
        length = seq // world_size
        mine = [t[..., rank * length:(rank + 1) * length, :].clone() for t in whole]

        def layer(q, k, v):
            return ulysses_attention(q, k, v, True)
    else:
        chunks = ([[r] for r in range(world_size)] if kind == "ring" else
                  [zigzag_chunks(r, world_size) for r in range(world_size)])
        length = seq // sum(len(c) for c in chunks)
        mine = [torch.cat([t[..., c * length:(c + 1) * length, :] for c in chunks[rank]],
                          dim=-2) for t in whole]

        def layer(q, k, v):
            return ring_attention(q, k, v, chunks, True)
    q, k, v = (t.requires_grad_() for t in mine)
    times = []
    for i in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        layer(q, k, v).sum().backward()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    with count_bytes() as sent:
        layer(q, k, v).sum().backward()
    return times, sent.total("isend", "send", "all_to_all_single")


def main() -> list[dict]:
    from distlab import run

    dims = pick((BATCH, HEADS, SEQ, HEAD_DIM), (1, 4, 256, 16))
    warmup, repeats = pick((WARMUP, REPEATS), (0, 1))
    batch, heads, seq, head_dim = dims
    fns = (reference("ring_attention"), reference("ulysses_attention"),
           reference("zigzag_chunks"))
    predicted_bytes = reference("predicted_bytes")
    base = _baseline(batch, heads, seq, head_dim, warmup, repeats)
    rows = [{"layer": "baseline: one process", "ranks": 1, "ms fwd+bwd": f"{base * 1e3:.1f}",
             "ratio": "1.00x", "kB sent (fwd+bwd): measured | predicted": "0 | 0"}]
    for n in (2, 4):
        predicted = predicted_bytes(batch, heads, seq, head_dim, n, 4)
        for kind in ("ring", "zig-zag ring", "ulysses"):
            results = run(_on_rank, kind, fns, dims, warmup, repeats, world_size=n,
                          backend="gloo", timeout=600)
            slowest = statistics.median(max(ts) for ts in zip(*(r[0] for r in results),
                                                              strict=True))
            want = predicted["ulysses" if kind == "ulysses" else "ring"]
            for rank, (_, sent) in enumerate(results):
                if sent != want:
                    raise RuntimeError(f"{kind}, {n} ranks, rank {rank}: sent {sent} B, "
                                       f"predicted {want:.0f}")
            rows.append({"layer": f"{kind}, causal", "ranks": n,
                         "ms fwd+bwd": f"{slowest * 1e3:.1f}", "ratio": f"{slowest / base:.2f}x",
                         "kB sent (fwd+bwd): measured | predicted":
                         f"{results[0][1] / 1e3:.1f} | {want / 1e3:.1f}"})
    table(f"08 context parallel: one causal attention layer, forward and backward (batch "
          f"{batch}, {heads} heads of {head_dim}, {seq} positions, float32); ms = median of "
          f"{repeats}, slowest rank; bytes each rank sent in a forward and backward against the "
          "reference predicted_bytes (every rank checked)", rows)
    return rows


if __name__ == "__main__":
    main()
