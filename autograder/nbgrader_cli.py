"""Run nbgrader's command line with this course's configuration, from any working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autograder.source import ROOT


def nbgrader(*args: str, root: Path = ROOT, check: bool = True, **overrides: str):
    """`nbgrader ARGS` run in the course root; `overrides` set CourseDirectory traits.

    nbgrader starts `alembic` as a program to create its database, so this interpreter's
    bin/ goes first on PATH (a venv that is not activated otherwise breaks it).
    """
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    flags = [f"--CourseDirectory.{key}={value}" for key, value in overrides.items()]
    command = [sys.executable, "-m", "nbgrader", *args, *flags]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result
