"""Everything under tests/system/ is slow (real grading batches, Lab servers, a browser):
`make test` runs it, `make quick` (pytest -m "not slow") leaves it out.

`start_from_release` releases the course once per session (per lane); each grading batch starts
from a copy of that release and its gradebook instead of releasing every notebook again (about
8 s each)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def start_from_release(tmp_path_factory):
    """A function that puts a release of the notebooks `ids` (default: every one), and the
    gradebook that release filled, in a grading folder, as make grade's first run leaves them:
    make grade then finds the release current (its .source-sha256 stamps) and grades at once.
    Each set of ids is released once per session (test_adversarial needs 01 alone)."""
    released: dict[tuple, Path] = {}

    def release(ids: tuple) -> Path:
        if ids not in released:
            folder = tmp_path_factory.mktemp("released")
            env = dict(os.environ, DISTLAB_GRADING_DIR=str(folder),
                       PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
            code = ("import sys\n"
                    "from autograder.batch.cli import db_url, release_if_changed\n"
                    "release_if_changed(sys.argv[1:], db_url())\n")
            result = subprocess.run([sys.executable, "-c", code, *ids], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, result.stdout + result.stderr
            released[ids] = folder
        return released[ids]

    def copy_into(grading: Path, ids: tuple | None = None) -> None:
        from distlab.source import paths

        folder = release(tuple(ids or paths.assignment_ids()))
        shutil.copytree(folder / "release", grading / "release")
        shutil.copy2(folder / "gradebook.db", grading / "gradebook.db")

    return copy_into
