"""The notebook side of `distlab.launch`: the zygote process and the connections to the ranks.

One `Pool` per notebook process. It starts `python -m distlab._worker` (the zygote), asks it to
fork `world_size` ranks, and keeps them, with their process group, for as long as calls succeed
with the same world size and backend. After any failure it has the zygote kill and reap the
ranks, so a stale message or a half-dead group never reaches the next call. See _worker.py for
the messages on the wire.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait

GRACE_S = 1.0  # once a rank has failed, how long the others get before we stop them
WHERE_S = 1.0  # how long a stuck rank gets to say where it is
START_S = 120.0  # zygote import and fork; not counted in the learner's `timeout`
TICK_S = 0.5  # how often a notebook's live line is updated while ranks run
SUN_PATH_MAX = 107  # bytes in a Unix socket's path (Linux's sun_path, less its final NUL)


class Pool:
    """The zygote, the connections to the current ranks, and whether their group is usable."""

    def __init__(self, folder: str, fork: bool = False):
        self.folder, self.log = folder, os.path.join(folder, "workers.log")
        self.path = os.path.join(folder, f"p{time.monotonic_ns()}.sock")
        if len(os.fsencode(self.path)) > SUN_PATH_MAX:  # a long TMPDIR: bind where it fits
            self.path = os.path.join(tempfile.mkdtemp(prefix="distlab-", dir="/tmp"),
                                     os.path.basename(self.path))
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        with open(self.log, "ab") as log:
            if fork:
                self.zygote = ForkedZygote(self.path, log.fileno())
            else:
                self.zygote = subprocess.Popen(
                    [sys.executable, "-m", "distlab._worker", self.path, str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=worker_env(),
                    start_new_session=True)  # Ctrl-C in a terminal reaches us, not the ranks
        self.control: Connection | None = None
        self.ranks: list[Connection] = []
        self.pids: list[int] = []
        self.shape = None  # (world_size, backend) of the live ranks
        self.group_ok = False  # the ranks hold a clean default group of that size
        self.calls = 0
        self.closed = False
        self.owner = os.getpid()  # a process forked from the owner may use the pool, not reap

    def alive(self) -> bool:
        return not self.closed and self.zygote_alive()

    def zygote_alive(self) -> bool:
        if os.getpid() == self.owner:
            return self.zygote.poll() is None
        # forked from the owner (the judge's runner): the zygote is not our child to wait for
        try:
            with open(f"/proc/{self.zygote.pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def wait_ready(self, tick=None) -> None:
        """Wait for the zygote's hello (torch imported), so a process forked from this one can
        use the pool without starting its own."""
        if self.control is None:
            _, self.control = self.accept(time.monotonic() + START_S, tick)

    def call(self, payload: bytes, world_size, backend, timeout, init_group, trace,
             progress=None) -> tuple:
        """Run one call; (answers, where): rank -> (kind, body) and rank -> where it is stuck.
        progress(answered ranks, seconds) is called about twice a second while ranks run, and
        progress(None, seconds) while they start."""
        try:
            self.start_ranks(world_size, backend, progress)
        except BaseException:
            self.close()
            raise
        self.calls += 1
        fresh = not init_group or not self.group_ok
        # A new group gets a new store: a FileStore, because TCPStore clients that come before
        # rank 0's server back off for ~0.5 s. MASTER_PORT is for fns that init_process_group.
        header = {"sys_path": sys.path, "cwd": os.getcwd(), "init_group": init_group,
                  "trace": trace, "port": free_port() if fresh else None,
                  "store": os.path.join(self.folder, f"store{time.monotonic_ns()}")}
        message = pickle.dumps(("run", self.calls, header, payload))
        try:
            for conn in self.ranks:
                conn.send_bytes(message)
            answers = self.collect(timeout, progress)
            where = self.ask_where(answers)
        except BaseException:  # Stop pressed (KeyboardInterrupt) or a broken pool
            with contextlib.suppress(Exception):
                self.stop_ranks()
            raise
        if len(answers) < world_size or any(kind != "done" for kind, _ in answers.values()):
            self.stop_ranks()  # a group that may hold stale messages never serves another call
        else:
            self.group_ok = init_group and all(body["group"] for _, body in answers.values())
        return answers, where

    def start_ranks(self, world_size: int, backend: str, progress=None) -> None:
        if self.ranks and self.shape == (world_size, backend):
            return  # warm: same ranks, same group
        started = time.monotonic()
        tick = progress and (lambda: progress(None, time.monotonic() - started))
        self.wait_ready(tick)
        deadline = time.monotonic() + START_S
        self.stop_ranks()
        self.control.send_bytes(pickle.dumps(("spawn", world_size, backend)))
        ranks = {}
        while len(ranks) < world_size:
            (_, rank, pid), conn = self.accept(deadline, tick)
            ranks[rank] = conn, pid
        self.ranks = [ranks[r][0] for r in range(world_size)]
        self.pids = [ranks[r][1] for r in range(world_size)]
        self.shape = world_size, backend

    def accept(self, deadline: float, tick=None) -> tuple:
        """The next process to connect, and its hello; fails fast if the zygote has died.
        tick() is called every quarter second of waiting."""
        while True:
            if tick is not None:
                tick()
            if not self.zygote_alive():
                raise RuntimeError(f"the rank launcher stopped; see {self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the ranks did not start in {START_S:g} s; see {self.log}")
            self.listener.settimeout(0.25)
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            sock.setblocking(True)
            conn = Connection(sock.detach())
            return pickle.loads(conn.recv_bytes()), conn

    def collect(self, timeout: float, progress=None) -> dict:
        """rank -> (kind, body) for each rank that answered before the deadline."""
        pending = {conn: rank for rank, conn in enumerate(self.ranks)}
        answers, start = {}, time.monotonic()
        deadline = start + timeout
        while pending and (left := deadline - time.monotonic()) > 0:
            if progress is not None:
                progress(sorted(answers), time.monotonic() - start)
            for conn in wait(list(pending), min(left, TICK_S if progress else 3600)):
                kind, body = self.receive(conn)
                answers[pending.pop(conn)] = kind, body
                if kind != "done":  # the others may be blocked on this rank: short grace
                    deadline = min(deadline, time.monotonic() + GRACE_S)
        return answers

    def receive(self, conn: Connection) -> tuple:
        while True:
            try:
                kind, call_id, _, body = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return "died", None
            if call_id == self.calls and kind != "where":
                return kind, body

    def ask_where(self, answers: dict) -> dict:
        """rank -> where it is, for each rank that has not answered; late answers join answers."""
        pending = {conn: rank for rank, conn in enumerate(self.ranks) if rank not in answers}
        for conn in pending:
            with contextlib.suppress(OSError):
                conn.send_bytes(pickle.dumps(("where", self.calls)))
        where, deadline = {}, time.monotonic() + WHERE_S
        while pending and (left := deadline - time.monotonic()) > 0:
            for conn in wait(list(pending), left):
                try:
                    kind, call_id, rank, body = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    pending.pop(conn)
                    continue
                if call_id != self.calls:
                    continue
                if kind == "where":
                    where[rank] = body
                    pending.pop(conn)
                else:
                    answers[rank] = kind, body  # it finished just as time ran out
        return {rank: w for rank, w in where.items() if rank not in answers}

    def stop_ranks(self) -> None:
        """Kill the ranks and wait until the zygote has reaped them: no zombie, no stale message."""
        for conn in self.ranks:
            conn.close()
        self.ranks, self.pids, self.shape, self.group_ok = [], [], None, False
        if self.control is not None:
            self.control.send_bytes(pickle.dumps(("kill",)))
            if not self.control.poll(10):
                raise RuntimeError("the rank launcher does not answer")
            self.control.recv_bytes()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self.stop_ranks()
        if self.control is not None:
            self.control.close()  # the zygote sees EOF, kills what is left and exits
        try:
            self.zygote.wait(5 if self.control is not None else 0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.zygote.pid, signal.SIGKILL)  # its whole session: ranks included
            self.zygote.wait()
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if os.path.dirname(self.path) != self.folder:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.path))


class ForkedZygote:
    """The zygote as a fork of this process, for a process that has imported torch and run no
    torch op yet (the judge's runner): one torch import fewer than `python -m distlab._worker`.
    Answers what Pool asks of a subprocess.Popen: pid, poll() and wait()."""

    def __init__(self, path: str, log_fd: int):
        parent = os.getpid()
        env = worker_env()
        self.pid = os.fork()
        if self.pid == 0:  # the zygote: the log for output, nothing of the parent's pipes
            try:
                os.setsid()  # as start_new_session: Ctrl-C reaches the parent, not the ranks
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                env.pop("PYTHONPATH")  # the same interpreter: this distlab is imported
                os.environ.update(env)
                from distlab import _worker

                _worker.zygote(path, parent)
            finally:
                os._exit(0)
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("zygote", timeout)
            time.sleep(0.01)
        return self.returncode


def worker_env() -> dict:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # find this very distlab
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    # One thread per library: the zygote must have no threads when it forks, and 8 ranks share
    # 2 cores. Loopback for gloo, which otherwise may warn that it cannot resolve the hostname.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1")
    if os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
