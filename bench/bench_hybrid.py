"""Notebook 07's hand-built DP x TP x PP training on real ranks: one step's time per layout,
and the bytes each group moved against the reference prediction and notebook 02's analyzer.

    python -m bench.bench_hybrid

The pieces are the notebook's, from solutions/07_hybrid (loaded with autograder.reference):
its Block model (one block per pipeline stage, so every rank computes one block, its TP part,
whatever the layout; each split over its TP group by the reference
`TPBlock`), the groups of the reference `group_ranks`, one step of the reference `train_3d`
(GPipe over PP, 2 micro-batches, the gradient average over DP), on a batch of ROWS rows. The
notebook's widths (hidden 8, ff 16) make the step all latency; here WIDE makes each message a
few hundred kB, so that the bytes take time.

Baseline: the same model on one process (PP = DP = TP = 1: no communication at all), in the
same run; ratio = the slowest rank's step time / the baseline's. Times: the median of REPEATS
steps after WARMUP, each started together after a barrier.

Bytes: one more step under distlab.hybrid.count_by_group, per rank and group (the messages of
its all-reduces, sends and receives); the table shows the busiest rank's, and raises if any
rank moved other than the reference `group_bytes` predicts (its TP and DP bytes; the PP
bytes against one activation and one gradient per micro-batch over each boundary a stage
touches). The `02 analyzer` column is its byte count (here given 8-byte values, 12 L h^2
parameters, 4 TP all-reduces per layer per micro-batch).
"""

from __future__ import annotations

import statistics
import time

from autograder.reference import module, reference
from bench import pick, table

ROWS, MICRO, WARMUP, REPEATS = 16, 2, 2, 7
WIDE = {"hidden": 256, "ff": 1024, "seq": 16}
LAYOUTS = ((1, 1, 1), (1, 2, 2), (2, 2, 1), (2, 1, 2), (2, 2, 2))  # (pp, dp, tp)


def analyzer_02(dims, shape, rows, micro_batches, nbytes=2):
    """Notebook 02's iteration_costs, its bytes only: {"tp", "dp", "pp"}, message bytes per GPU
    (pp: a first or last stage). Notebook 07 shows it in group_bytes' Why, not as code."""
    pp, dp, tp = shape
    L, h, s = dims["blocks"], dims["hidden"], dims["seq"]
    b = rows // (dp * micro_batches)
    activation = b * s * h * nbytes
    return {"tp": 4 * (L // pp) * micro_batches * activation if tp > 1 else 0,
            "dp": 12 * L * h**2 / (tp * pp) * nbytes if dp > 1 else 0,
            "pp": 2 * micro_batches * activation if pp > 1 else 0}


def _on_rank(rank, world_size, hybrid, shape, wide, rows, micro, warmup, repeats):
    import torch
    import torch.distributed as dist
    from torch import nn

    from distlab.hybrid import count_by_group

    mesh_coords, group_ranks = hybrid.mesh_coords, hybrid.group_ranks
    groups = {}
    for dim, name in enumerate(("pp", "dp", "tp")):
        for ranks in group_ranks(shape, dim):
            group = dist.new_group(ranks)
            if rank in ranks:
                groups[name] = (group, ranks)
    torch.manual_seed(0)
    blocks = [hybrid.Block(wide["hidden"], wide["ff"]).double() for _ in range(shape[0])]
    p = mesh_coords(rank, shape)[0]
    stage = nn.Sequential(hybrid.TPBlock(blocks[p], groups["tp"][0]))
    generator = torch.Generator().manual_seed(1)
    x, y = (torch.randn(rows, wide["seq"], wide["hidden"], generator=generator,
                        dtype=torch.float64) for _ in range(2))
    mine = {name: group for name, (group, _) in groups.items()}
    times = []
    for k in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        hybrid.train_3d(stage, x, y, mine, steps=1, micro_batches=micro)
        if k >= warmup:
            times.append(time.perf_counter() - start)
    with count_by_group({name: ranks for name, (_, ranks) in groups.items()}) as calls:
        hybrid.train_3d(stage, x, y, mine, steps=1, micro_batches=micro)
    moved = {name: calls.bytes_by(name) if len(ranks) > 1 else 0
             for name, (_, ranks) in groups.items()}
    return times, moved


def main() -> list[dict]:
    from distlab import run

    hybrid = module("07_hybrid")
    group_bytes = reference("group_bytes")
    # quick: each kind of group on 2 ranks
    layouts, warmup, repeats = pick((LAYOUTS, WARMUP, REPEATS),
                                    (((1, 1, 1), (1, 1, 2), (1, 2, 1), (2, 1, 1)), 0, 1))
    slowest, rows = {}, []
    for shape in layouts:
        n = shape[0] * shape[1] * shape[2]
        results = run(_on_rank, hybrid, shape, WIDE, ROWS, MICRO, warmup, repeats,
                      world_size=n, backend="gloo", timeout=300)
        slowest[shape] = statistics.median(max(ts) for ts in zip(*(r[0] for r in results),
                                                                 strict=True))
        dims = {"blocks": shape[0], **WIDE}
        predicted = group_bytes(dims, shape, ROWS, MICRO)
        predicted["pp"] = 2 * min(shape[0] - 1, 2) * ROWS // shape[1] * WIDE["seq"] \
            * WIDE["hidden"] * 8  # float64
        analyzer = analyzer_02(dims, shape, ROWS, MICRO, nbytes=8)  # float64
        for rank, (_, moved) in enumerate(results):  # pp <= 2: every rank is the busiest
            for name in ("tp", "dp", "pp"):
                if moved[name] != predicted[name]:
                    raise RuntimeError(f"{shape}, rank {rank}: {name} moved {moved[name]} B, "
                                       f"predicted {predicted[name]:.0f}")
        busiest = max((r[1] for r in results), key=lambda m: sum(m.values()))
        base = slowest[layouts[0]]
        rows.append({
            "layout (pp, dp, tp)": ("baseline: " if shape == layouts[0] else "") + str(shape),
            "ranks": n, "ms/step": f"{slowest[shape] * 1e3:.1f}",
            "ratio": f"{slowest[shape] / base:.2f}x",
            **{f"{name.upper()} kB: moved | predicted | 02": (
                f"{busiest[name] / 1e3:.1f} | {predicted[name] / 1e3:.1f} | "
                f"{analyzer[name] / 1e3:.1f}") for name in ("tp", "dp", "pp")}})
    table(f"07 hybrid: one train_3d step (GPipe, {MICRO} micro-batches, SGD), one Block per "
          f"stage (hidden {WIDE['hidden']}, ff {WIDE['ff']}, seq {WIDE['seq']}, float64), "
          f"{ROWS} rows; ms = median of {repeats}, slowest rank; bytes of the busiest rank "
          "against the reference group_bytes (every rank checked) and notebook 02's analyzer",
          rows)
    return rows


if __name__ == "__main__":
    main()
