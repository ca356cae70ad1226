"""Does the judge ship, with a hidden test's requests, the trusted code the runner needs (rank
harnesses, stand-ins) by value, and never a correct answer of the function under test?

The runner's sandbox shows none of the grading side but the judge (test_judge.py checks it), so
whatever trusted code runs there travels in the requests (autograder/judge/shipping.py), with
everything it uses. A stand-in (a correct helper for another graded function: exchange while
ring_reduce_scatter is graded) must therefore never ride along with the test of the function
it answers: its learner could call it.
"""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest

from autograder import exercises
from autograder.exercises import data_parallel
from autograder.judge import shipping

# Stand-ins that a harness uses on the ranks (the others are passed to `patched`, recorded below):
# the graded function each one answers.
HARNESS_STAND_INS = {"_oracle_broadcast": "broadcast_parameters", "_tp_block": "TPBlock",
                     "_FlatShard": "FlatShard"}


class _Stop(Exception):
    pass


class _Recorder:
    """Stands in for the judge's Remote: keeps what a hidden test would ship (its stand-ins, its
    harness) and stops the test at its first call of the learner's function."""

    def __init__(self, name: str):
        self.__name__, self.shipped, self.stand_ins = name, [], {}

    def patched(self, **names):
        self.stand_ins.update(names)
        self.shipped += names.values()
        return self

    def on_ranks(self, harness, *args, **options):
        self.shipped.append(harness)
        raise _Stop

    def __call__(self, *args, **kwargs):
        raise _Stop


def carried(obj) -> set[str]:
    """The qualified names of the grading side's functions and classes that shipping `obj`
    carries (unpacked again: each by-value function's globals are what it took along)."""
    todo, seen, names = [shipping.unpack(shipping.pack(obj))], set(), set()
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, types.ModuleType):
            continue
        seen.add(id(item))
        if isinstance(item, types.FunctionType | type):
            if (item.__module__ or "").startswith(shipping.GRADING_SIDE):
                names.add(item.__qualname__)
            if isinstance(item, type):
                todo += vars(item).values()
            else:
                todo += [*item.__globals__.values(), *(item.__defaults__ or ()),
                         *(cell.cell_contents for cell in item.__closure__ or ())]
        elif isinstance(item, staticmethod | classmethod | property):
            todo += [getattr(item, "__func__", None), getattr(item, "fget", None)]
        elif isinstance(item, functools.partial):
            todo += [item.func, *item.args, *item.keywords.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            todo += list(item)
        elif isinstance(item, dict):
            todo += list(item.values())
    return names


@pytest.fixture(scope="module")
def shipped() -> dict[str, _Recorder]:
    """Every hidden test run up to its first call: what it ships, by learner function."""
    found = {}
    for name, test in exercises.all_tests().items():
        found[name] = _Recorder(name)
        try:
            test(found[name], np.random.default_rng(0))
        except Exception:  # noqa: BLE001, S110 - _Stop, or a check of a value it never got
            pass
    return found


def test_the_carried_names_see_a_stand_in_a_harness_uses():
    """Does `carried` find the stand-in that the DDP classes' harness uses (so the check below
    could fail), and not in broadcast_parameters' own harness?"""
    assert "_oracle_broadcast" in carried(data_parallel._wrapper_harness)
    assert "_oracle_broadcast" not in carried(data_parallel._broadcast_harness)


def test_no_hidden_test_ships_a_stand_in_for_the_function_it_grades(shipped):
    """Does any hidden test ship (as a harness or with what a harness uses) a stand-in for the
    very function it grades?"""
    answers = dict(HARNESS_STAND_INS)
    for recorder in shipped.values():
        answers.update({obj.__qualname__: name for name, obj in recorder.stand_ins.items()})
    assert answers["_trusted_exchange"] == "exchange"  # recorded from patched()
    for name, recorder in shipped.items():
        carries = set().union(*map(carried, recorder.shipped)) if recorder.shipped else set()
        leaks = sorted(qualname for qualname in carries if answers.get(qualname) == name)
        assert not leaks, f"the hidden test of {name} ships its answer: {leaks}"
