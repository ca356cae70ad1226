"""Grade every submission with nbgrader, in parallel (`make grade`).

    python -m autograder.grade [assignment ...] [--jobs N] [--timeout SECONDS]
                               [--GradingLimits.NAME=VALUE ...]

Submissions live in grading/submitted/<student>/<assignment>/<assignment>.ipynb (nbgrader's
layout; `nbgrader collect` or `nbgrader zip_collect` put them there). Each one is graded by
its own `nbgrader autograde --student` and `nbgrader generate_feedback` (nbgrader's autograde
is serial; these run N at a time, each with its own sandbox slot). Then one CSV per assignment
is written to grading/grades/. Regrading is idempotent: the same submissions give the same
grades, and nothing else in the gradebook is touched.

`--GradingLimits.NAME=VALUE` flags (say `--GradingLimits.cell_seconds=30`) are passed on to
every `nbgrader autograde`, where they override nbgrader_config.py's limits for this run.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import os
import re
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook
from traitlets.config.loader import PyFileConfigLoader

from autograder import release, sandbox, source
from autograder.nbgrader_cli import nbgrader

GRADING = source.GRADING
SUBMITTED = GRADING / "submitted"
GRADES = GRADING / "grades"
FEEDBACK = GRADING / "feedback"
LIMIT_FLAG = re.compile(r"^--GradingLimits\.\w+=\S+$")


def db_url() -> str:
    """The gradebook's SQLAlchemy URL, as nbgrader_config.py sets it."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(source.ROOT)).load_config()
    return config.CourseDirectory.db_url


@dataclass
class Outcome:
    student: str
    assignment: str
    ok: bool
    seconds: float
    problem: str = ""


def release_if_changed(ids: list[str]) -> None:
    """Fill the gradebook from a release of each assignment, unless its source is unchanged
    since the last one (the gradebook learns cells, checksums and hidden tests from it)."""
    for assignment in ids:
        stamp = GRADING / "release" / assignment / ".source-sha256"
        digest = hashlib.sha256(source.source_path(assignment).read_bytes()).hexdigest()
        if stamp.exists() and stamp.read_text() == digest and Path(db_path()).exists():
            continue
        release.release([assignment], release_dir=GRADING / "release")
        stamp.write_text(digest)


def db_path() -> str:
    url = db_url()
    return url.removeprefix("sqlite:///").split("?")[0] if url.startswith("sqlite:///") else ""


def submissions(ids: list[str], submitted: Path = SUBMITTED) -> list[tuple[str, str]]:
    """(student, assignment) for every submitted assignment folder, sorted."""
    return sorted(
        (folder.parent.name, folder.name)
        for folder in submitted.glob("*/*")
        if folder.is_dir() and folder.name in ids
    )


# `module.Name: message` or `NameError: message`, as the last line of a traceback says it
EXCEPTION_LINE = re.compile(r"^\s*(?:(?:[a-z_]\w*\.)+([A-Z]\w*)|(\w*(?:Error|Exception|Interrupt)))"
                            r": ?(.*)$")
# what the exceptions nbgrader stops at mean for a learner
MEANING = {
    "NotJSONError": "the notebook file is not valid JSON (was it saved completely?)",
    "NBFormatError": "the file is not a valid notebook",
    "ValidationError": "the file is not a valid notebook",
    "DeadKernelError": "the notebook's kernel died while it ran (a cell ended the process, or "
                       "used more memory than the limit)",
    "CellTimeoutError": "a cell did not finish within the time limit, or printed more than "
                        "the grader accepts",
}


def _problem(output: str) -> str:
    """Why nbgrader could not grade a submission, from its log: the last exception it reports
    (what it means, or its type and message), never a traceback's file lines."""
    found = [m for line in output.splitlines() if (m := EXCEPTION_LINE.match(line))]
    if not found:
        return "the grader failed on this notebook"
    qualified, plain, message = found[-1].groups()
    name = qualified or plain
    if name in MEANING:
        return f"{MEANING[name]} ({name})"
    return f"{name}: {message}"[:300] if message else name


def grade_one(student: str, assignment: str, slot: int, timeout: float,
              limits: list[str] = ()) -> Outcome:
    """Autograde and write feedback for one submission, in sandbox slot `slot`; `limits`
    (`--GradingLimits.NAME=VALUE` flags) go to the autograde."""
    start = time.perf_counter()
    env = {"DISTLAB_SLOT": str(slot)}
    for step in ("autograde", "generate_feedback"):
        flags = list(limits) if step == "autograde" else []
        try:
            result = nbgrader(step, assignment, "--student", student, "--force", *flags,
                              check=False, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(student, assignment, False, time.perf_counter() - start,
                           f"grading took longer than {timeout:g} s and was stopped")
        if result.returncode != 0:
            return Outcome(student, assignment, False, time.perf_counter() - start,
                           _problem(result.stdout + result.stderr))
    return Outcome(student, assignment, True, time.perf_counter() - start)


def failure_feedback(outcome: Outcome) -> None:
    """A feedback page for a submission nbgrader could not grade, saying why."""
    folder = FEEDBACK / outcome.student / outcome.assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{outcome.assignment}.html").write_text(
        f"<html><body><h1>{html.escape(outcome.assignment)}: not graded</h1>"
        f"<p>Your submission could not be graded: {html.escape(outcome.problem)}</p>"
        "<p>Score: 0. Check that the notebook opens in JupyterLab and runs top to bottom, "
        "then hand it in again.</p></body></html>\n")


def write_csv(assignment: str, failed: dict[str, str], url: str, out: Path = GRADES) -> Path:
    """One row per student: each graded cell's score, the total, and why if not graded."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{assignment}.csv"
    with Gradebook(url) as gb:
        cells = [cell.name for notebook in gb.find_assignment(assignment).notebooks
                 for cell in notebook.grade_cells]
        maximum = gb.find_assignment(assignment).max_score
        rows = {}
        for sub in gb.assignment_submissions(assignment):
            by_cell = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            rows[sub.student.id] = [*(by_cell.get(c, 0) for c in cells), sub.score, maximum, ""]
    for student, problem in failed.items():
        rows[student] = [*(0 for _ in cells), 0, maximum, problem]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", *cells, "score", "max_score", "not_graded_because"])
        for student in sorted(rows):
            writer.writerow([student, *rows[student]])
    return path


def progress(done: int, total: int, outcome: Outcome, started: float) -> None:
    width = 24
    filled = width * done // total
    rate = done / max(time.perf_counter() - started, 1e-9)
    eta = (total - done) / rate if rate else 0
    status = "ok" if outcome.ok else f"NOT GRADED: {outcome.problem[:60]}"
    line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            f"{outcome.assignment}/{outcome.student} {outcome.seconds:.0f}s {status} "
            f"(eta {eta:.0f}s)")
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="submissions graded at once (default: one per core)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds one submission may take before it is stopped")
    args, unknown = parser.parse_known_args(argv)
    limits = [flag for flag in unknown if LIMIT_FLAG.match(flag)]
    if rest := [flag for flag in unknown if flag not in limits]:
        parser.error(f"unrecognized arguments: {' '.join(rest)} (limits: "
                     "--GradingLimits.NAME=VALUE)")
    ids = args.ids or source.assignment_ids()
    release_if_changed(ids)
    url = db_url()
    if db_path():
        # WAL: a grader reading the gradebook never blocks another one saving its grades
        with sqlite3.connect(db_path()) as db:
            db.execute("PRAGMA journal_mode=WAL")
    todo = submissions(ids)
    if not todo:
        print(f"no submissions under {SUBMITTED}/<student>/<assignment>/")
        return 0
    print(f"grading {len(todo)} submission(s), {args.jobs} at a time", flush=True)
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    free_slots = list(range(args.jobs))
    with ThreadPoolExecutor(args.jobs) as pool:
        # each running submission holds one slot (its sandbox uid) until it finishes
        def task(student, assignment):
            slot = free_slots.pop()
            try:
                return grade_one(student, assignment, slot, args.timeout, limits)
            finally:
                free_slots.append(slot)

        futures = [pool.submit(task, s, a) for s, a in todo]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            if not outcome.ok:
                failure_feedback(outcome)
            progress(len(outcomes), len(todo), outcome, started)
    if sandbox.available():  # memory cgroups of sandboxes that were killed, not ended
        sandbox.remove_leftovers(sandbox.uid_for(slot) for slot in range(args.jobs))
    for assignment in sorted({a for _, a in todo}):
        failed = {o.student: o.problem for o in outcomes if o.assignment == assignment and not o.ok}
        print(f"grades: {write_csv(assignment, failed, url)}")
    print(f"feedback: {FEEDBACK}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
