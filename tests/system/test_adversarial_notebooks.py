"""The adversarial suite, extended to every notebook's exercises. tests/system/test_adversarial.py
throws every kind of attack at 01, one student per attack; here the attacks that do not depend
on 01's exercises are thrown at each other notebook together, by one student per notebook, in
one `make grade` batch. On the released notebook (every blank empty):

- early return: every exercise function first runs the solved body (copied from solutions/)
  and returns, never reaching its blanks, so the notebook's own checks pass in the kernel;
- patches: numpy's and torch's comparisons always agree, distlab.run and require_filled are
  faked, the hidden tests' randomness is fixed, grade() returns full marks (in the kernel, and
  in a class body the judge's runner executes), and every cell prints a fake pass.

Code outside the blanks earns nothing and unfilled blanks earn nothing; the judge decides: 0 in
every graded cell, and no hidden test on the feedback page. (Each attack alone once had a
student per notebook; together they cost six gradings less. Either attack succeeding would
earn points here; that the feedback of a notebook with every blank empty shows no answer is
tests/system/test_grading.py's check, on its untouched students.)
"""

import ast
import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from adversarial.cells import add_after
from adversarial.tamper import FAKE_PASS, PATCH_NUMPY_TORCH, _everywhere

from autograder import solved
from distlab.source import paths
from distlab.source.definitions import functions

ROOT = paths.ROOT
IDS = [a for a in paths.assignment_ids() if a != "01_collectives"]  # 01: the full suite
STUDENT = "early_return_and_patches"
PATCHES = PATCH_NUMPY_TORCH + """
import random
import sys
import types
import numpy as np
import distlab
import distlab.launch
distlab.run = distlab.launch.run = lambda fn, *a, world_size=4, **k: [0.0] * world_size
distlab.require_filled = distlab.launch.require_filled = lambda fn: None
np.random.seed(0)
random.seed(0)
sys.modules["autograder.grade_cell"] = types.SimpleNamespace(grade=lambda *a, **k: 5.0)
try:  # not importable in the grading kernel (autograder.judge.kernel_view): the rest still runs
    import autograder.grade_cell
    autograder.grade_cell.seed_for = lambda *a, **k: 0
    autograder.grade_cell.grade = lambda *a, **k: 5.0
except ImportError:
    pass
"""


def released(assignment):
    path = ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
    return nbformat.read(str(path), as_version=4)


def patches(nb):
    """The patches, in the kernel and where the judge's runner executes definitions."""
    nb = _everywhere(nb, PATCHES)
    return add_after(nb, "locked_00", f'print("{FAKE_PASS}")\n'
                     f'get_ipython().events.register("post_run_cell", '
                     f'lambda result: print("{FAKE_PASS}"))')


def early_return(assignment):
    """The released notebook, every exercise function running the solved body first."""
    answers = {}
    for cell, _ in solved.solution_cells(assignment):
        answers.update(functions(cell.source))
    nb = released(assignment)
    for cell in nb.cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        tree = ast.parse(cell.source)
        lines = cell.source.split("\n")
        for node in sorted((n for n in tree.body if isinstance(n, ast.FunctionDef)),
                           key=lambda n: -n.lineno):
            body = ast.parse(answers[node.name]).body[0].body
            solved_body = "\n".join(ast.unparse(stmt) for stmt in body)
            first = node.body[0].lineno - 1
            indent = " " * node.body[0].col_offset
            lines[first:first] = textwrap.indent(solved_body, indent).split("\n")
        cell.source = "\n".join(lines)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory, start_from_release):
    grading = tmp_path_factory.mktemp("grading")
    start_from_release(grading)
    for assignment in IDS:
        folder = grading / "submitted" / STUDENT / assignment
        folder.mkdir(parents=True)
        nbformat.write(patches(early_return(assignment)), folder / f"{assignment}.ipynb")
    env = dict(os.environ, DISTLAB_GRADING_DIR=str(grading),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run([sys.executable, "-m", "autograder.batch", *IDS, "--jobs", "2",
                             "--GradingLimits.function_seconds=60"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)
    assert result.returncode == 0, result.stdout + result.stderr
    rows, pages = {}, {}
    for assignment in IDS:
        with (grading / "grades" / f"{assignment}.csv").open() as handle:
            rows[assignment] = {row["student"]: row for row in csv.DictReader(handle)}
        page = grading / "feedback" / STUDENT / assignment / f"{assignment}.html"
        pages[assignment] = page.read_text()
    return rows, pages


@pytest.mark.parametrize("assignment", IDS)
def test_the_attacks_earn_nothing(graded, assignment):
    """Does the student score 0 in every graded cell of this notebook, and is it graded (not
    stopped: the judge, not a crash, gave the 0)?"""
    row = graded[0][assignment][STUDENT]
    cells = {k: v for k, v in row.items() if k.endswith("_tests")}
    assert cells and all(float(v) == 0 for v in cells.values()), row
    assert not row["not_graded_because"], row


@pytest.mark.parametrize("assignment", IDS)
def test_feedback_shows_no_hidden_test(graded, assignment):
    """Does the feedback page show no hidden test? (The patches themselves name
    autograder.grade_cell: the page may show what the student wrote.)"""
    assert "HIDDEN TESTS" not in graded[1][assignment]
