"""JudgeGrades: does the judge's verdict replace whatever a graded cell showed?"""

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.grade_cell import Verdict
from autograder.preprocessors import JudgeGrades, judge_grades


def graded(source, grade_id="f_tests", points=3):
    cell = new_code_cell(source, metadata={"nbgrader": {
        "grade": True, "grade_id": grade_id, "points": points, "locked": True,
        "solution": False, "schema_version": 3}})
    cell.outputs = [new_output("stream", name="stdout", text="score: 3 / 3\n"),
                    new_output("execute_result", data={"text/plain": "3.0"}, execution_count=2)]
    return cell


def notebook():
    return new_notebook(cells=[new_code_cell("def f():\n    return 1\n"),
                               graded("from autograder.grade_cell import grade\ngrade(f)")])


def test_the_verdict_replaces_the_kernels_output(monkeypatch):
    """Is a fake "score: 3 / 3" printed by the kernel replaced by the judge's report and
    points, and does the judge see the code cells but not the graded ones?"""
    seen = {}

    def verdicts(cells, graded_fns, student, *args):
        seen.update(cells=cells, graded=graded_fns, student=student)
        return [Verdict(1.0, 3.0, ["✗ f", "  looks wrong: [2]"])]

    monkeypatch.setattr(judge_grades.grade_cell, "verdicts", verdicts)
    nb, _ = JudgeGrades().preprocess(notebook(), {"nbgrader": {"student": "ann"}})
    outputs = nb.cells[1].outputs
    assert outputs[0].text == "✗ f\n  looks wrong: [2]\nscore: 1 / 3\n"
    assert outputs[1].data["text/plain"] == "1.0"
    assert seen == {"cells": ["def f():\n    return 1\n"], "graded": [("f", None)],
                    "student": "ann"}


def test_the_verdict_is_kept_for_the_class_report_and_a_forged_one_is_dropped(monkeypatch):
    """Does the graded cell's metadata hold the judge's verdict per blank (what the class
    report reads), and is a verdict the submission brought in another cell dropped?"""
    def verdicts(cells, graded_fns, student, *args):
        return [Verdict(2.0, 3.0, ["✗ f"], fills={1: "a", 2: "b + 1", 3: "c"}, lost=[2],
                        reason="f(2) is 3, expected 2")]

    monkeypatch.setattr(judge_grades.grade_cell, "verdicts", verdicts)
    nb = notebook()
    forged = {"function": "f", "earned": 3.0, "possible": 3.0, "lost": []}
    nb.cells[0].metadata["distlab"] = {"verdict": forged}
    nb.cells[1].metadata["distlab"] = {"verdict": forged}
    nb, _ = JudgeGrades().preprocess(nb, {})
    assert "verdict" not in nb.cells[0].metadata["distlab"]
    assert nb.cells[1].metadata["distlab"]["verdict"] == {
        "function": "f", "earned": 2.0, "possible": 3.0, "lost": [2], "unfilled": [],
        "changed": "", "reason": "f(2) is 3, expected 2",
        "fills": {"1": "a", "2": "b + 1", "3": "c"}}
    nbformat.validate(nb)  # the autograded notebook stays a valid notebook


def test_a_judge_that_fails_gives_zero_and_says_so(monkeypatch):
    """When judging itself fails, does the graded cell get 0 with the reason, not the kernel's
    own claim?"""
    def broken(*args, **kwargs):
        raise RuntimeError("no runner")

    monkeypatch.setattr(judge_grades.grade_cell, "verdicts", broken)
    nb, _ = JudgeGrades().preprocess(notebook(), {})
    assert nb.cells[1].outputs[1].data["text/plain"] == "0.0"
    assert "could not be graded (no runner)" in nb.cells[1].outputs[0].text


def test_disabled_it_leaves_the_notebook_alone():
    """With enabled=False, is every output kept as it was?"""
    nb = notebook()
    before = nbformat.writes(nb)
    JudgeGrades(enabled=False).preprocess(nb, {})
    assert nbformat.writes(nb) == before
