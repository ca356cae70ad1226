"""The adversarial suite, extended to every notebook's exercises. tests/system/test_adversarial.py
throws every kind of attack at 01; here the attacks that do not depend on 01's exercises are
thrown at each other notebook, in one `make grade` batch:

- patches: on the released notebook (every blank empty), numpy's and torch's comparisons always
  agree, distlab.run and require_filled are faked, the hidden tests' randomness is fixed,
  grade() returns full marks, and every cell prints a fake pass. The judge decides: 0.
- early_return: on the released notebook, every exercise function first runs the solved body
  (copied from solutions/) and returns, never reaching its blanks: code outside the blanks
  earns nothing, unfilled blanks earn nothing: 0.

Each must score 0 in every graded cell, and no feedback page may show an answer.
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
PATCHES = PATCH_NUMPY_TORCH + """
import random
import sys
import types
import numpy as np
import distlab
import distlab.launch
import autograder.grade_cell
distlab.run = distlab.launch.run = lambda fn, *a, world_size=4, **k: [0.0] * world_size
distlab.require_filled = distlab.launch.require_filled = lambda fn: None
np.random.seed(0)
random.seed(0)
autograder.grade_cell.seed_for = lambda *a, **k: 0
autograder.grade_cell.grade = lambda *a, **k: 5.0
sys.modules["autograder.grade_cell"] = types.SimpleNamespace(grade=lambda *a, **k: 5.0)
"""


def released(assignment):
    path = ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
    return nbformat.read(str(path), as_version=4)


def patches(assignment):
    nb = _everywhere(released(assignment), PATCHES)
    return add_after(nb, "locked_00", f'print("{FAKE_PASS}")\n'
                     f'get_ipython().events.register("post_run_cell", '
                     f'lambda result: print("{FAKE_PASS}"))')


def early_return(assignment):
    """Every exercise function of the released notebook runs the solved body first."""
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
        for name, build in (("patches", patches), ("early_return", early_return)):
            folder = grading / "submitted" / name / assignment
            folder.mkdir(parents=True)
            nbformat.write(build(assignment), folder / f"{assignment}.ipynb")
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
        pages[assignment] = {
            name: (grading / "feedback" / name / assignment / f"{assignment}.html").read_text()
            for name in ("patches", "early_return")}
    return rows, pages


@pytest.mark.parametrize("assignment", IDS)
@pytest.mark.parametrize("attack", ["patches", "early_return"])
def test_an_attack_earns_nothing(graded, assignment, attack):
    """Does the attack score 0 in every graded cell of this notebook?"""
    row = graded[0][assignment][attack]
    cells = {k: v for k, v in row.items() if k.endswith("_tests")}
    assert cells and all(float(v) == 0 for v in cells.values()), row


@pytest.mark.parametrize("assignment", IDS)
def test_feedback_shows_no_answer(graded, assignment):
    """Does no feedback page show a hidden test, and the page of a submission with every
    blank empty no blank's answer (the longer ones, which could not appear by chance)?"""
    answers = {b.answer for _, blanks in solved.solution_cells(assignment) for b in blanks
               if len(b.answer) >= 12}
    pages = graded[1][assignment]
    assert all("HIDDEN TESTS" not in page for page in pages.values())
    leaked = [a for a in answers if a in pages["patches"]]
    assert not leaked, leaked
