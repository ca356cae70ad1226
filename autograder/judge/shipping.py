"""Trusted code that must run next to the learner's, shipped by value with the request that
needs it: a rank harness (it records what the learner's function does on the ranks) or a
stand-in (a correct helper in place of a notebook global, say exchange while
ring_reduce_scatter is graded).

The runner's sandbox shows none of the grading side but the judge's own package, so no hidden
test, oracle, reference or stand-in can be imported or read there as a file. What a request
needs travels in it instead: a cloudpickle of the function and of whatever it uses from the
grading side (by value: only the names its code refers to, never the rest of its module), and
nothing of it is written to a file. Each graded function runs in a fresh child of the runner,
so a stand-in reaches only the child whose requests carried it: the test of the function it
answers never ships it.

    harness = pack(_p2p_harness)      # judge: a str for the JSON request
    fn = unpack(harness)              # runner: the function again
"""

from __future__ import annotations

import base64
import io
import pickle

import cloudpickle

GRADING_SIDE = "autograder"  # the package whose code travels by value: the runner cannot import it


def pack(obj) -> str:
    """obj (a function, a class, a functools.partial of them) with what it uses of the grading
    side, by value, as text for the wire."""
    import autograder

    buffer = io.BytesIO()
    registered = GRADING_SIDE in cloudpickle.list_registry_pickle_by_value()
    if not registered:
        cloudpickle.register_pickle_by_value(autograder)
    try:
        cloudpickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    finally:
        if not registered:
            cloudpickle.unregister_pickle_by_value(autograder)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def unpack(text: str):
    """The object `pack` shipped (in the runner: trusted data, unpickled on the untrusted side)."""
    return pickle.loads(base64.b64decode(text))
