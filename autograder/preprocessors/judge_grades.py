"""JudgeGrades: replace what each graded cell showed with the judge's verdict.

It runs inside `nbgrader autograde`, after Execute and before SaveAutoGrades. A graded cell
whose (locked, restored) source calls `grade(fn)` gets its outputs rewritten from
`autograder.judge.verdict`: the report as stdout and the points as the cell's value, which
nbgrader reads as partial credit. Whatever the learner's kernel printed or returned there,
a fake "score: 5 / 5" included, is discarded.
"""

import re

from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Int

from autograder import judge
from autograder.grade_cell import report_text

GRADE_CALL = re.compile(r"^\s*grade\((\w+)(?:,\s*points=([\d.]+))?\)\s*$", re.M)


class JudgeGrades(NbGraderPreprocessor):
    """Decide the points of `grade(fn)` cells outside the learner's kernel."""

    enabled = Bool(True, help="Judge grade(fn) cells outside the kernel").tag(config=True)
    slot = Int(0, help="Which sandbox uid the judge's runners use (one per parallel grader)"
               ).tag(config=True)

    def preprocess(self, nb, resources):
        if not self.enabled:
            return nb, resources
        student = resources.get("nbgrader", {}).get("student", "")
        code = [c.source for c in nb.cells if c.cell_type == "code" and not utils.is_grade(c)]
        for cell in nb.cells:
            match = GRADE_CALL.search(cell.source) if cell.cell_type == "code" else None
            if not (utils.is_grade(cell) and match):
                continue
            name, points = match[1], float(match[2]) if match[2] else None
            try:
                earned, possible, report = judge.verdict(code, name, student, points, self.slot)
            except Exception as err:  # noqa: BLE001 - one broken exercise must not stop the rest
                self.log.error("judging %s failed: %s", name, err)
                earned, possible, report = 0.0, 0.0, [f"✗ {name}: could not be graded ({err})"]
            cell.outputs = [
                new_output("stream", name="stdout",
                           text=report_text(name, earned, possible, report)),
                new_output("execute_result", data={"text/plain": repr(earned)},
                           execution_count=cell.get("execution_count")),
            ]
        return nb, resources
