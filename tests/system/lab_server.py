"""Start the learner's JupyterLab server the way `make lab` does, for tests.

`LabServer` runs `make lab` itself (the Makefile's recipe, flags and lab-config/), adding only
what a test needs through LAB_ARGS: no browser, a free port, a token, and optionally another
root folder. Every process it starts carries a marker in its environment, so `stop()` can
check that nothing (kernels, gloo ranks) is left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_collectives/01_collectives.ipynb"
MARKER = "DISTLAB_LAB_TEST"


# The browser for end-to-end tests: Debian's chromium (.ci/run installs it), driven by
# Playwright from PyPI (never `playwright install`).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def browser_marks() -> list:
    """pytest marks that skip a browser test, saying how to run it, where Chromium, Playwright
    or a Lab server is missing."""
    import importlib.util

    import pytest

    return [
        pytest.mark.skipif(not Path(CHROMIUM).exists(),
                           reason=f"no {CHROMIUM}: `apt-get install -y chromium` (as root) "
                           "runs the browser tests"),
        pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                           reason="playwright is not installed (pip install playwright)"),
        pytest.mark.skipif(unavailable() is not None, reason=str(unavailable())),
    ]


def wait_idle(page, timeout_ms: int) -> None:
    """Wait until Lab's status bar says the notebook's kernel is idle."""
    page.wait_for_function(
        "() => /\\| Idle\\b/.test(document.querySelector('#jp-main-statusbar')?.innerText ?? '')",
        timeout=timeout_ms)


def unavailable() -> str | None:
    """Why `make lab` cannot run here, or None."""
    if shutil.which("make") is None:
        return "`make` is not installed"
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        return "no .venv/bin/jupyter (run `make setup` first)"
    return None


def lab_command(lab_args: list[str] | None = None) -> list[str]:
    # `-o .venv/.installed`: never reinstall the venv from a test, whatever its timestamp.
    cmd = ["make", "--no-print-directory", "-o", ".venv/.installed", "lab"]
    return cmd + ([f"LAB_ARGS={shlex.join(lab_args)}"] if lab_args else [])


def recipe() -> str:
    """The shell command `make lab` runs (printed by `make -n`, not run)."""
    return subprocess.run(lab_command() + ["-n"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _marked_pids(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (this test's servers and their children)."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


class LabServer:
    """`make lab` (the learner's Lab), or with `instructor=True` the plain `jupyter lab` an
    instructor starts in the course root (formgrader and all); `env` adds variables."""

    def __init__(self, workdir: Path, root_dir: Path | None = None, instructor: bool = False,
                 env: dict | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runtime = self.workdir / "runtime"
        self.log_path = self.workdir / "lab.log"
        self.token = secrets.token_hex(16)
        self.marker = f"{MARKER}={uuid.uuid4().hex}"
        args = ["--no-browser", f"--port={_free_port()}", f"--IdentityProvider.token={self.token}"]
        if root_dir is not None:
            args.append(f"--ServerApp.root_dir={root_dir}")
        # A learner types `make lab` in a shell: no outer make's flags, a runtime dir of our own.
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        # ... and a Lab workspace of its own: tabs a test left open never reopen in the next
        env.update({"JUPYTER_RUNTIME_DIR": str(self.runtime), MARKER: self.marker,
                    "JUPYTERLAB_WORKSPACES_DIR": str(self.workdir / "workspaces"), **extra})
        if instructor:
            bindir = ROOT / ".venv" / "bin"
            env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
            command = [str(bindir / "jupyter"), "lab", *args]
            command += ["--allow-root"] if os.geteuid() == 0 else []
        else:
            command = lab_command(args)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.url = None
        self._stopped = False

    # ---- start and stop ----

    def wait_ready(self, timeout: float = 90) -> LabServer:
        """Wait until the server answers; its port and token come from its jpserver-*.json."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"`make lab` exited with {self.proc.returncode}:\n{self.log()}")
            for info in self.runtime.glob("jpserver-*.json"):
                try:
                    data = json.loads(info.read_text())
                except (OSError, ValueError):
                    continue
                self.url = f"http://127.0.0.1:{data['port']}"
                try:
                    self.api("GET", "/api/status")
                    return self
                except OSError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"JupyterLab did not answer within {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> list[int]:
        """Shut down kernels and server; return the pids of marked processes still alive."""
        if self._stopped:
            return []
        self._stopped = True
        if self.url and self.proc.poll() is None:
            try:
                for session in self.api("GET", "/api/sessions"):
                    self.api("DELETE", f"/api/sessions/{session['id']}")
                for kernel in self.api("GET", "/api/kernels"):
                    self.api("DELETE", f"/api/kernels/{kernel['id']}")
                self.api("POST", "/api/shutdown")
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        self._log.close()
        deadline = time.monotonic() + 15
        while (left := _marked_pids(self.marker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:  # ours (they carry our marker): do not leave them to the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return left

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # ---- REST ----

    def api(self, method: str, route: str, body=None, timeout: float = 120, **params):
        url = self.url + route + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Authorization": f"token {self.token}"})
        if method == "POST" and data is None:
            request.data = b""
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def validate(self, path: str = NOTEBOOK) -> dict:
        """What nbgrader's Validate button asks: POST /assignments/validate?path=<path>."""
        return self.api("POST", "/assignments/validate", path=path, timeout=300)

    # ---- a kernel over the websocket, as the browser talks to it ----

    def execute(self, kernel_id: str, session_id: str, code: str, timeout: float = 120) -> dict:
        """Run `code` in a kernel through /api/kernels/<id>/channels; return the reply, its
        outputs (stream texts by name, error names) and the last execution state."""
        return asyncio.run(self._execute(kernel_id, session_id, code, timeout))

    async def _execute(self, kernel_id, session_id, code, timeout):
        from tornado.websocket import websocket_connect

        ws_url = (self.url.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels?"
                  + urllib.parse.urlencode({"session_id": session_id, "token": self.token}))
        ws = await asyncio.wait_for(websocket_connect(ws_url), timeout)
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": session_id, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        result = {"reply": None, "stdout": "", "stderr": "", "errors": [], "state": None}
        deadline = time.monotonic() + timeout
        try:
            while result["reply"] is None or result["state"] != "idle":
                raw = await asyncio.wait_for(ws.read_message(), deadline - time.monotonic())
                if raw is None:
                    raise ConnectionError("the kernel websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "execute_reply":
                    result["reply"] = content
                elif kind == "status":
                    result["state"] = content["execution_state"]
                elif kind == "stream":
                    result[content["name"]] += content["text"]
                elif kind == "error":
                    result["errors"].append(f"{content['ename']}: {content['evalue']}")
        finally:
            ws.close()
        return result
