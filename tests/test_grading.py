"""Does real `nbgrader autograde` (via `make grade`'s module) grade submissions fairly?

One grading run, three students: the solved source, the untouched learner notebook, and the
solved source with one wrong blank in `ring_allreduce`.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import source
from autograder.markers import blank_source

ASSIGNMENT = "01_collectives"
WRONG_FUNCTION, WRONG_BLANK = "ring_allreduce", 2
RELEASED = source.ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def one_wrong_blank(nb):
    """The solved notebook with blank [2] of ring_allreduce answered wrongly."""
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == WRONG_FUNCTION:
            blank = blank_source(cell.source)[1][WRONG_BLANK - 1]
            lines = cell.source.split("\n")
            lines[blank.line - 1] = lines[blank.line - 1].replace(
                blank.answer, f"({blank.answer}) + 1", 1)
            cell.source = "\n".join(lines)
            return nb
    raise AssertionError(f"no solution cell {WRONG_FUNCTION}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    grading = tmp_path_factory.mktemp("grading")
    submissions = {
        "solved": source.load(ASSIGNMENT),
        "untouched": nbformat.read(str(RELEASED), as_version=4),
        "one_wrong": one_wrong_blank(source.load(ASSIGNMENT)),
    }
    for student, nb in submissions.items():
        folder = grading / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")
    env = dict(os.environ, DISTLAB_GRADING_DIR=str(grading),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run([sys.executable, "-m", "autograder.batch", ASSIGNMENT],
                            cwd=source.ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    with (grading / "grades" / f"{ASSIGNMENT}.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    feedback = {s: (grading / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
                for s in submissions}
    return rows, feedback


def test_solved_source_gets_full_marks(graded):
    """Does the solved source, submitted as a student, earn every point?"""
    rows, _ = graded
    assert float(rows["solved"]["score"]) == float(rows["solved"]["max_score"]) > 0


def test_untouched_notebook_gets_zero_and_feedback_lists_unfilled_blanks(graded):
    """Does the untouched learner notebook earn 0, with feedback naming unfilled blanks?"""
    rows, feedback = graded
    assert float(rows["untouched"]["score"]) == 0
    assert "not filled yet: [1]" in feedback["untouched"]


def test_one_wrong_blank_gets_partial_credit_and_is_named(graded):
    """Does one wrong blank cost that blank's point only, and does feedback name it?"""
    rows, feedback = graded
    row = rows["one_wrong"]
    cell = f"{WRONG_FUNCTION}_tests"
    assert float(row["score"]) == float(row["max_score"]) - 1
    assert float(row[cell]) == float(rows["solved"][cell]) - 1
    assert f"looks wrong: [{WRONG_BLANK}]" in feedback["one_wrong"]


def test_feedback_never_shows_hidden_tests(graded):
    """Is no hidden-test source in any feedback page?"""
    _, feedback = graded
    for html in feedback.values():
        assert "HIDDEN TESTS" not in html
        assert "autograder.grade_cell" not in html
