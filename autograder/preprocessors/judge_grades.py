"""JudgeGrades: replace what each graded cell showed with the judge's verdict.

It runs inside `nbgrader autograde`, after Execute and before SaveAutoGrades. A graded cell
whose (locked, restored) source calls `grade(fn)` gets its outputs rewritten from
`autograder.grade_cell.verdicts` (the hidden tests run here, the learner's functions in the
judge's runner): the report as stdout and the points as the cell's value, which
nbgrader reads as partial credit. Whatever the learner's kernel printed or returned there,
a fake "score: 5 / 5" included, is discarded.

The verdict's details (per blank what was graded there and whether it earned its point, a
change outside the blanks, the hidden test's complaint) go into the cell's metadata,
`distlab.verdict` (autograder/records.py), for the class report (autograder/report/): the
autograded notebook is the grader's own file, and that key is dropped from every other cell, so
a submission cannot bring its own.
"""

import re

from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from autograder import grade_cell, records
from autograder.grade_cell import Verdict, report_text

GRADE_CALL = re.compile(r"^\s*grade\((\w+)(?:,\s*points=([\d.]+))?\)\s*$", re.M)


def judged(cell) -> re.Match | None:
    """The `grade(fn)` call of a graded cell that the judge decides (None: not such a cell)."""
    if cell.cell_type != "code" or not utils.is_grade(cell):
        return None
    return GRADE_CALL.search(cell.source)


class JudgeGrades(NbGraderPreprocessor):
    """Decide the points of `grade(fn)` cells outside the learner's kernel."""

    enabled = Bool(True, help="Judge grade(fn) cells outside the kernel").tag(config=True)

    def preprocess(self, nb, resources):
        if not self.enabled:
            return nb, resources
        for cell in nb.cells:  # only the judge writes verdicts
            records.drop_verdict(cell)
        student = resources.get("nbgrader", {}).get("student", "")
        code = [c.source for c in nb.cells if c.cell_type == "code" and not utils.is_grade(c)]
        graded = []
        for cell in nb.cells:
            if match := judged(cell):
                graded.append((cell, match[1], float(match[2]) if match[2] else None))
        from autograder.judge.limits import GradingLimits, slot

        limits = GradingLimits(parent=self)  # the submission's limits hold for the judge too
        try:
            verdicts = grade_cell.verdicts(code, [(name, points) for _, name, points in graded],
                                           student, slot(), limits.sandbox_limits(),
                                           limits.call_seconds, limits.function_seconds)
        except Exception as err:  # noqa: BLE001 - the notebook still gets a (zero) grade
            self.log.error("judging failed: %s", err)
            verdicts = [Verdict(0.0, 0.0, [f"✗ {name}: could not be graded ({err})"])
                        for _, name, _ in graded]
        for (cell, name, _), verdict in zip(graded, verdicts, strict=True):
            cell.outputs = [
                new_output("stream", name="stdout", text=report_text(name, *verdict)),
                new_output("execute_result", data={"text/plain": repr(verdict.earned)},
                           execution_count=cell.get("execution_count")),
            ]
            records.keep_verdict(cell, name, verdict.record())
        return nb, resources
