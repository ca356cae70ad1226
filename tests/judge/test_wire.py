"""Does the judge's wire format carry plain values both ways, and nothing else?"""

import math

import numpy as np
import pytest
import torch

from autograder.judge import wire


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, "text", [1, [2, 3]], (1, "a"), {"k": [1.0, None]}, {1: "int key"},
    [], (), {},
])
def test_plain_values_survive_a_round_trip(value):
    """Does every plain value come back equal, tuples as tuples and dict keys as they were?"""
    assert wire.decode(wire.loads(wire.dumps({"ok": wire.encode(value)}))["ok"]) == value


def test_non_finite_floats_survive():
    """Do inf and nan cross (JSON has neither)?"""
    inf, nan = wire.decode(wire.encode([math.inf, math.nan]))
    assert inf == math.inf and math.isnan(nan)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_tensors_keep_their_dtype_and_values(dtype):
    """Does a tensor come back as a tensor of the same dtype, shape and values?"""
    tensor = (torch.arange(6).reshape(2, 3) % 2).to(dtype)
    back = wire.decode(wire.encode(tensor))
    assert isinstance(back, torch.Tensor) and back.dtype == dtype and torch.equal(back, tensor)


def test_numpy_arrays_keep_their_dtype():
    """Does a numpy array come back as an array of the same dtype?"""
    array = np.arange(4, dtype=np.float32)
    back = wire.decode(wire.encode(array))
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    assert np.array_equal(back, array)


def test_objects_are_refused_on_the_way_out():
    """Is an arbitrary object (which could carry code) refused, not pickled?"""
    with pytest.raises(TypeError, match="cannot send a object"):
        wire.encode(object())


def test_unknown_tags_are_refused_on_the_way_in():
    """Is a crafted reply with a tag the judge does not know refused, not interpreted?"""
    with pytest.raises(ValueError, match="unknown message part"):
        wire.decode({"__pickle__": "gASV..."})


def test_replies_that_are_not_messages_or_too_large_are_refused(monkeypatch):
    """Is a reply that is not a JSON object, or larger than MAX_MESSAGE, refused?"""
    with pytest.raises(ValueError, match="not a message"):
        wire.loads(b"[1, 2]\n")
    monkeypatch.setattr(wire, "MAX_MESSAGE", 10)
    with pytest.raises(ValueError, match="too large"):
        wire.loads(b'{"ok": "0123456789"}\n')
