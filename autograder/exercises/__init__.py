"""Hidden tests: one property test per learner function, registered under that function's name.

This package is the engine: `checks.py` (shared comparisons, the rank harness, stand-ins) and
`recorder.py` (what ranks send, from below their code). Each notebook's own hidden tests are
secret and live with its solved source, in `solutions/<NN>_<topic>/hidden_tests.py` (a part of
them in `hidden_tests_<part>.py`); they are imported as `autograder.exercises.<topic>` (and
`<topic>_<part>`: a finder below maps the one to the other), so they
import the engine, and ship to the judge's runner by value, like any module of this package.

A test takes the learner's function and a seeded `numpy.random.Generator`, tries random inputs
(several world sizes, uneven lengths, sum and mean) against an independent oracle, and raises
`AssertionError` with a message a learner can act on: the failing case, never the answer.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import pkgutil
import sys
from pathlib import Path

from distlab.source import paths

TESTS = {}


def exercise(test):
    """Register `test` as the hidden test of the learner function with the same name."""
    TESTS[test.__name__] = test
    return test


def notebook_modules(solutions: Path | None = None) -> dict[str, Path]:
    """{module name: file} of every notebook's hidden tests: solutions/<NN>_<topic>/
    hidden_tests.py is `<topic>`, and a part of them in hidden_tests_<part>.py `<topic>_<part>`."""
    solutions = solutions or paths.ROOT / "solutions"
    return {folder.name.split("_", 1)[1] + file.stem.removeprefix("hidden_tests"): file
            for folder in sorted(solutions.glob("[0-9]*_*"))
            for file in sorted(folder.glob("hidden_tests*.py"))}


class _NotebookTests(importlib.abc.MetaPathFinder):
    """`autograder.exercises.<topic>` is solutions/<NN>_<topic>/hidden_tests.py."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, topic = fullname.rpartition(".")
        if package != __name__:
            return None
        file = notebook_modules().get(topic)
        return importlib.util.spec_from_file_location(fullname, file) if file else None


if not any(isinstance(finder, _NotebookTests) for finder in sys.meta_path):
    sys.meta_path.insert(0, _NotebookTests())


def all_tests() -> dict:
    """Every hidden test, by learner function name (importing every notebook's hidden tests:
    one imported on its own registers only its own tests)."""
    engine = {info.name for info in pkgutil.iter_modules(__path__)}
    for name in sorted(engine | set(notebook_modules())):
        importlib.import_module(f"{__name__}.{name}")
    return TESTS


def test_for(name: str):
    """The hidden test of learner function `name`."""
    return TESTS[name] if name in TESTS else all_tests()[name]
