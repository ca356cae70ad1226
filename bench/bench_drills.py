"""How fast does a drill answer: a refresh, a textual check, a check that runs the snippet?

Run: .venv/bin/python bench/bench_drills.py      (about 40 s on 2 cores)

Targets (issues 16, 30): a refresh and a textual check under 50 ms; a check that runs a
single-process snippet under 1 s; one that runs any snippet under 2 s warm, from the widget
(its Checker) and from the command line (the warm drill server `check` asks, server.py). Each
check that runs goes through the warm drill runner (the judge's runner: a fresh child per
candidate, sandboxed where the machine allows it); its baseline is the same hidden test on the
reference, in this process, with no runner at all: the ratio is what isolation costs. Times
are medians over repetitions, the history in a scratch file.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the course's packages first
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(ROOT / "src"))

# (snippet, the span to blank, an answer written differently that passes)
RUN_CASES = [("ring_allreduce", "(i + 1) % N", "(1 + i) % N"),
             ("ring_reduce_scatter", "(rank - 1) % N", "(rank + N - 1) % N")]


def _median(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _direct(name: str, repeats: int) -> float:
    """The baseline: the reference through its hidden test, in this process."""
    import numpy as np

    from autograder.exercises import test_for
    from autograder.grade_cell import quiet, seed_for
    from autograder.reference import reference

    fn, test = reference(name), test_for(name)

    def once():
        with quiet():
            test(fn, np.random.default_rng(seed_for(name, "")))

    once()  # warm: imports, the ranks' launcher
    return _median(once, repeats)


def _server_rows(run_cases, repeats: int) -> list[dict]:
    """A check that runs, as `python -m distlab.drills check` asks it: the warm server's reply."""
    from distlab import drills
    from distlab.drills import server

    os.environ["DISTLAB_DRILLS_RUN"] = tempfile.mkdtemp()
    rows = []
    try:
        for name, span, answer in run_cases:
            snippet = drills.get(name)
            blank = [p for p in drills.maskable(snippet.source, name) if p.text == span]
            request = {"op": "check", "snippet": name, "answers": [answer],
                       "spans": [[p.start, p.end] for p in blank]}
            server.ask(request)  # starts the server, warms its runner
            seconds = _median(lambda r=request: server.ask(r), repeats)
            rows.append({"what": f"CLI run check (warm server): {name}", "time_s": seconds,
                         "target_s": 2.0})
    finally:
        server.stop()
    return rows


def main(quiet: bool = False) -> list[dict]:
    from bench import pick

    many, few, run_cases = pick((50, 3, RUN_CASES), (3, 1, RUN_CASES[:1]))
    os.environ.setdefault("DISTLAB_DRILLS_DB", str(Path(tempfile.mkdtemp()) / "bench.sqlite"))
    from distlab import drills
    from distlab.drills import check
    from distlab.drills.positions import template

    rows = []
    snippet, positions, chosen = drills.draw("ring_allreduce", 8, seed=0)

    seeds = iter(range(10**6))  # each refresh a new seed, as the Refresh button does

    def refresh():
        _, _, blanks = drills.draw("ring_allreduce", 8, next(seeds))
        template(snippet.source, blanks)

    rows.append({"what": "refresh (draw 8 blanks + lay out)", "time_s": _median(refresh, many),
                 "target_s": 0.05})
    checker = drills.Checker()
    # spaced differently, the same tokens (dropping every space would glue `for x in` into
    # one name, and send that answer to the hidden test)
    answers = [p.text.replace(" ", "  ") for p in chosen]
    assert all(check.normalise(a) == check.normalise(p.text) for a, p in
               zip(answers, chosen, strict=True))
    rows.append({"what": "textual check (8 blanks)", "target_s": 0.05,
                 "time_s": _median(lambda: checker.check(snippet, chosen, answers), many)})
    for name, span, answer in run_cases:
        snippet = drills.get(name)
        blank = [p for p in drills.maskable(snippet.source, name) if p.text == span]
        checker.warm(snippet).join()
        checker.check(snippet, blank, [answer])  # the first child of a runner loads the cells
        seconds = _median(lambda s=snippet, b=blank, a=answer: checker.check(s, b, [a]), few)
        baseline = _direct(name, few)
        rows.append({"what": f"run check: {name}", "time_s": seconds, "baseline_s": baseline,
                     "target_s": 1.0 if name == "ring_allreduce" else None})
    checker.close()
    rows += _server_rows(run_cases, few)
    if not quiet:
        print(f"drills (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)")
        print(f"{'what':<48} | {'time':>9} | {'target':>7} | {'baseline':>9} | {'ratio':>5}")
        for row in rows:
            target = f"{row['target_s'] * 1e3:5.0f}ms" if row.get("target_s") else "-"
            base = row.get("baseline_s")
            print(f"{row['what']:<48} | {row['time_s'] * 1e3:7.1f}ms | {target:>7} | "
                  + (f"{base * 1e3:7.1f}ms | {row['time_s'] / base:5.2f}" if base else
                     f"{'-':>9} | {'-':>5}"))
        print("baseline: the reference through the same hidden test in this process, no runner; "
              "ratio = time / baseline")
    return rows


if __name__ == "__main__":
    main()
