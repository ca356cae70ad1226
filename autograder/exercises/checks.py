"""Shared pieces of the hidden tests: case text, comparisons with tolerances, and the harness
plumbing that runs a learner function on real ranks.

Every check raises `AssertionError` with a message a learner can act on (the failing case and
what was expected of it, never the answer's code). Values compared here always come back from
the ranks as plain data: the oracle runs in the trusted process, never next to learner code.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
import types

import numpy as np

PG_TIMEOUT_S = 5.0  # a rank that waits this long for a message is stuck
RUN_TIMEOUT_S = 20.0  # backstop for run(): the harness's own group timeouts come first


def fmt(values, limit: int = 8) -> str:
    """A short, readable rendering of a list of numbers (for failure messages)."""
    try:
        items = [float(v) for v in np.asarray(values, dtype=float).ravel()]
    except (TypeError, ValueError):
        return repr(values)[:80]
    text = ", ".join(f"{v:.6g}" for v in items[:limit])
    return f"[{text}{', ...' if len(items) > limit else ''}]"


def case(n: int | None = None, op: str | None = None, **extra) -> str:
    """`world_size=4, length=7, op='sum'`: the case a failure message starts with."""
    parts = ([f"world_size={n}"] if n is not None else []) + [f"{k}={v}" for k, v in extra.items()]
    return ", ".join(parts + ([f"op={op!r}"] if op else []))


def ints(rng, shape) -> list:
    """Small random integers as plain Python lists (sums stay exact, messages readable)."""
    return rng.integers(-9, 10, size=shape).tolist()


def check_rows(out, expected: np.ndarray, what: str, where: str, unit: str = "GPU") -> None:
    """out must hold one row per `unit`, row i close to expected[i]."""
    if not isinstance(out, list | tuple) or len(out) != len(expected):
        got = len(out) if isinstance(out, list | tuple) else type(out).__name__
        raise AssertionError(f"{where}: expected one {what} per {unit} ({len(expected)}), "
                             f"got {got}")
    for i, (row, want) in enumerate(zip(out, expected, strict=True)):
        try:
            row_array = np.asarray(row, dtype=float)
        except (TypeError, ValueError):
            raise AssertionError(f"{where}: {unit} {i} holds {row!r}, not a list of numbers"
                                 ) from None
        if row_array.shape != np.shape(want):
            raise AssertionError(f"{where}: {unit} {i} holds {row_array.size} values, "
                                 f"expected {len(want)}")
        if not np.allclose(row_array, want, rtol=1e-9, atol=1e-9):
            raise AssertionError(f"{where}: {unit} {i} holds {fmt(row_array)}, "
                                 f"expected {fmt(want)}")


def check_close(got, want, where: str, what: str = "the result", rtol: float = 1e-9,
                atol: float = 1e-12) -> None:
    """A number (or array of numbers) close to the oracle's."""
    try:
        got_array = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        raise AssertionError(f"{where}: {what} is {got!r}, not a number") from None
    want_array = np.asarray(want, dtype=float)
    if got_array.shape != want_array.shape:
        raise AssertionError(f"{where}: {what} has shape {got_array.shape}, "
                             f"expected {want_array.shape}")
    if not np.allclose(got_array, want_array, rtol=rtol, atol=atol, equal_nan=True):
        shown = fmt(got_array) if got_array.ndim else f"{float(got_array):.6g}"
        wanted = fmt(want_array) if want_array.ndim else f"{float(want_array):.6g}"
        raise AssertionError(f"{where}: {what} is {shown}, expected {wanted}")


def tolerance(dtype) -> float:
    import torch

    return 1e-5 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-10


def check_tensor(out, expected, where: str, rank: int | None = None, what: str = "",
                 expected_is: str = "expected") -> None:
    """A tensor equal in shape and dtype to `expected` and close to it. `what` names the result
    (e.g. "the input gradient") for a function that returns several; `expected_is` introduces
    the oracle's value in the message ("the all-reduce is")."""
    import torch

    who = f"rank {rank} " if rank is not None else ""
    named = f" as {what}" if what else ""
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{where}: {who}returned {type(out).__name__}{named}, "
                             "not a tensor")
    if out.shape != expected.shape or out.dtype != expected.dtype:
        raise AssertionError(f"{where}: {who}returned a {out.dtype} tensor of shape "
                             f"{tuple(out.shape)}{named}, expected {expected.dtype} "
                             f"{tuple(expected.shape)}")
    tol = tolerance(expected.dtype)
    if not torch.allclose(out, expected, rtol=tol, atol=tol):
        raise AssertionError(f"{where}: {who}holds {fmt(out.tolist())}{named}, "
                             f"{expected_is} {fmt(expected.tolist())}")


# ---------------------------------------------------------------- trusted helpers


def with_trusted(fn, **names):
    """fn (the learner's function or class), but seeing the trusted `names` (correct helpers)
    in place of the notebook's globals of those names: a mistake in another exercise must not
    cost points (or mislead the diagnosis) in the one that uses it.

    Under the judge, `fn` stands for code in the sandbox: its `patched` ships the stand-ins
    with each request (autograder/judge/shipping.py). A function becomes a copy of itself with
    the names in its globals; a class, a subclass (so super() in it still works) whose methods
    that name them are such copies. Anything else comes back as it is.
    """
    if hasattr(fn, "patched"):  # the judge's stand-in for a function or class in the sandbox
        return fn.patched(**names)
    if isinstance(fn, types.FunctionType):
        return _function_with(fn, names)
    if not isinstance(fn, type):
        return fn
    methods = {}
    for key, member in vars(fn).items():
        method = getattr(member, "__func__", member)
        if isinstance(method, types.FunctionType) and set(names) & set(method.__code__.co_names):
            new = _function_with(method, names)
            methods[key] = type(member)(new) if member is not method else new
    if not methods:
        return fn
    return type(fn)(fn.__name__, (fn,), {**methods, "__module__": fn.__module__,
                                         "__qualname__": fn.__qualname__})


@contextlib.contextmanager
def trusted_globals(cls, **names):
    """While inside, on a rank: the methods of the learner's class `cls` see these trusted
    names as globals, in place (as the judge's runner does with `patched`), so that inherited
    methods (a super().__init__ of another notebook class) and the notebook helpers they call
    see them too; with_trusted's subclass reaches only cls's own methods."""
    saved = []
    for member in vars(cls).values():
        globs = getattr(getattr(member, "__func__", member), "__globals__", None)
        for name, value in names.items():
            if globs is not None and name in globs and not any(
                    g is globs and n == name for g, n, _ in saved):
                saved.append((globs, name, globs[name]))
                globs[name] = value
    try:
        yield
    finally:
        for globs, name, old in reversed(saved):
            globs[name] = old


def _function_with(fn: types.FunctionType, names: dict) -> types.FunctionType:
    patched = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                                 fn.__defaults__, fn.__closure__)
    patched.__kwdefaults__, patched.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return patched


# ---------------------------------------------------------------- real ranks


def on_ranks(harness, fn, n: int, *args):
    """harness(rank, n, fn, *args) on n ranks; their results in rank order.

    `harness` is a module-level function of an exercises module. Under the judge, `fn` stands
    for a function in the sandbox and the call goes through its runner; the harness travels
    there by value with what it uses (autograder/judge/shipping.py: the runner can import
    nothing of the grading side), so a harness imports nothing of the grading side in its body
    (import it at the top of its module), names no stand-in that the test of the function it
    runs must not reach (tests/judge/test_shipping.py), and uses no functools.cache (that pickles
    by name). Every failure is an AssertionError naming the case.
    """
    import distlab

    options = {"world_size": n, "init_group": False, "timeout": RUN_TIMEOUT_S}
    try:
        if hasattr(fn, "on_ranks"):
            return fn.on_ranks(harness, *args, **options)
        return distlab.run(harness, fn, *args, **options)
    except distlab.RankError as err:
        raise AssertionError(f"world_size={n}: {str(err).splitlines()[0]}") from None
    except (distlab.DeadlockError, TimeoutError):
        raise AssertionError(f"world_size={n}: the ranks were still waiting after "
                             f"{RUN_TIMEOUT_S:g} s (a deadlock?)") from None


@contextlib.contextmanager
def short_group(rank: int, world_size: int):
    """A gloo process group whose waits give up after PG_TIMEOUT_S, for a harness on the ranks:
    a learner's collective that hangs fails its case in seconds instead of stalling the grade.

    A FileStore rendezvous (a TCPStore client that comes before its server backs off ~0.5 s)."""
    import torch.distributed as dist

    store = rendezvous_file("check")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size,
                            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def rendezvous_file(tag: str) -> str:
    """A FileStore path that no earlier group used, for a group a harness makes on the ranks:
    the launcher's fresh store path of this call (settings.call_store()) and `tag`.
    Named after the zygote's pid and MASTER_PORT instead, a name came back (a port drawn
    again, a pid reused) to a file that ranks killed mid-call had left behind, and a rank dialled
    an old address of its peer: "Gloo connectFullMesh failed ... Connection refused". (Under
    torchrun, where there is no launcher, each run's processes are new: the old name.)"""
    from distlab.source import settings

    if store := settings.call_store():
        return f"{store}-{tag}"
    return os.path.join(tempfile.gettempdir(),
                        f"distlab-{tag}-{os.getppid()}-{os.environ['MASTER_PORT']}")


def rank_failure(err: BaseException, kind: str = "raised") -> tuple[str, str]:
    """(kind, one line) for an exception caught on a rank: "stuck" when a wait timed out,
    "broken" when a peer gave up and hung up on us, else `kind`."""
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    # gloo says "Timed out waiting ..." or, when the wait ends its connection to the peer,
    # "Application timeout caused pair closure"
    if "timed out" in text.lower() or "timeout caused" in text.lower():
        return "stuck", f"waited {PG_TIMEOUT_S:g} s for a message that never came"
    if "gloo/transport" in text or "onnection" in text or "Broken pipe" in text:
        return "broken", text
    return kind, text


# ---------------------------------------------------------------- the case loop
#
# Every real-rank test is one loop: the rank side runs each case in a short-timeout group and
# stops at the first failure (run_cases, called by the test's harness); the grading side turns
# the ranks' lists into one list of entries per case (each_case) and raises for the first rank
# that failed (first_rank_failure) before it compares the values with its oracle.


def run_cases(rank: int, world_size: int, cases: list, one_case) -> list:
    """Rank side: one_case(case) for each case, in a short group (short_group); per case
    ("ok", value) or (kind, text) as in rank_failure, stopping at the first failure. Nothing is
    judged here: under the judge this runs in the sandbox, next to the learner's code."""
    results = []
    with short_group(rank, world_size):
        try:
            for case in cases:
                try:
                    results.append(("ok", one_case(case)))
                except Exception as err:  # noqa: BLE001 - reported as the case's failure
                    results.append(rank_failure(err, "raised"))
                    break
        except Exception as err:  # noqa: BLE001 - a collective of ours failed: another rank did
            results.append(rank_failure(err, "broken"))
    return results


def each_case(harness, fn, n: int, cases: list, *args):
    """Grading side: harness(rank, n, fn, cases, *args) on n ranks (on_ranks), then
    (case, entries) for each case, entries[r] rank r's ("ok", value) or (kind, text); a rank that
    stopped before the case (it failed an earlier one, or was not in it) is ("broken", ...)."""
    results = on_ranks(harness, fn, n, cases, *args)
    for index, case in enumerate(cases):
        yield case, [r[index] if index < len(r) and r[index] is not None
                     else ("broken", "stopped early") for r in results]


def rank_values(where: str, entries: list) -> list:
    """Each rank's value of a case every rank must finish; raises for the first that did not."""
    first_rank_failure(where, entries)
    return [value for _, value in entries]


def first_rank_failure(where: str, entries: list) -> None:
    """entries[r] is rank r's ("ok", value) or (kind, text): raise for the rank that raised
    first, then one that was stuck (waiting on it), then one whose group broke."""
    for kind in ("raised", "stuck", "broken"):
        for rank, entry in enumerate(entries):
            if entry[0] == kind:
                raise AssertionError(f"{where}: rank {rank}: {entry[1]}")


# ---------------------------------------------------------------- what a rank did

# the shared recorder (autograder/exercises/recorder.py), for every real-rank test
from autograder.exercises.recorder import (  # noqa: E402, F401
    Record,
    calls_of,
    describe,
    live_tensor_bytes,
    nbytes,
    recording,
)
