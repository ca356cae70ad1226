"""make grade's workers, on a toy assignment (one exercise): a submission that runs out of
time takes its worker down with it, the next one gets a fresh worker, and a worker that cannot
start stops make grade with the reason.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import solved
from autograder.batch.worker import problem
from autograder.judge import sandbox
from distlab.source import paths

ASSIGNMENT = "00_toy"
TIMEOUT = 20  # make grade's --timeout here: the toy's solved submission takes a few seconds


def toy_source() -> str:
    """A one-exercise assignment: notebook 01's chunk_bounds cell, with its graded cell."""
    text = paths.source_path("01_collectives").read_text()
    start = text.index('# %% solution="chunk_bounds"')
    end = text.index("# %%", text.index('# %% tests="chunk_bounds_tests"') + 1)
    return "# %% [markdown]\n# # A toy assignment\n\n# %%\nimport numpy as np\n\n" + text[start:end]


def _env(grading: Path) -> dict:
    return dict(os.environ, DISTLAB_GRADING_DIR=str(grading),
                DISTLAB_SOLUTIONS_DIR=str(grading / "solutions"),
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _grade(grading: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.batch", ASSIGNMENT, *flags],
                          cwd=paths.ROOT, env=_env(grading), capture_output=True, text=True,
                          timeout=600)


def _submit(grading: Path, student: str, nb) -> None:
    folder = grading / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")


def _alive(uid: int, grading: Path) -> list[str]:
    """Command lines of live processes of the sandbox uid, or of this grading folder."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        owner = int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])
        if int(pid) != os.getpid() and (owner == uid or str(grading) in environ):
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def grading(tmp_path_factory):
    grading = tmp_path_factory.mktemp("grading")
    toy = grading / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py"
    toy.parent.mkdir(parents=True)
    toy.write_text(toy_source())
    solutions = toy.parent.parent
    slow = solved.load(ASSIGNMENT, solutions)
    first = next(c for c in slow.cells if c.metadata.get("nbgrader", {}).get("solution"))
    first.source = "import time\ntime.sleep(600)\n" + first.source
    _submit(grading, "a_slow", slow)  # graded first: --jobs 1 goes in sorted order
    _submit(grading, "b_solved", solved.load(ASSIGNMENT, solutions))
    return grading


def test_timeout_kills_the_worker_and_the_next_submission_gets_a_fresh_one(grading):
    """Is a submission past --timeout stopped, with nothing of it left running, and is the
    next one, in the same slot, graded in full?"""
    result = _grade(grading, "--jobs", "1", "--timeout", str(TIMEOUT))
    assert result.returncode == 0, result.stdout + result.stderr
    with (grading / "grades" / f"{ASSIGNMENT}.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert rows["a_slow"]["not_graded_because"] == (
        f"grading took longer than {TIMEOUT} s and was stopped")
    assert float(rows["a_slow"]["score"]) == 0
    assert rows["b_solved"]["not_graded_because"] == ""
    assert float(rows["b_solved"]["score"]) == float(rows["b_solved"]["max_score"]) > 0
    most = f"{float(rows['b_solved']['max_score']):g}"
    assert f"{ASSIGNMENT}/b_solved" in result.stdout and f" {most}/{most} " in result.stdout
    assert f"(1 graded, mean {float(most):.1f} / {most}; 1 not graded" in result.stdout
    page = grading / "feedback" / "a_slow" / ASSIGNMENT / f"{ASSIGNMENT}.html"
    assert f"longer than {TIMEOUT} s" in page.read_text()
    assert _alive(sandbox.uid_for(0), grading) == []


def test_a_worker_that_cannot_start_stops_make_grade_with_the_reason(grading):
    """Does a bad limit stop make grade at once, saying which and where the log is, rather
    than failing every student or grading without the judge?"""
    result = _grade(grading, "--GradingLimits.cell_seconds=soon")
    assert result.returncode != 0
    assert "cell_seconds" in result.stderr and "expected an int" in result.stderr
    assert "slot0.log" in result.stderr
    assert _alive(sandbox.uid_for(0), grading) == []


@pytest.mark.parametrize("log, expected", [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
     "nbformat.reader.NotJSONError: Notebook does not appear to be JSON: 'x'",
     "the notebook file is not valid JSON (was it saved completely?) (NotJSONError)"),
    ("[AutogradeApp | INFO] Converting\n[AutogradeApp | CRITICAL] Bad config encountered",
     "Bad config encountered"),
    ("RuntimeError: the gradebook is locked\n", "RuntimeError: the gradebook is locked"),
    ("[AutogradeApp | INFO] nothing went wrong that it says", "the grader failed on this notebook"),
])
def test_problem_says_why_in_one_line_without_file_lines(log, expected):
    """Is the reason a learner's feedback page gives the last exception, or error, that
    nbgrader logged, never a traceback line?"""
    assert problem(log) == expected
