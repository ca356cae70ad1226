"""What both sides of `distlab.launch` share: the notebook side (launch.py, _pool.py) and the
rank side (_worker.py) import this module, and neither imports the other's way up.

- `dumps`: how a call's function and a rank's result travel (cloudpickle, keeping each code
  object's real file, so a rank's traceback names the cell);
- `is_learner_file`: which frames are the learner's (a rank's "where", the notebook's errors);
- `device()`: the torch.device of this rank, which the rank sets once (`set_device`) when it
  starts and the learner's code reads.
"""

from __future__ import annotations

import io
import marshal
import os
import pickle
import sysconfig
import types
from collections import ChainMap

import cloudpickle

_LIBRARY_DIRS = tuple({os.path.join(sysconfig.get_paths()[key], "")
                       for key in ("stdlib", "platstdlib", "purelib", "platlib")}
                      | {os.path.join(os.path.dirname(os.path.abspath(__file__)), "")})

_device = None  # this rank's torch.device (set_device); None outside a rank


def set_device(device) -> None:
    """Called once by a rank as it starts (distlab._worker): what device() answers there."""
    global _device
    _device = device


def device():
    """The torch.device this rank computes on: cuda:<rank> on the nccl path, cpu on gloo."""
    import torch

    return _device if _device is not None else torch.device("cpu")


def is_learner_file(path: str, fn_file: str | None = None) -> bool:
    """Is this code the learner's (a cell, a test, their module), not torch's, Python's or ours?"""
    if path == fn_file:
        return True
    if path.startswith("<frozen") or "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_LIBRARY_DIRS)


class _Pickler(cloudpickle.Pickler):
    # cloudpickle 3 renames the file of every code object it ships to "<dynamic-code>"; marshal
    # keeps the real one (same interpreter on both sides), so a rank's traceback names the cell.
    dispatch_table = ChainMap({types.CodeType: lambda c: (marshal.loads, (marshal.dumps(c),))},
                              cloudpickle.Pickler.dispatch_table)


def dumps(obj) -> bytes:
    """cloudpickle.dumps, except that functions keep the file (cell) they were defined in."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()
