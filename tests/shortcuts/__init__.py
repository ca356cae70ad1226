"""The shortcut suite: blanks filled the way a learner who wants the points without the idea
would fill them. One module per notebook (`tests/shortcuts/<id>.py`) lists

    SHORTCUTS = [Shortcut("column_parallel_forward", {1: "weight", 2: "bias"},
                          "every rank multiplies by the whole weight")]
    HONEST = [Shortcut("column_parallel_forward", {1: "torch.chunk(weight, n)[rank]"},
                       "another way to take the shard")]

Keys are blank numbers of the function (as its released cell numbers them), values what goes in
each. tests/test_shortcuts.py checks that each shortcut fails its hidden test with a message
that names the broken idea and that grade() does not give it full marks; each honest answer
passes. tests/system/test_shortcuts.py grades them through `make grade`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from autograder import solved


@dataclass(frozen=True)
class Shortcut:
    function: str  # the learner function (or class) whose blanks it fills
    answers: dict  # blank number -> what the shortcut writes there
    idea: str  # what it skips, in a few words (the test's id)
    says: str = ""  # a word the hidden test's complaint must contain (the idea it names)

    @property
    def id(self) -> str:
        return f"{self.function}: {self.idea}"


def suite(kind: str = "SHORTCUTS") -> list[tuple[str, Shortcut]]:
    """(assignment, shortcut) of every notebook's module that exists."""
    found = []
    for assignment in solved.assignment_ids():
        try:
            module = importlib.import_module(f"shortcuts.{assignment}")
        except ModuleNotFoundError as err:
            if err.name != f"shortcuts.{assignment}":
                raise
            continue
        found += [(assignment, item) for item in getattr(module, kind, [])]
    return found
