"""Grading throughput: `make grade` (parallel) vs serial `nbgrader autograde`, on the same
submissions in the same run; one submission's grading overhead vs running its notebook; and
the judge's fresh process per graded function, with and without the runner's preload.

    python -m bench.bench_grading [--students 4]

Baselines, measured here: nbgrader's own serial `autograde` of every student (same config,
judge and sandbox included), nbclient executing the same notebook with no grading at all, and
a runner child that imports what the cells import itself (the runner before its preload).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder import solved
from bench import execute_seconds, pick, table
from distlab.source import paths

ASSIGNMENT = "01_collectives"


def _submit(grading: Path, students: int) -> None:
    solved_nb = solved.load(ASSIGNMENT)
    for k in range(students):
        folder = grading / "submitted" / f"student{k:02d}" / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(solved_nb, folder / f"{ASSIGNMENT}.ipynb")


def _env(grading: Path) -> dict:
    bindir = str(Path(sys.executable).parent)
    return dict(os.environ, DISTLAB_GRADING_DIR=str(grading),
                PATH=bindir + os.pathsep + os.environ["PATH"])


def _timed(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=paths.ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _check_grades(grading: Path) -> None:
    """A throughput of wrong grades is no throughput: every solved submission must get full
    marks (a stall that cost points, say a hung call, would show here, not only as time)."""
    with (grading / "grades" / f"{ASSIGNMENT}.csv").open() as handle:
        wrong = [row for row in csv.DictReader(handle)
                 if row["not_graded_because"] or float(row["score"]) != float(row["max_score"])]
    if wrong:
        logs = "".join(log.read_text()[-3000:] for log in sorted((grading / "logs").glob("*")))
        raise SystemExit(f"make grade graded solved submissions wrongly: {wrong}\n{logs}")


# In a fresh interpreter: the runner's warm-up, the preload or not, then CHILDREN children that
# each define the solved cells (what a judge's fork does before its first call) and exit.
CHILD = """
import os, statistics, sys, time
from autograder import solved
from autograder.judge import runner
nb = solved.load(sys.argv[1])
cells = [cell.source for cell in nb.cells if cell.cell_type == "code"]
runner.warm_up()
if sys.argv[2] == "preload":
    runner.preload(cells)
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    if os.fork() == 0:
        runner.define(cells)
        os._exit(0)
    os.wait()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""
CHILDREN = 5


def _child_seconds(assignment: str, mode: str, children: int) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, assignment, mode, str(children)],
                         cwd=paths.ROOT, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def judge_children() -> list[dict]:
    rows, children = [], pick(CHILDREN, 1)
    for assignment in pick(paths.assignment_ids(), paths.assignment_ids()[:1]):
        cold, warm = (_child_seconds(assignment, mode, children) for mode in ("cold", "preload"))
        rows.append({"notebook": assignment, "baseline: child imports (ms)": f"{1e3 * cold:.0f}",
                     "preloaded (ms)": f"{1e3 * warm:.0f}", "ratio": f"{cold / warm:.1f}x faster"})
    table(f"The judge's fresh process per graded function (median of {children})", rows)
    return rows


def main(students: int = 4) -> list[dict]:
    students = pick(students, 1)
    with tempfile.TemporaryDirectory(prefix="distlab-bench-") as tmp:
        grading = Path(tmp)
        _submit(grading, students)
        env = _env(grading)
        # release once, outside the timings (make grade then finds it up to date)
        release = ("from autograder.batch.cli import release_if_changed; "
                   "from autograder.records import db_url; "
                   f"release_if_changed([{ASSIGNMENT!r}], db_url())")
        subprocess.run([sys.executable, "-c", release], cwd=paths.ROOT, env=env, check=True,
                       capture_output=True)
        autograde = _timed([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT,
                            "--force"], env)
        serial = autograde + _timed([sys.executable, "-m", "nbgrader", "generate_feedback",
                                     ASSIGNMENT, "--force"], env)
        parallel = _timed([sys.executable, "-m", "autograder.batch", ASSIGNMENT], env)
        _check_grades(grading)
        one = autograde if students == 1 else _timed(
            [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--student",
             "student00", "--force"], env)
    plain = execute_seconds(solved.load(ASSIGNMENT))
    per_minute = 60 * students
    rows = [
        {"what": f"baseline: nbgrader autograde + feedback, serial ({students} submissions)",
         "seconds": f"{serial:.1f}", "submissions/min": f"{per_minute / serial:.1f}",
         "ratio": "1.00x"},
        {"what": f"make grade ({os.cpu_count()} at a time, + feedback + CSV)",
         "seconds": f"{parallel:.1f}", "submissions/min": f"{per_minute / parallel:.1f}",
         "ratio": f"{serial / parallel:.2f}x faster"},
        {"what": "baseline: one notebook run by nbclient (no grading)",
         "seconds": f"{plain:.1f}", "submissions/min": "", "ratio": "1.00x"},
        {"what": "one submission: nbgrader autograde (sandbox + judge)",
         "seconds": f"{one:.1f}", "submissions/min": "", "ratio": f"{one / plain:.2f}x slower"},
    ]
    table("Grading throughput and overhead", rows)
    return rows + judge_children()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=4)
    main(parser.parse_args().students)
