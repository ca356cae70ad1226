"""Plain-data messages between the trusted judge and the sandboxed runner (JSON lines).

Only numbers, strings, booleans, None, lists, dicts with string keys, tuples and tensors or
numpy arrays (sent as nested lists with their dtype) cross the boundary. Nothing is unpickled
on the trusted side, so a submission cannot run code there by crafting a reply.
"""

from __future__ import annotations

import json
import math
import os
import select
import time

MAX_MESSAGE = 64 << 20  # a reply larger than this is a failure, not a memory bomb


class Closed(EOFError):
    """The other end closed the stream before a whole line came."""


def read_line(stream, deadline: float, max_bytes: int = MAX_MESSAGE) -> bytes | None:
    """The next line from a child's stdout pipe, or None if `deadline` (time.monotonic())
    passes first. Raises Closed at end of stream, ValueError past `max_bytes`. Used for the
    judge's runner and make grade's workers: neither can make its reader wait past a deadline.
    """
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return None
        chunk = os.read(stream.fileno(), 1 << 20)
        if not chunk:
            raise Closed("the process ended before it answered")
        line += chunk
        if len(line) > max_bytes:
            raise ValueError("the answer is far too long")
    return line


def encode(value):
    """A JSON-able form of `value` (tensors and arrays tagged with their dtype)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, list | tuple):
        items = [encode(v) for v in value]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    kind = type(value).__module__.split(".")[0]
    if kind == "torch" and hasattr(value, "dtype") and hasattr(value, "tolist"):
        return {"__tensor__": encode(value.detach().cpu().tolist()),
                "dtype": str(value.dtype).removeprefix("torch.")}
    if kind == "numpy" and hasattr(value, "dtype") and hasattr(value, "tolist"):
        return {"__ndarray__": encode(value.tolist()), "dtype": str(value.dtype)}
    raise TypeError(f"cannot send a {type(value).__name__} between grader and runner")


def decode(data):
    """The value `encode` made (tensors come back as torch tensors, arrays as numpy arrays)."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "__float__" in data:
        return float(data["__float__"])
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__dict__" in data:
        return {decode(k): decode(v) for k, v in data["__dict__"]}
    if "__tensor__" in data:
        import torch

        return torch.tensor(decode(data["__tensor__"]), dtype=getattr(torch, data["dtype"]))
    if "__ndarray__" in data:
        import numpy as np

        return np.array(decode(data["__ndarray__"]), dtype=data["dtype"])
    raise ValueError(f"unknown message part: {sorted(data)[:3]}")


def dumps(message: dict) -> bytes:
    return (json.dumps(message, allow_nan=False) + "\n").encode()


def loads(line: bytes) -> dict:
    if len(line) > MAX_MESSAGE:
        raise ValueError("reply too large")
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("reply is not a message")
    return message
