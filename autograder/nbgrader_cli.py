"""Run nbgrader's command line with this course's configuration, from any working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from distlab.source.paths import ROOT

# As root, nbgrader runs as PID 1 of its own PID namespace: when it ends or is killed, every
# process it started (kernels start in sessions of their own) ends with it.
CONTAIN = (["unshare", "--pid", "--fork", "--kill-child"]
           if os.geteuid() == 0 and shutil.which("unshare") else [])


def popen(argv: list[str], root: Path = ROOT, env: dict | None = None,
          **kwargs) -> subprocess.Popen:
    """Start argv in the course root, contained (CONTAIN), `env` added to the environment.

    nbgrader starts `alembic` as a program to create its database, so this interpreter's
    bin/ goes first on PATH (a venv that is not activated otherwise breaks it).
    """
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, **(env or {})}
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return subprocess.Popen([*CONTAIN, *argv], cwd=root, env=env, **kwargs)


def nbgrader(*args: str, root: Path = ROOT, check: bool = True, env: dict | None = None,
             timeout: float | None = None, **overrides: str):
    """`nbgrader ARGS` run in the course root; `overrides` set CourseDirectory traits, `env`
    adds environment variables, `timeout` stops it (subprocess.TimeoutExpired)."""
    flags = [f"--CourseDirectory.{key}={value}" for key, value in overrides.items()]
    command = [sys.executable, "-m", "nbgrader", *args, *flags]
    proc = popen(command, root, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # with CONTAIN, the kernel and everything else it started dies too
        proc.communicate()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result
