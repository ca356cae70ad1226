"""Hidden tests: one property test per learner function, registered under that function's name.

A test takes the learner's function and a seeded `numpy.random.Generator`, tries random inputs
(several world sizes, uneven lengths, sum and mean) against an independent oracle, and raises
`AssertionError` with a message a learner can act on: the failing case, never the answer.
"""

from __future__ import annotations

import importlib
import pkgutil

TESTS = {}


def exercise(test):
    """Register `test` as the hidden test of the learner function with the same name."""
    TESTS[test.__name__] = test
    return test


def all_tests() -> dict:
    """Every hidden test, by learner function name (importing every exercise module: one
    imported on its own registers only its own tests)."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return TESTS


def test_for(name: str):
    """The hidden test of learner function `name`."""
    return TESTS[name] if name in TESTS else all_tests()[name]
