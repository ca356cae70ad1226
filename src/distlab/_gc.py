"""`long_lived()`: load what lives as long as the process, without the cyclic collector."""

import contextlib
import gc


@contextlib.contextmanager
def long_lived():
    """Build what lives as long as this process (torch's modules: some 250k objects) with the
    cyclic collector off, which would scan them again and again as they load (a third of
    torch._dynamo's import here), and freeze it (gc.freeze), so that no later collection here or
    in a forked child scans it (a child's collection would also copy every page it reads)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
