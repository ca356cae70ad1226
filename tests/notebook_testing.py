"""What the tests of every notebook share: its reference functions (and classes) with blanks
answered otherwise, defined as a notebook cell defines them, and the hidden test's verdict.

    from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (fixture)

    nb = Notebook("01_collectives")
    fails("ring_allreduce", nb.variant("ring_allreduce", 2, "(i + step) % N"))  # -> complaint
"""

from __future__ import annotations

import linecache
import re
import warnings

import numpy as np
import pytest

from autograder import diagnose, exercises, grade_cell, reference, solved
from distlab.source.definitions import functions
from distlab.source.markers import blank_source


def answered(source: str, blanks: list, answers: dict[int, str], name: str = "") -> str:
    """A solved cell's source with each blank number in `answers` answered so."""
    lines = source.split("\n")
    for number, answer in answers.items():
        blank = blanks[number - 1]
        code, marker = lines[blank.line - 1].split("# BLANK", 1)
        assert code.count(blank.answer) == 1, f"{name} [{number}]: answer not unique in {code!r}"
        indent = code[:len(code) - len(code.lstrip())]  # an answer over several lines
        lines[blank.line - 1] = (code.replace(blank.answer, answer.replace("\n", "\n" + indent))
                                 + "# BLANK" + marker)
    return "\n".join(lines)


class Notebook:
    def __init__(self, assignment: str):
        self.assignment = assignment

    def define(self, name: str, source: str, **names):
        """`name` as a cell with `source` defines it, over the notebook's reference definitions
        (and `names`): its text in linecache, for the diagnosis; `__main__`, so it is shipped
        to the ranks by value."""
        filename = f"<cell-{name}-{abs(hash(source))}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {**vars(reference.module(self.assignment)), **names, "__name__": "__main__"}
        exec(compile(source, filename, "exec"), namespace)
        return namespace[name]

    def variant_of(self, name: str, answers: dict[int, str]):
        """The reference `name` with each blank number in `answers` answered so."""
        _, cell, blanks = reference.locate(name)
        return self.define(name, answered(cell.source, blanks, answers, name))

    def variant(self, name: str, number: int, answer: str):
        """The reference `name` with blank `number` answered `answer`."""
        return self.variant_of(name, {number: answer})

    def released(self, name: str):
        """`name` as the learner first gets it: every blank `_____` (distlab's, as in the
        released notebook)."""
        from distlab import _____

        _, cell, _ = reference.locate(name)
        return self.define(name, blank_source(cell.source)[0], _____=_____)

    def graded_units(self) -> dict[str, list]:
        """{name: blanks} of each solution cell, in order, checking what every notebook
        promises: one function or class per cell, a hidden test for it, and a graded cell
        worth one point per blank."""
        nb = solved.load(self.assignment)
        points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
                  for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
        units = {}
        for cell, blanks in solved.solution_cells(self.assignment):
            (name,) = functions(cell.source)
            assert points[f"{name}_tests"] == len(blanks), name
            exercises.test_for(name)
            units[name] = blanks
        return units

    def judge_verdict(self, name: str, number: int, wrong: str) -> tuple:
        """(earned, possible, report) the judge gives `name` in the solved notebook with blank
        `number` answered `wrong` (the learner's code in a runner process: run the test with
        the sandbox off, `sandbox.available` patched, which has tests of its own)."""
        blank = reference.locate(name)[2][number - 1]

        def edit(code):
            if not re.search(rf"^(def|class) {name}\b", code, re.M):
                return code
            lines = code.split("\n")
            row = next(i for i, line in enumerate(lines) if "# BLANK" in line
                       and blank.hint in line and blank.answer in line.split("# BLANK")[0])
            code_part, marker = lines[row].split("# BLANK", 1)
            lines[row] = code_part.replace(blank.answer, wrong, 1) + "# BLANK" + marker
            return "\n".join(lines)

        [verdict] = grade_cell.verdicts(self.solved_cells(edit), [(name, None)], "test")
        return verdict

    def solved_cells(self, edit=None) -> list[str]:
        """The code cells of the solved notebook, as the judge reads a submission."""
        cells = [c.source for c in solved.load(self.assignment).cells if c.cell_type == "code"]
        return [edit(c) if edit else c for c in cells]


def fails(name: str, obj, seed: int = 0, ignore_warnings: bool = False) -> str:
    """The hidden test's complaint about obj, or '' if it passes (ignore_warnings: as grading
    does, for a wrong answer that warns)."""
    try:
        with warnings.catch_warnings():
            if ignore_warnings:
                warnings.simplefilter("ignore")
            exercises.test_for(name)(obj, np.random.default_rng(seed))
    except AssertionError as err:
        return str(err) or "AssertionError"
    except Exception as err:  # a crash of the learner's code is a failure too
        return f"{type(err).__name__}: {err}"
    return ""


def assess(obj, name: str | None = None):
    """grade()'s verdict on obj as data: (earned, possible, report lines)."""
    def make(source):
        return obj if source is None else diagnose.rebuild(obj, source)

    name = name or obj.__name__
    return grade_cell.assess(name, diagnose.source_of(obj), make)


def reference_earns_every_point(name: str) -> None:
    """Graded in the kernel, does the solved `name` earn its one point per blank?"""
    earned, possible, report = assess(reference.reference(name), name)
    assert earned == possible == len(reference.locate(name)[2]), report


def released_earns_nothing(nb: Notebook, name: str) -> None:
    """Graded as released (every blank `_____`), does `name` earn 0 of its one point per blank,
    its blanks reported as not filled yet, rather than crash?"""
    earned, possible, report = assess(nb.released(name), name)
    assert (earned, possible) == (0.0, float(len(reference.locate(name)[2]))), report
    assert any("not filled yet" in line for line in report), report


@pytest.fixture(scope="module", autouse=True)
def stop_ranks():
    """Stop the warm ranks once the module's tests are done."""
    yield
    import distlab

    distlab.shutdown()
