"""02's speed challenge: how far the course's answer gets, and how much its score varies.

    python bench/bench_challenge.py              # 20 races of each contender
    python bench/bench_challenge.py --runs 5

Each race is distlab.challenge.race as the notebook runs it (2 ranks, 1, 4 and 16 MiB, 20
paired runs against dist.all_reduce, the score the median of the pairs' time ratios). The
contenders: §5's ring (the challenge's starting point, 02's given `ring_all_reduce`) and the
course's answer (solutions/02_cost_models/fast_all_reduce.py). Per size: the median score
over the races, its spread (lowest, highest, and the interquartile range), which tells a
learner how big a difference between two of their runs means nothing on this machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the course's packages first
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(ROOT / "src"))


def contenders() -> dict:
    from autograder.reference import reference
    from distlab.source.paths import SOLUTIONS

    spec = importlib.util.spec_from_file_location(
        "fast_all_reduce", SOLUTIONS / "02_cost_models" / "fast_all_reduce.py")
    answer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(answer)
    return {"02's ring (start)": reference("ring_all_reduce"),
            "course's answer": answer.fast_all_reduce}


def main(runs: int = 20, quiet: bool = False) -> list[dict]:
    from bench import pick, table
    from distlab.challenge import PAIRS, SIZES_MIB, race

    runs, sizes, pairs = pick((runs, SIZES_MIB, PAIRS), (1, SIZES_MIB[:1], 2))
    scores = {}  # (contender, MiB) -> [score of each race]
    racing = contenders()  # loaded once: the solved sources are read and run per load
    for _ in range(runs):
        for name, fn in racing.items():  # interleaved: a slow minute hits both
            for row in race(fn, sizes, pairs, show=False):
                scores.setdefault((name, row["MiB"]), []).append(row["score"])
    rows = []
    for (name, size), values in scores.items():
        q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        rows.append({"contender": name, "size": f"{size} MiB", "races": len(values),
                     "median score": f"{statistics.median(values):.2f}",
                     "lowest": f"{min(values):.2f}", "highest": f"{max(values):.2f}",
                     "IQR": f"{q[0]:.2f}-{q[2]:.2f}"})
    if not quiet:
        table(f"speed challenge: score = busbw / dist.all_reduce's (2 ranks, gloo, {pairs} "
              f"paired runs a race, {runs} races)", rows)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    main(parser.parse_args().runs)
