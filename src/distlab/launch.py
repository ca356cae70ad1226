"""Run a function on N real torch.distributed ranks with one call, from a notebook cell.

    import torch, torch.distributed as dist
    from distlab import run

    def total(rank, world_size):
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)            # the default group of world_size ranks is already there
        print("sum", t.item())        # shown as "[rank r] sum 10.0" after the call
        return t.item()

    run(total, world_size=4)          # -> [10.0, 10.0, 10.0, 10.0]

How: a zygote process (distlab._worker) imports torch once and forks the ranks. The ranks stay
alive between calls, process group included, so a second call costs milliseconds, not the
seconds of a fresh spawn. The notebook kernel itself is never forked (it may have run torch ops,
and a forked OpenMP hangs). fn travels by value with cloudpickle, so a function from a cell works.
Workers write stdout and stderr to a log file (log_dir()), never to the notebook: nbgrader gives
0 points to a cell that writes to stderr, and gloo is chatty there.
"""

from __future__ import annotations

import atexit
import linecache
import os
import pickle
import shutil
import tempfile

from distlab._pool import Pool
from distlab._ranks import device, dumps, is_learner_file
from distlab.blanks import require_filled_calls

__all__ = ["COLLECTIVES", "MIXED", "DeadlockError", "RankError", "device", "disown", "dumps",
           "is_learner_file", "log_dir", "log_path", "run", "shutdown", "start_ranks_launcher"]

COLLECTIVES = {"all_reduce", "barrier", "broadcast", "all_gather", "all_gather_single",
               "reduce_scatter", "reduce_scatter_single", "reduce", "gather", "scatter",
               "all_to_all", "all_to_all_single", "all_gather_object", "broadcast_object_list"}
MIXED = "cpu:gloo,cuda:nccl"

_pool = None
_log_dir = None


class RankError(Exception):
    """fn raised on a rank: `.rank`, `.exc_type`, and `.learner_traceback` (learner frames only)."""

    def __init__(self, message, rank=None, exc_type=None, learner_traceback=""):
        super().__init__(message)
        self.rank, self.exc_type, self.learner_traceback = rank, exc_type, learner_traceback


class DeadlockError(TimeoutError):
    """Not every rank returned in time; `.where` maps each stuck rank to what it was doing."""

    def __init__(self, message, where=None):
        super().__init__(message)
        self.where = where or {}


def run(fn, *args, world_size=4, timeout=30.0, init_group=True, backend=None, trace=False) -> list:
    """Run fn(rank, world_size, *args) on `world_size` ranks; return their results, in rank order.

    init_group: give fn a default process group of exactly world_size ranks (False: fn calls
    dist.init_process_group itself, MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE are set for it).
    backend: None picks "cpu:gloo,cuda:nccl" when torch sees a GPU per rank: on a GPU machine
    rank r runs on cuda:r (`distlab.device()`; torch.cuda.set_device(r), the group joined with
    device_id=cuda:r), collectives on CUDA tensors go through NCCL and on CPU tensors through
    gloo, and what a rank returns comes back on the CPU. With fewer GPUs than ranks, or none:
    "gloo" on the CPU. Passing "gloo" or "nccl" forces one. (The exercises' code makes CPU
    tensors, so in the notebooks they run on gloo either way; `python -m distlab.export`
    writes them as torchrun scripts that run on the GPUs.)
    trace: print every send/recv/isend/irecv each rank made, after the call.
    Raises RankError when fn raises on a rank, DeadlockError when ranks are still waiting after
    `timeout` seconds (None: wait forever). Prints of each rank appear after the call,
    prefixed "[rank r] ".
    """
    __tracebackhide__ = True  # pytest and IPython: the learner's call is the interesting frame
    require_filled_calls(fn, *args)
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    pool = _get_pool()  # starts the zygote first, so its torch import overlaps ours
    import torch

    gpus = torch.cuda.device_count()
    backend = backend or (MIXED if gpus >= world_size else "gloo")
    if backend not in ("gloo", "nccl", MIXED) or ("nccl" in backend and gpus < world_size):
        raise ValueError(f"backend {backend!r} cannot run {world_size} ranks here ({gpus} GPUs)")
    try:
        payload = dumps((fn, args))
    except Exception as exc:
        name = getattr(fn, "__name__", "fn")
        raise TypeError(f"cannot send {name} and its arguments to the ranks: {exc}") from None
    timeout = float("inf") if timeout is None else timeout
    live = _LiveLine(world_size)
    try:
        answers, where = pool.call(payload, world_size, backend, timeout, init_group, trace,
                                   live.update)
    finally:
        live.close()
    _print_outputs(world_size, answers, where)
    failed = sorted(rank for rank, (kind, _) in answers.items() if kind != "done")
    stuck = [rank for rank in range(world_size) if rank not in answers]
    if failed:
        raise _rank_error(answers, failed, stuck, fn)
    if stuck:
        raise _deadlock_error(timeout, answers, where, world_size)
    return [pickle.loads(answers[rank][1]["value"]) for rank in range(world_size)]


class _LiveLine:
    """In a notebook, a line that says the ranks are running, for how long, and which have not
    returned yet: shown once a call lasts SHOW_AFTER_S, then how long they ran. Nowhere else
    (a terminal, a test, the grader, a check whose output is captured) is it shown."""

    SHOW_AFTER_S = 1.0

    def __init__(self, world_size: int):
        self.world_size, self.handle, self.seconds = world_size, None, 0.0
        self.enabled = _in_notebook()

    def update(self, answered: list[int] | None, seconds: float) -> None:
        """answered: the ranks that returned so far (None: the ranks are still starting)."""
        if not self.enabled or (seconds < self.SHOW_AFTER_S and self.handle is None):
            return
        if answered is None:
            self._show(f"⏳ starting {self.world_size} rank(s): {seconds:.0f} s")
            return
        self.seconds = seconds
        waiting = [r for r in range(self.world_size) if r not in answered]
        text = f"⏳ {self.world_size} rank(s) running for {seconds:.0f} s"
        if answered:
            text += (f"; returned: rank {', '.join(map(str, answered))}; still running: "
                     f"rank {', '.join(map(str, waiting))}")
        self._show(text)

    def _show(self, text: str) -> None:
        from IPython.display import display

        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": f"{self.world_size} rank(s) ran for "
                                              f"{self.seconds:.0f} s"}, raw=True)


def _in_notebook() -> bool:
    """Is this a notebook kernel whose output goes to the notebook (not captured)?"""
    import sys

    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return (shell is not None and hasattr(shell, "kernel")
            and type(sys.stdout).__name__ == "OutStream")


def log_dir() -> str:
    """The folder of workers.log, where the ranks' stderr goes (gloo messages, warnings)."""
    global _log_dir
    if _log_dir is None:
        _log_dir = tempfile.mkdtemp(prefix="distlab-")
    return _log_dir


def log_path() -> str:
    return os.path.join(log_dir(), "workers.log")


def start_ranks_launcher() -> None:
    """Start the zygote and wait for its hello. The judge's runner, the grading kernel
    (distlab.kernel) and each worker of the strength check do this once, before any torch op,
    so the zygote is a fork of them (torch, and what else they imported, already loaded); the
    runner then forks a fresh process per graded function that shares the warm zygote."""
    global _pool
    shutdown()
    atexit.register(_at_exit)
    _pool = Pool(log_dir(), fork=True)
    _pool.wait_ready()


def shutdown() -> None:
    """Stop every rank and the zygote; the next run() starts them again."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


def disown() -> None:
    """In a process forked from one that had started the ranks: forget that launcher and its
    log folder (they are the parent's, to stop and remove); the next run() or
    start_ranks_launcher() starts this process's own."""
    global _pool, _log_dir
    _pool = _log_dir = None


def _get_pool() -> Pool:
    global _pool
    if _pool is None or not _pool.alive():
        if _pool is None:
            atexit.register(_at_exit)
        else:
            _pool.close()
        _pool = Pool(log_dir())
    return _pool


def _at_exit() -> None:
    shutdown()
    if _log_dir is not None:
        shutil.rmtree(_log_dir, ignore_errors=True)


def _print_outputs(world_size: int, answers: dict, where: dict) -> None:
    """Each rank's prints in rank order, then the send/recv trace (empty unless trace=True)."""
    bodies = [(answers.get(r, (None, None))[1] or where.get(r)) for r in range(world_size)]
    for rank, body in enumerate(bodies):
        for line in (body or {}).get("out", "").splitlines():
            print(f"[rank {rank}] {line}")
    for rank, body in enumerate(bodies):
        for op, peer, size in (body or {}).get("ops", []):
            arrow = "->" if op in ("send", "isend") else "<-"
            print(f"rank {rank} {arrow} {'any' if peer is None else peer} | {op} {size} B")


def _source(frame) -> str:
    """'in fn, line 9: buf = chunks[idx]', read here: a cell's source exists only in the kernel."""
    file, line, name = frame
    return f"in {name}, line {line}: {linecache.getline(file, line).strip()}"


def _rank_error(answers, failed, stuck, fn) -> RankError:
    rank = failed[0]
    kind, body = answers[rank]
    if kind == "died":
        error = RankError(f"rank {rank} died without an answer (a crash, or exit() in fn?); "
                          f"see {log_path()}", rank)
    else:
        info = body["value"]
        fn_file = getattr(getattr(fn, "__code__", None), "co_filename", None)
        frames = [f for f in info["frames"] if is_learner_file(f[0], fn_file)]
        head = f"rank {rank} raised {info['type']}"
        if info["message"]:
            head += f": {info['message']}"
        tb = "".join(f'  File "{f}", line {n}, in {name}\n    {linecache.getline(f, n).strip()}\n'
                     for f, n, name in frames)
        message = head + (f"\n  {_source(frames[-1])}" if frames else "")
        last = f"{info['type']}: {info['message']}" if info["message"] else info["type"]
        error = RankError(message, rank, info["type"], f"Traceback (learner frames):\n{tb}{last}")
    others = failed[1:]
    notes = [f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed too"] \
        if others else []
    if stuck:
        notes.append(f"ranks {', '.join(map(str, stuck))} were waiting and were stopped")
    if notes:
        error.args = (error.args[0] + "".join(f"\n  ({note})" for note in notes),)
    return error


def _deadlock_error(timeout, answers, where, world_size) -> DeadlockError:
    lines = [f"not every rank returned within {timeout:g} s; they may be waiting for each other:"]
    calls = []
    for rank in range(world_size):
        w = where.get(rank)
        if rank in answers:
            lines.append(f"  rank {rank}: finished")
            continue
        if w is None:
            lines.append(f"  rank {rank}: no answer (busy outside Python?)")
            continue
        call, learner = w["call"], w["learner"]
        if call is None and learner and ".wait(" in linecache.getline(learner[0], learner[1]):
            call = "wait"  # Work.wait() is C++: no Python frame of its own
        peer = "" if w["peer"] is None else "=".join(map(str, w["peer"]))
        what = f"waiting in {call}({peer})" if call else "running, not in a torch.distributed call"
        lines.append(f"  rank {rank}: {what}" + (f", {_source(learner)}" if learner else ""))
        calls.append(call)
    if calls and all(call == "recv" for call in calls):
        lines.append("hint: every rank is receiving, so nobody is sending")
    elif answers and any(call in COLLECTIVES for call in calls):
        lines.append("hint: some ranks finished while others wait in a collective: every rank "
                     "must make the same collective calls, in the same order")
    return DeadlockError("\n".join(lines), where)
