"""The judge: run a learner's functions in a sandboxed runner, outside the learner's kernel.

The judge's client (`Runner`, `Remote`) takes the submitted notebook's code as text, starts
`autograder.judge.runner` in the sandbox to define it, and stands in for the learner's
functions: a hidden test given a `Remote` (autograder.grade_cell.verdicts) runs in the grading
process (inputs, oracle, verdict), only the learner's calls run in the runner, and only plain
values come back. Locating the wrong blank works the same way, each candidate in a fresh
runner, so no answer ever reaches the process that holds the learner's first results.

The package drives no grading: it imports nothing of the course above it (no hidden test,
reference or grade_cell; an import contract in pyproject.toml holds it), so the runner's
sandbox, which shows this folder alone of the grading side, holds nothing secret.
"""

from __future__ import annotations

import builtins
import math
import os
import signal
import subprocess
import sys
import time

from autograder.judge import shipping, wire
from distlab.source.paths import ROOT

CALL_TIMEOUT = 60.0  # s per call of a learner's function; GradingLimits.call_seconds sets it
START_TIMEOUT = 120.0  # s for the runner to import torch and start the ranks' launcher


class RemoteError(Exception):
    """The learner's function raised something that has no builtin twin here."""


def _raise(reply: dict):
    name, message = reply.get("error", "Error"), str(reply.get("message", ""))
    if name in ("RankError", "DeadlockError", "BlankNotFilled"):
        import distlab

        raise getattr(distlab, name)(message)
    cls = getattr(builtins, name, None) if reply.get("builtin") else None
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not SystemExit:
        raise cls(message)
    raise RemoteError(f"{name}: {message}")


def runner_command(slot: int = 0, limits=None) -> list[str]:
    """The runner's command line: sandboxed (private network too) where the sandbox works,
    with `limits` (a sandbox.Limits; default: the sandbox's)."""
    from autograder.judge import sandbox

    argv = [sys.executable, "-m", "autograder.judge.runner"]
    if not sandbox.available():
        return argv
    hidden, readable = runner_view()
    # `autograder` without its __init__.py (hidden) is a namespace package: found on the path,
    # not by the editable install's finder, which wants the __init__.py
    env = {**sandbox.default_env(), "PYTHONPATH": str(ROOT)}
    return sandbox.wrap(argv, uid=sandbox.uid_for(slot), network=False, env=env,
                        limits=limits or sandbox.Limits(), hidden=hidden, readable=readable)


AUTOGRADER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's folder


def grading_side(autograder: str = AUTOGRADER) -> list[str]:
    """Folders no learner code may see (the sandbox's `hidden`): the sandbox's usual ones, the
    course repository whole (hidden tests, references, shortcut suites with their honest
    answers, the solved sources, the git history), and the autograder package where pip
    copied it outside the repository (a non-editable install puts it, hidden tests and all,
    into the .venv that the sandbox must show)."""
    from autograder.judge import sandbox

    hidden = [*sandbox.default_hidden(), str(ROOT)]
    return hidden + ([autograder] if not autograder.startswith(f"{ROOT}{os.sep}") else [])


def kernel_view() -> tuple[list[str], list[str]]:
    """(hidden, readable) folders of the grading kernel's sandbox: an allowlist. Of the course,
    only distlab (src/) is shown, read-only, with the Python environment where it lives inside
    (.venv) and the one submission being graded (its working directory); the grading side is
    not importable there (`autograder` is not found: the judge decides graded cells outside,
    and the kernel's notices find no judge and say nothing). So a submission cannot read a
    hidden test, a reference or a shortcut's honest answer and print it into its feedback."""
    return grading_side(), [str(ROOT / "src")]


def runner_view() -> tuple[list[str], list[str]]:
    """(hidden, readable) folders of the runner's sandbox: the kernel's allowlist
    (kernel_view) and the judge's own package (autograder/judge/: the runner, its wire and
    what the judge ships), read-only. So no hidden test, oracle, reference, stand-in, mutant
    or test suite can be imported or read next to the learner's code: the rank harnesses and
    stand-ins a request needs travel in it (shipping.py). `autograder` is a namespace package
    there."""
    hidden, readable = kernel_view()
    return hidden, [*readable, os.path.dirname(os.path.abspath(__file__))]


class Runner:
    """One `autograder.judge.runner` process for one submission's code: torch and the ranks'
    launcher are loaded once, and each `fork(candidate)` gives the next calls a fresh child
    process that defines the cells (and the candidate: the learner's code with some reference
    answers in it), so that no graded function sees what another left behind.

    Starting may take `start_seconds`; each call `call_seconds`; all of them together must end
    by `deadline` (a time.monotonic() value): after it every request fails at once, without
    starting anything.
    """

    def __init__(self, cells: list[str], slot: int = 0, limits=None,
                 call_seconds: float = CALL_TIMEOUT, deadline: float = math.inf,
                 start_seconds: float = START_TIMEOUT):
        self._cells, self._candidate = cells, None
        self._slot, self._limits = slot, limits
        self.call_seconds, self.deadline, self.start_seconds = call_seconds, deadline, start_seconds
        self._proc, self._loaded = None, False

    def fork(self, candidate: str | None = None) -> None:
        """From the next call on, a fresh child defines the cells, then `candidate`."""
        self.end()
        self._candidate = candidate

    def end(self) -> None:
        """End the current child (the runner stays warm for the next fork)."""
        if self._loaded:
            self._loaded = False
            self._exchange({"op": "end"}, self.call_seconds, "the runner did not end a call")

    def start(self) -> None:
        """Start the runner now rather than at the first call (it imports torch: seconds)."""
        if self._proc is None:
            self._start(min(self.start_seconds, self.deadline - time.monotonic()))

    def _start(self, timeout: float) -> None:
        self._proc = subprocess.Popen(
            runner_command(self._slot, self._limits), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd="/", start_new_session=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"})
        self._exchange({"op": "ready"}, timeout, f"the runner did not start within {timeout:g} s")

    def ask(self, request: dict, timeout: float | None = None):
        """Send one request; return the decoded value, or raise what the learner's code did."""
        timeout = self.call_seconds if timeout is None else timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.close()
            raise TimeoutError("the time for grading this function ran out")
        if timeout >= left:
            timeout, why = left, "the time for grading this function ran out"
        else:
            why = f"the function did not return within {timeout:g} s"
        if self._proc is None:
            self._start(min(self.start_seconds, left))
        if not self._loaded:
            self._loaded = True
            self._exchange({"op": "load", "cells": self._cells, "candidate": self._candidate},
                           timeout, why)
        return self._exchange(request, timeout, why)

    def _exchange(self, request: dict, timeout: float, why: str):
        proc = self._proc
        try:
            proc.stdin.write(wire.dumps(request))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            raise RuntimeError("the code under test stopped the process running it") from None
        try:
            line = wire.read_line(proc.stdout, time.monotonic() + timeout)
        except wire.Closed:
            self.close()
            raise RuntimeError("the code under test stopped the process running it") from None
        except ValueError:
            self.close()
            raise RuntimeError("the function returned far too much data") from None
        if line is None:
            self.close()
            raise TimeoutError(why)
        try:
            reply = wire.loads(line)
            if "ok" in reply:
                return wire.decode(reply["ok"])
            if "ended" in reply:  # the child is gone: asked to end, or it ended itself
                self._loaded = False
                if request["op"] == "end":
                    return None
                raise RuntimeError("the code under test stopped the process running it")
        except (ValueError, TypeError, KeyError) as err:
            self.close()
            raise RuntimeError(f"unreadable result from the code under test ({err})") from None
        _raise(reply)

    def close(self):
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._proc, self._loaded = None, False

    def __del__(self):
        self.close()


class Remote:
    """Stands in for the learner's function `name`; its calls run in `runner`."""

    def __init__(self, runner: Runner, name: str, patch: dict | None = None):
        self.__name__ = name
        self._runner, self._patch = runner, patch or {}

    def __call__(self, *args, **kwargs):
        return self._runner.ask({"op": "call", "function": self.__name__, "patch": self._patch,
                                 "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)})

    def on_ranks(self, harness, *args, **options):
        """distlab.run(harness, <learner fn>, *args, **options), run in the runner."""
        timeout = options.get("timeout") or self._runner.call_seconds
        return self._runner.ask({
            "op": "ranks", "function": self.__name__, "patch": self._patch,
            "harness": shipping.pack(harness),
            "args": wire.encode(list(args)), "options": options}, timeout=timeout + 15)

    def patched(self, **names):
        """This function with notebook globals `names` replaced by trusted functions (shipped
        with each request: the runner cannot import them)."""
        patch = {k: shipping.pack(v) for k, v in names.items()}
        return Remote(self._runner, self.__name__, {**self._patch, **patch})

    def close(self):
        """The test is over: end the process that ran it (the runner stays warm)."""
        self._runner.end()
