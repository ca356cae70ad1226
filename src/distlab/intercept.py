"""The one way distlab (and the hidden tests) watch torch.distributed calls from Python: every
counter, tracer and stand-in of a `torch.distributed.<name>` function goes through
`intercepting`, so there is one place that replaces the functions and one that restores them.

    def wrap(name, real):             # the function that stands in for dist.<name>
        def call(*args, **kwargs):
            seen.append(name)
            return real(*args, **kwargs)
        return call

    with intercepting(["all_reduce", "broadcast"], wrap):
        ...                           # on a rank: dist.all_reduce(...) goes through `call`

Only calls made through the module attribute are seen (`dist.all_reduce(t)`, not a reference
taken before the block). autograder/exercises/recorder.py sees every route (it sits below, in
the dispatcher); this is for what a learner's picture counts and a harness swaps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable


@contextlib.contextmanager
def intercepting(names: Iterable[str], wrap: Callable[[str, Callable], Callable],
                 also_c10d: bool = False):
    """Within the block, `torch.distributed.<name>` is `wrap(name, real)` for each of `names`
    (also `torch.distributed.distributed_c10d.<name>` with also_c10d=True, for code that calls
    it there); after it, each is what it was before, whatever happened inside."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    modules = (dist, c10d) if also_c10d else (dist,)
    saved = [(module, name, getattr(module, name)) for name in names for module in modules]
    replacements = {name: wrap(name, getattr(modules[-1], name)) for name in names}
    for module, name, _ in saved:
        setattr(module, name, replacements[name])
    try:
        yield
    finally:
        for module, name, real in reversed(saved):
            setattr(module, name, real)
