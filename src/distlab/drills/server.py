"""A warm checker for the command line: `python -m distlab.drills check` asks it over a Unix
socket, so that a check that runs the hidden test takes a warm judge's second, not a cold
start's ten.

The first `write` or `check` starts it (`python -m distlab.drills serve`, detached); it keeps
one Checker (a warm judge runner per notebook) and exits after IDLE_S seconds without a request.
Its socket lives in a folder only this user can enter, one per course checkout. Where it cannot
start, or DISTLAB_DRILLS_SERVER=0, `check` judges in its own process, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from distlab.drills.positions import digest
from distlab.source import settings
from distlab.source.paths import solutions_dir

IDLE_S = 900.0  # the server exits after this long without a request
START_S = 20.0  # how long a client waits for a server it started
REPLY_S = 300.0  # how long a client waits for a verdict


def socket_path() -> Path:
    folder = settings.drills_run_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder / f"checker-{digest(str(solutions_dir()))[:8]}.sock"


def enabled() -> bool:
    return settings.drills_server()


def _send(request: dict, timeout: float) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(socket_path()))
        conn.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the drill server hung up")
            data += chunk
    return json.loads(data)


def ask(request: dict, start: bool = True, timeout: float = REPLY_S) -> dict | None:
    """The server's reply, starting it if need be; None where there is none to be had."""
    if not enabled():
        return None
    try:
        return _send(request, timeout)
    except (OSError, ValueError):
        if not start:
            return None
    subprocess.Popen([sys.executable, "-m", "distlab.drills", "serve"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(OSError, ValueError):
            return _send(request, timeout)
    return None


def serve(idle: float = IDLE_S) -> None:
    """Answer requests until idle for `idle` seconds: {"op": "warm" | "check" | "stop"}."""
    from distlab.drills import get
    from distlab.drills.check import Checker
    from distlab.drills.positions import maskable

    path = socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        if _alive(path):
            return  # another server got there first
        path.unlink()
    listener.bind(str(path))
    listener.listen(8)
    listener.settimeout(idle)
    checker = Checker()
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            with conn:
                conn.settimeout(30)
                try:
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = conn.recv(1 << 16)
                        if not chunk:
                            break
                        data += chunk
                    request = json.loads(data)
                    op = request.get("op")
                    reply: dict = {"text_only": checker.text_only}
                    if op == "stop":
                        conn.sendall(json.dumps(reply).encode() + b"\n")
                        break
                    snippet = get(request["snippet"])
                    if op == "warm":
                        checker.warm(snippet)
                    elif op == "check":
                        by_span = {(p.start, p.end): p for p in maskable(snippet.source,
                                                                         snippet.name)}
                        chosen = [by_span[tuple(span)] for span in request["spans"]]
                        reply["verdicts"] = [[v.answer, v.status, v.why] for v in
                                             checker.check(snippet, chosen, request["answers"])]
                except Exception as err:  # noqa: BLE001 - the client gets why, the server lives
                    reply = {"error": f"{type(err).__name__}: {err}"}
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(reply).encode() + b"\n")
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        checker.close()


def _alive(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(str(path))
        except OSError:
            return False
    return True


def stop() -> bool:
    """Stop a running server; False when none runs."""
    return ask({"op": "stop"}, start=False, timeout=30) is not None
