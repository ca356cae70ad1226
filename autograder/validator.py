"""What the learner's Validate button says: a count first, then a line or two per failing check.

nbgrader's own dialog lists every failing cell with its whole source and traceback (hundreds
of lines on an untouched notebook) and no count. `CourseValidator` runs the notebook the same
way (nbgrader's Validator, `validate_all`), then reads the outputs as a learner would:

    3 of 10 checks pass.
    ✗ check of ring_allreduce: BlankNotFilled: ring_allreduce still has 2 blank line(s) ...
    ✗ check of ring_allgather: AssertionError: rank 1 holds [0, 1, 2], expected [0, 1, 2, 3]
    ⚠ chunk_bounds: line 5 was changed outside the blanks: ... (graded as released)

A check is a locked code cell that asserts something about a function the learner writes; a
failing cell that is no check (a picture or a measurement that uses one) is listed too, without
counting. nbgrader_config.py puts this class
where nbgrader's Validate handler and `nbgrader validate` look for `Validator`.
"""

from __future__ import annotations

import ast
import re

from nbgrader import utils
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, Execute
from nbgrader.validator import Validator
from traitlets import List

from autograder import reference
from autograder.preprocessors.capped_execute import QuietOutputWidgets
from distlab.source.changes import changed_outside_blanks
from distlab.source.definitions import defined_names, functions

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDTH = 160  # characters of one reason line
# The frontend writes "The following cell failed:" above each entry and shows the entry's
# `error` as HTML: one entry holds the whole summary, and this hides nbgrader's heading.
STYLE = ("<style>#validation-message > div:first-child { display: none; }"
         "#validation-message pre { white-space: pre-wrap; }</style>")


def _reason(cell) -> list[str]:
    """At most two lines saying why a cell failed: the exception and its first detail."""
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            value = ANSI.sub("", output.get("evalue", "")).strip().splitlines()
            head = f"{output.ename}: {value[0]}" if value else output.ename
            detail = [line.strip() for line in value[1:2] if line.strip().startswith("in ")]
            return [_cut(head), *(_cut(line) for line in detail)]
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == "stderr":
            return [_cut("wrote to stderr: " + ANSI.sub("", output.text).strip().splitlines()[0])]
    return []


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[:WIDTH - 1] + "…"


def _names_used(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(re.findall(r"\b\w+\b", source))
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _asserts(source: str) -> bool:
    try:
        return any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(source)))
    except SyntaxError:
        return False


def summary(nb) -> tuple[list[str], bool]:
    """(the lines Validate shows, whether anything is wrong) for an executed notebook."""
    exercises: list[str] = []  # learner functions, in notebook order
    checks, failing, others, changed = 0, [], [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if utils.is_solution(cell):
            defined = defined_names(cell.source)  # also when the cell does not parse
            exercises += [name for name in defined if name not in exercises]
            changed += _changed_lines(functions(cell.source))
            if _reason(cell):  # the exercise cell itself did not run
                failing.append([f"✗ {', '.join(defined) or f'cell {index + 1}'} (your cell): "
                                f"{_reason(cell)[0]}"])
            continue
        reason = _reason(cell)
        used = [name for name in exercises if name in _names_used(cell.source)]
        if utils.is_grade(cell) or not _asserts(cell.source):
            used = []  # a graded cell (its tests are hidden: nothing runs), or a picture
        if used:
            checks += 1
            if reason:
                failing.append([f"✗ check of {used[-1]}: {reason[0]}",
                                *(f"  {line}" for line in reason[1:])])
        elif reason:
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            others.append([f"✗ cell {index + 1} ({_cut(first)[:60]}): {reason[0]}"])
    lines = [f"{checks - sum(line[0].startswith('✗ check') for line in failing)} of {checks} "
             f"checks pass."]
    for entry in failing + others:
        lines += entry
    for name, line, text in changed:
        lines.append(f"⚠ {name}: line {line} was changed outside the blanks ({_cut(text)[:80]}): "
                     "that change earns nothing; only the `_____` parts are graded")
    if failing:
        lines.append("Start with the first ✗: a later check often uses an earlier function.")
    return lines, bool(failing or others or changed)


def _changed_lines(defined: dict[str, str]) -> list[tuple[str, int, str]]:
    """(name, line, code) of each function of an exercise cell changed outside its blanks,
    where the released template is known (the course's solved sources are installed)."""
    try:
        templates = reference.released_templates()
    except Exception:  # noqa: BLE001 - no solved sources to compare with: nothing to say
        return []
    found = []
    for name, source in defined.items():
        try:
            where = changed_outside_blanks(name, source, templates.get(name))
        except Exception:  # noqa: BLE001 - no template to compare with: nothing to say
            where = None
        if where is not None:
            found.append((name, *where))
    return found


class ValidateExecute(QuietOutputWidgets, Execute):
    """nbgrader's Execute for Validate, its Output widgets kept without echoes."""


class CourseValidator(Validator):
    """nbgrader's Validator with the course's summary in place of its cell-by-cell listing."""

    preprocessors = List([CheckCellMetadata, ClearOutput, ValidateExecute])

    def validate(self, filename: str) -> dict:
        executed = {}
        run = self._preprocess

        def keep(nb):
            executed["nb"] = run(nb)
            return executed["nb"]

        self._preprocess = keep  # the executed notebook, which nbgrader does not return
        try:
            results = super().validate(filename)
        finally:
            del self._preprocess
        if "nb" not in executed or self.invert or set(results) & {"type_changed", "changed"}:
            return results  # nbgrader's own findings (a locked cell edited) stand as they are
        lines, wrong = summary(executed["nb"])
        if not wrong:
            return {}  # nbgrader's "Success! Your notebook passes all the tests."
        return {"failed": [{"source": "\n".join(lines), "error": STYLE, "raw_error": ""}]}

    def validate_and_print(self, filename: str) -> None:
        """`nbgrader validate`: the same summary, as text."""
        results = self.validate(filename)
        failed = results.get("failed", [])
        if len(failed) == 1 and failed[0]["error"] == STYLE:
            print(failed[0]["source"])
            return
        self.validate = lambda _: results  # nbgrader prints its own findings its own way
        try:
            super().validate_and_print(filename)
        finally:
            del self.validate
