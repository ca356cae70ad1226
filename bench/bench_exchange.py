"""A class through nbgrader's exchange: the round trip from release_assignment to every
learner's fetch_feedback (grading excluded), and `make grade` for the same class.

    python -m bench.bench_exchange [--students 20]

Learners are simulated as in tests/system/test_exchange.py: a home folder each (nbgrader's
submission cache), the learners' nbgrader config of the README (course id and exchange only),
nbgrader's own `--student`; their commands run one per core at a time, as learners on one
machine would. Every learner submits the solved notebook of ASSIGNMENT (the fastest to grade).

Baseline, measured here: as many bare nbgrader starts (`nbgrader --version`) as the learners'
commands, at the same concurrency, so the ratio says what the exchange costs on top of
starting nbgrader, which is most of each command's time.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from autograder import solved
from bench import pick, table
from distlab.source import paths

ASSIGNMENT = "01_collectives"
BIN = str(Path(sys.executable).parent)
JOBS = os.cpu_count() or 1


def _run(command: list[str], cwd: Path, env: dict) -> None:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0 or "Traceback" in result.stderr:
        raise SystemExit(f"{' '.join(command[2:])} failed:\n{result.stdout}{result.stderr}")


def _all(commands: list[tuple[list[str], Path, dict]]) -> None:
    """Run the commands, JOBS at a time; fail on the first that fails."""
    with ThreadPoolExecutor(JOBS) as pool:
        for future in [pool.submit(_run, *command) for command in commands]:
            future.result()


def main(students: int = 20) -> list[dict]:
    students = pick(students, 1)
    names = [f"student{k:02d}" for k in range(students)]
    nbgrader = [sys.executable, "-m", "nbgrader"]
    with tempfile.TemporaryDirectory(prefix="distlab-bench-") as tmp:
        tmp = Path(tmp)
        exchange, grading, etc = tmp / "exchange", tmp / "grading", tmp / "etc-jupyter"
        etc.mkdir()
        (etc / "nbgrader_config.py").write_text(
            f'c = get_config()\nc.CourseDirectory.course_id = "distlab"\n'
            f"c.Exchange.root = {str(exchange)!r}\n")
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("DISTLAB_", "JUPYTER_", "JUPYTERHUB_"))}
        teacher = {**os.environ, "DISTLAB_GRADING_DIR": str(grading),
                   "DISTLAB_EXCHANGE": str(exchange), "PATH": BIN + os.pathsep + os.environ["PATH"]}
        homes = {s: tmp / "home" / s for s in names}
        learner = {s: {**base, "HOME": str(home), "JUPYTER_CONFIG_PATH": str(etc),
                       "PATH": BIN + os.pathsep + base["PATH"]} for s, home in homes.items()}
        for home in homes.values():
            home.mkdir(parents=True)

        def learners(*args: str, as_student: bool = False) -> None:
            _all([([*nbgrader, *args, *([f"--student={s}"] if as_student else [])],
                   homes[s], learner[s]) for s in names])

        def teach(*args: str) -> None:
            _run([*nbgrader, *args], paths.ROOT, teacher)

        answer = nbformat.writes(solved.load(ASSIGNMENT))
        start = time.perf_counter()
        teach("release_assignment", ASSIGNMENT)
        learners("fetch_assignment", ASSIGNMENT)
        for home in homes.values():  # each learner hands in the solved notebook
            (home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text(answer)
        learners("submit", ASSIGNMENT, as_student=True)
        teach("collect", ASSIGNMENT, "--ExchangeCollect.check_owner=False")
        handed_in = time.perf_counter() - start

        start = time.perf_counter()
        _run([sys.executable, "-m", "autograder.batch", ASSIGNMENT], paths.ROOT, teacher)
        grade = time.perf_counter() - start
        with (grading / "grades" / f"{ASSIGNMENT}.csv").open() as handle:
            wrong = [row for row in csv.DictReader(handle)
                     if float(row["score"]) != float(row["max_score"])]
        if wrong:
            raise SystemExit(f"make grade graded solved submissions wrongly: {wrong}")

        start = time.perf_counter()
        teach("release_feedback", ASSIGNMENT)
        learners("fetch_feedback", ASSIGNMENT, as_student=True)
        returned = time.perf_counter() - start
        missing = [s for s, home in homes.items()
                   if len(list((home / ASSIGNMENT / "feedback").glob("*/*.html"))) != 1]
        if missing:
            raise SystemExit(f"no feedback fetched by {missing}")

        start = time.perf_counter()
        _all([([*nbgrader, "--version"], homes[s], learner[s])
              for s in names for _ in range(3)])  # fetch, submit, fetch_feedback
        bare = time.perf_counter() - start
    trip = handed_in + returned
    rows = [
        {"what": f"baseline: {3 * students} bare nbgrader starts, {JOBS} at a time",
         "seconds": f"{bare:.1f}", "per learner": f"{bare / students:.2f}", "ratio": "1.0x"},
        {"what": f"exchange round trip, {students} learners (release .. fetch_feedback, "
                 "grading excluded)",
         "seconds": f"{trip:.1f}", "per learner": f"{trip / students:.2f}",
         "ratio": f"{trip / bare:.1f}x"},
        {"what": "  of which release, fetch, submit, collect", "seconds": f"{handed_in:.1f}",
         "per learner": "", "ratio": ""},
        {"what": "  of which release_feedback, fetch_feedback", "seconds": f"{returned:.1f}",
         "per learner": "", "ratio": ""},
        {"what": f"make grade, the same {students} submissions ({ASSIGNMENT}, {JOBS} slots)",
         "seconds": f"{grade:.1f}", "per learner": f"{grade / students:.2f}",
         "ratio": f"{grade / bare:.1f}x"},
    ]
    table(f"A class of {students} through nbgrader's exchange", rows)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    main(parser.parse_args().students)
