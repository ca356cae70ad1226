"""The reference answers, importable: the solved sources' definitions, run as a module.

`reference("ring_allreduce")` is the solved function from `solutions/`. Only the top-level
imports, functions, classes and constant assignments of each code cell are run, so loading a
notebook's references never launches ranks or draws plots.
"""

from __future__ import annotations

import functools
import types

from autograder import solved
from distlab.source import cells, paths
from distlab.source.definitions import definitions, functions
from distlab.source.markers import MarkerError


@functools.cache
def module(assignment: str) -> types.ModuleType:
    """The definitions of one solved notebook as a module (not in sys.modules on purpose:
    cloudpickle then ships its functions by value to the ranks)."""
    mod = types.ModuleType(f"solutions_{assignment}")
    for cell in solved.load(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not meta.get("grade"):
            exec(compile(definitions(cell.source), f"<{assignment}>", "exec"), mod.__dict__)
    return mod


@functools.cache
def _solution_cells(assignment: str) -> list[tuple[set[str], object, list]]:
    """(functions it defines, cell, blanks) for each solution cell of an assignment: read once
    per process, as the judge looks up every graded function of every notebook (reading the
    notebooks before it again for each name cost 9 CPU-s a grading process)."""
    return [(set(functions(cell.source)), cell, blanks)
            for cell, blanks in solved.solution_cells(assignment)]


@functools.cache
def locate(name: str) -> tuple[str, object, list]:
    """(assignment, solution cell, blanks) of the solution cell that defines function `name`.
    A solved source with a bad marker is skipped (named if `name` is found nowhere), so one
    notebook being written never stops the others from being graded."""
    broken = []
    for assignment in paths.assignment_ids():
        try:
            cells = _solution_cells(assignment)
        except MarkerError as err:
            broken.append(str(err).splitlines()[0])
            continue
        for defined, cell, blanks in cells:
            if name in defined:
                return assignment, cell, blanks
    also = f" (not read: {'; '.join(broken)})" if broken else ""
    raise KeyError(f"no solution cell in solutions/ defines a function named {name!r}{also}")


@functools.cache
def released_templates() -> dict[str, str]:
    """function -> the released code of the solution cell that defines it (blanks as
    `_____`), read without jupytext: what an exercise is compared with for Validate and for
    the kernel's notices (through autograder/drill_judge.py)."""
    return cells.released_templates()


@functools.cache
def _defining(name: str) -> str:
    """The assignment whose solved notebook defines `name`: in a solution cell first (what
    the judge grades), else in given code (02 gives `ring_all_reduce` in a plain cell)."""
    try:
        return locate(name)[0]
    except KeyError as err:
        missing = err
    for assignment in paths.assignment_ids():
        if any(name in functions(cell.source) for cell in solved.load(assignment).cells
               if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade")):
            return assignment
    raise missing


def reference(name: str):
    """The function (or class) `name` as the solved notebooks define it, from solutions/."""
    return getattr(module(_defining(name)), name)
