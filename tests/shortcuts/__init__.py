"""The shortcut suite: blanks filled the way a learner who wants the points without the idea
would fill them. One module per notebook (`solutions/<id>/shortcuts.py`, secret like the hidden
tests beside it) lists

    SHORTCUTS = [Shortcut("column_parallel_forward", {1: "weight", 2: "bias"},
                          "every rank multiplies by the whole weight")]
    HONEST = [Shortcut("column_parallel_forward", {1: "torch.chunk(weight, n)[rank]"},
                       "another way to take the shard")]

Keys are blank numbers of the function (as its released cell numbers them), values what goes in
each. tests/test_shortcuts.py checks that each shortcut fails its hidden test with a message
that names the broken idea and that grade() does not give it full marks; each honest answer
passes. tests/system/test_grading.py grades, through `make grade`, each notebook with the
first shortcut of every function applied (`submission`) but the one holding its wrong blank:
each such function must lose points.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from autograder import solved
from distlab.source import paths
from distlab.source.definitions import functions
from distlab.source.markers import blank_source


@dataclass(frozen=True)
class Shortcut:
    function: str  # the learner function (or class) whose blanks it fills
    answers: dict  # blank number -> what the shortcut writes there
    idea: str  # what it skips, in a few words (the test's id)
    says: str = ""  # a word the hidden test's complaint must contain (the idea it names)

    @property
    def id(self) -> str:
        return f"{self.function}: {self.idea}"


def module_of(assignment: str):
    """The shortcut module of a notebook, `solutions/<id>/shortcuts.py` (secret, like its hidden
    tests: loaded by path, as `shortcuts.<id>`), or None."""
    name = f"shortcuts.{assignment}"
    if name in sys.modules:
        return sys.modules[name]
    file = paths.ROOT / "solutions" / assignment / "shortcuts.py"
    if not file.is_file():
        return None
    spec = importlib.util.spec_from_file_location(name, file)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def suite(kind: str = "SHORTCUTS") -> list[tuple[str, Shortcut]]:
    """(assignment, shortcut) of every notebook that has a shortcut module."""
    found = []
    for assignment in paths.assignment_ids():
        module = module_of(assignment)
        found += [(assignment, item) for item in getattr(module, kind, [])]
    return found


def first_of_each(assignment: str) -> dict[str, Shortcut]:
    """{function: its first shortcut} of one notebook."""
    firsts: dict[str, Shortcut] = {}
    for name, item in suite():
        if name == assignment:
            firsts.setdefault(item.function, item)
    return firsts


def submission(assignment: str, chosen: dict[str, Shortcut]):
    """The solved notebook with each shortcut of `chosen` ({function: shortcut}, e.g. a part of
    first_of_each) written in its function."""
    from notebook_testing import answered

    nb = solved.load(assignment)
    for cell in nb.cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        for name in functions(cell.source):
            if name in chosen:
                cell.source = answered(cell.source, blank_source(cell.source)[1],
                                       chosen[name].answers, name)
    return nb
