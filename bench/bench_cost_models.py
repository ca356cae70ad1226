"""Notebook 02's measurement sweep: its wall time, and the fitted model's error on sizes left
out of the fit.

    python -m bench.bench_cost_models

Baseline: the same number of `distlab.run` calls doing nothing, in the same run, so the ratio
says what the timed collectives cost on top of launching them (target for the sweep: < 20 s).
"""

from __future__ import annotations

import time

import numpy as np

from autograder.reference import reference
from bench import pick, table


def _idle(rank, world_size):
    return 0.0


def main() -> list[dict]:
    from distlab import run
    from distlab.cost_models import measure

    sizes = pick([4 * 4**k for k in range(13)],  # 4 bytes to 64 MiB, as the notebook
                 [4, 64, 1024, 16384])  # two fitted, two held out
    world_sizes = pick((2, 4), (2,))
    ring, fit, model = (reference(name) for name in
                        ("ring_all_reduce", "fit_alpha_beta", "allreduce_time_ring"))
    start = time.perf_counter()
    records = measure({"all_reduce": None, "ring": ring}, sizes, world_sizes=world_sizes,
                      only={"ring": (2,)})
    sweep = time.perf_counter() - start
    start = time.perf_counter()
    for record in records:
        run(_idle, world_size=record["n"])
    idle = time.perf_counter() - start
    rows = [{"what": f"baseline: {len(records)} idle run() calls", "seconds": f"{idle:.1f}",
             "ratio": "1.0x", "held-out error (median)": ""},
            {"what": f"sweep (all_reduce on {' and '.join(map(str, world_sizes))} ranks, "
                     "ring on 2)", "seconds": f"{sweep:.1f}",
             "ratio": f"{sweep / idle:.1f}x", "held-out error (median)": ""}]
    held_out = sizes[1::2]
    for name, n in sorted({(r["name"], r["n"]) for r in records}, key=lambda k: (k[1], k[0])):
        mine = [r for r in records if (r["name"], r["n"]) == (name, n)]
        used = [r for r in mine if r["nbytes"] not in held_out]
        alpha, beta = fit([r["nbytes"] for r in used], [r["seconds"] for r in used], n)
        errors = [abs(model(r["nbytes"], n, alpha, 1 / beta) / r["seconds"] - 1)
                  for r in mine if r["nbytes"] in held_out]
        rows.append({"what": f"fit: {name} on {n} ranks" + (" (oversubscribed)" if n > 2
                                                            else ""),
                     "seconds": "", "ratio": "",
                     "held-out error (median)": f"{100 * np.median(errors):.0f}%"})
    table("02 cost models: measurement sweep and fit", rows)
    return rows


if __name__ == "__main__":
    main()
