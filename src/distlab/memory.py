"""Bytes of the tensors alive in this process, counted from below: every tensor object the
garbage collector knows, each storage once. On CPU there is no allocator to ask, so this is how
the course measures what a rank holds (its notebooks' checks, and the hidden tests through
autograder's recorder).

    live_tensor_bytes(*exclude)   # one count, but the storages behind `exclude`
    settled_bytes(*exclude)       # garbage collected first, counted until the count holds still
"""

from __future__ import annotations

import contextlib
import gc
import time

SETTLE_S = 0.03  # settled_bytes counts again until the count holds still this long


def live_tensor_bytes(*exclude) -> int:
    """Bytes of every tensor's storage alive in this process (each storage once), but those of
    the tensors in `exclude` (say the inputs a harness itself keeps)."""
    import torch

    skip = set()
    for tensor in exclude:
        with contextlib.suppress(Exception):
            skip.add(tensor.untyped_storage().data_ptr())
    seen, total = set(), 0
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor):  # type(): isinstance would ask every
            continue  # object its __class__, and deprecated torch aliases warn then
        with contextlib.suppress(Exception):
            if obj.is_meta or obj.layout != torch.strided:
                continue
            storage = obj.untyped_storage()
            key = storage.data_ptr()
            if key in seen or key in skip or key == 0:
                continue
            seen.add(key)
            total += storage.nbytes()
    return total


def settled_bytes(*exclude) -> int:
    """live_tensor_bytes, garbage collected first. A gloo collective returns before gloo's worker
    thread lets go of the tensors it was given, so the count is taken again until it has held
    still for SETTLE_S (sleeping: the thread gets the core)."""
    gc.collect()
    count, still_since = live_tensor_bytes(*exclude), time.monotonic()
    while time.monotonic() - still_since < SETTLE_S:
        time.sleep(SETTLE_S / 6)
        again = live_tensor_bytes(*exclude)
        if again != count:
            count, still_since = again, time.monotonic()
    return count
