"""Does the one torch.distributed patcher (distlab.intercept) stand in for the functions it is
given, and put back exactly what was there, also when the block raises? And does the one
trusted-call helper of the hidden tests (checks.with_trusted) give a learner's function or
class the trusted helpers, leaving the learner's own untouched?"""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from autograder.exercises.checks import with_trusted
from distlab.intercept import intercepting


def test_the_functions_are_wrapped_inside_and_restored_after_an_error():
    before = dist.all_reduce, dist.broadcast
    seen = []

    def wrap(name, real):
        seen.append((name, real))
        return lambda *args, **kwargs: name

    with pytest.raises(RuntimeError), intercepting(["all_reduce", "broadcast"], wrap):
        assert dist.all_reduce(None) == "all_reduce"
        assert dist.broadcast(None) == "broadcast"
        raise RuntimeError
    assert (dist.all_reduce, dist.broadcast) == before
    assert seen == [("all_reduce", before[0]), ("broadcast", before[1])]


def test_also_c10d_patches_both_routes():
    real = c10d.isend
    with intercepting(["isend"], lambda name, fn: "stand-in", also_c10d=True):
        assert dist.isend == c10d.isend == "stand-in"
    assert dist.isend is c10d.isend is real


def helper():
    return "learner's"


def uses_helper():
    return helper()


class UsesHelper:
    def value(self):
        return helper()

    def other(self):
        return "untouched"


def test_with_trusted_swaps_the_helper_in_a_copy():
    def trusted():
        return "trusted"

    assert with_trusted(uses_helper, helper=trusted)() == "trusted"
    assert uses_helper() == "learner's"
    cls = with_trusted(UsesHelper, helper=trusted)
    assert issubclass(cls, UsesHelper) and cls.__name__ == "UsesHelper"
    assert cls().value() == "trusted" and cls().other() == "untouched"
    assert UsesHelper().value() == "learner's"
    assert with_trusted(UsesHelper, unused=trusted) is UsesHelper


def test_with_trusted_asks_the_judge_for_code_in_the_sandbox():
    class Remote:
        def patched(self, **names):
            return ("patched", names)

    assert with_trusted(Remote(), helper=len) == ("patched", {"helper": len})
