"""Running the blank-strength check's tasks (a cell source under its hidden tests) in worker
processes forked from this one once the references, the hidden tests and torch are imported;
each worker keeps its own rank launcher warm for the real-rank tests, and one that is still
running past its alarm and KILL_GRACE_S is killed and replaced."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, Pipe, wait

from autograder.strength.plan import Outcome, namespace
from distlab.source.definitions import definitions

KILL_GRACE_S = 15.0  # past its alarm, a worker that does not answer is killed
MEMORY_BYTES = 4 << 30  # a worker's heap, where no GPU is: a list grown forever fails a mutant


class _Alarm(BaseException):
    """A mutant's time is up (a deadlock, an endless loop): not an Exception, so no `except
    Exception` in the code under test swallows it."""


def _ring(signum, frame):
    raise _Alarm


def run_task(task: dict) -> Outcome:
    """One cell source under its hidden tests, for each seed, within task["timeout"]. A mutant
    stops at the first seed it passes (it survives); an accepted answer at the first it fails."""
    from autograder.exercises import test_for
    from autograder.grade_cell import _failure, seed_for

    signal.signal(signal.SIGALRM, _ring)
    signal.setitimer(signal.ITIMER_REAL, task["timeout"])
    try:
        defined = dict(namespace(task["assignment"], task["solutions"]))
        try:
            exec(compile(definitions(task["source"]), "<mutant>", "exec"), defined)
        except Exception as err:  # noqa: BLE001 - a mutant that breaks the definitions fails
            return Outcome(False, f"{type(err).__name__}: {err}".splitlines()[0])
        reason = None
        for student in task["students"]:
            failed = None
            for name in task["tests"]:
                failed = _failure(test_for(name), lambda _, name=name: defined[name], None,
                                  seed_for(name, student))
                if failed is not None and failed.startswith(_Alarm.__name__):
                    raise _Alarm  # _failure caught it: nothing may run on, unwatched
                if failed is not None:
                    break
            if (failed is None) != task["expect_pass"]:
                return Outcome(failed is None, failed)
            reason = reason or failed
        return Outcome(reason is None, reason)
    except _Alarm:
        return Outcome(False, f"still running after {task['timeout']:.1f} s", timed_out=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _serve(conn: Connection, folder: str) -> None:
    """A worker: run tasks until the parent hangs up. Its temporary files, the rank launcher's
    included, live in `folder`."""
    import distlab.launch

    distlab.launch.disown()  # a launcher the parent had started is the parent's
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    os.makedirs(folder, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    if not os.path.exists("/dev/nvidiactl"):  # CUDA maps more than any heap limit allows
        with contextlib.suppress(ValueError, OSError):
            hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
            limit = MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_BYTES, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    # The ranks' zygote as a fork of this worker: the ranks find the hidden tests' modules
    # imported (the parent imported them), not importing them again at every call (a
    # `python -m distlab._worker` zygote has only torch and distlab)
    distlab.launch.start_ranks_launcher()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        started = time.monotonic()
        try:
            outcome = run_task(task)
        except BaseException as err:  # noqa: BLE001 - the worker answers whatever happens
            outcome = Outcome(False, f"{type(err).__name__}: {err}".splitlines()[0])
        outcome.seconds = time.monotonic() - started
        conn.send((task["id"], outcome))
    distlab.launch.shutdown()


class Workers:
    """Worker processes forked from this one (torch, the references and the hidden tests are
    imported already). A worker that dies or stops answering is killed and replaced."""

    def __init__(self, count: int):
        self.folder = tempfile.mkdtemp(prefix="distlab-strength-")
        self.spawned = 0
        self.slots: list[dict] = []
        for _ in range(max(1, count)):
            self.slots.append(self._spawn())

    def _spawn(self) -> dict:
        self.spawned += 1
        mine, theirs = Pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                mine.close()
                for slot in self.slots:
                    slot["conn"].close()
                _serve(theirs, os.path.join(self.folder, f"w{self.spawned}"))
            except BaseException:  # noqa: BLE001 - never return into the parent's code
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        return {"pid": pid, "conn": mine, "task": None}

    def _replace(self, index: int) -> None:
        slot = self.slots[index]
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot["pid"], signal.SIGKILL)  # its launcher and ranks die with it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(slot["pid"], 0)
        slot["conn"].close()
        self.slots[index] = self._spawn()

    def run(self, tasks: list[dict]) -> Iterator[tuple]:
        """(task id, Outcome) of each task, as they finish."""
        pending = list(reversed(tasks))
        while pending or any(slot["task"] for slot in self.slots):
            for slot in self.slots:
                if slot["task"] is None and pending:
                    slot["task"] = pending.pop()
                    slot["started"] = time.monotonic()
                    slot["deadline"] = slot["started"] + slot["task"]["timeout"] + KILL_GRACE_S
                    slot["conn"].send(slot["task"])
            busy = [slot for slot in self.slots if slot["task"]]
            left = min(slot["deadline"] for slot in busy) - time.monotonic()
            ready = wait([slot["conn"] for slot in busy], max(0.0, left))
            for index, slot in enumerate(self.slots):
                task = slot["task"]
                if task is None:
                    continue
                if slot["conn"] in ready:
                    try:
                        answer = slot["conn"].recv()
                    except (EOFError, OSError):
                        why = "its worker died (a crash, or out of memory)"
                    else:
                        slot["task"] = None
                        yield answer
                        continue
                elif time.monotonic() > slot["deadline"]:
                    why = "its worker stopped answering"
                else:
                    continue
                self._replace(index)
                yield task["id"], Outcome(False, why, True, time.monotonic() - slot["started"])

    def close(self) -> None:
        for slot in self.slots:
            slot["conn"].close()  # the worker sees EOF, stops its launcher and exits
        deadline = time.monotonic() + 10
        for slot in self.slots:
            while time.monotonic() < deadline and not os.waitpid(slot["pid"], os.WNOHANG)[0]:
                time.sleep(0.05)
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError, ChildProcessError):
                    os.kill(slot["pid"], signal.SIGKILL)
                    os.waitpid(slot["pid"], 0)
        for _ in range(3):  # a rank killed with its worker may still be writing there
            shutil.rmtree(self.folder, ignore_errors=True)
            if not os.path.exists(self.folder):
                break
            time.sleep(0.2)
