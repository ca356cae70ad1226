"""Everything under tests/system/ is slow (real grading batches, Lab servers, a browser):
`make test` runs it, `make quick` (pytest -m "not slow") leaves it out.

`start_from_release` releases the course once per session (shared by the lanes); each grading
batch starts from a copy of that release and its gradebook instead of releasing again (about
11 s of CPU each)."""

import fcntl
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
    """A function that puts a release of every notebook (nbgrader's source/ and release/), and
    the gradebook that release filled, in a grading folder, as make grade's first run leaves
    them: make grade then finds the release current (its .source-sha256 stamps) and grades at
    once. The course is released once per session, by the first lane that needs it (about 11 s
    of CPU, most of it fixed: one notebook costs as much as seven); the other lanes wait for it
    and copy it. (make grade's own first release is tested by test_batch_timeouts.)"""
    # under xdist, every worker's basetemp is a folder of this session's one temporary root
    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "release"

    def release() -> Path:
        shared.mkdir(exist_ok=True)
        with open(shared / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (shared / "done").exists():
                env = dict(os.environ, DISTLAB_GRADING_DIR=str(shared),
                           PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
                code = ("from autograder.batch.cli import release_if_changed\n"
                        "from autograder.records import db_url\n"
                        "from distlab.source import paths\n"
                        "release_if_changed(paths.assignment_ids(), db_url())\n")
                result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                                        capture_output=True, text=True, timeout=900)
                assert result.returncode == 0, result.stdout + result.stderr
                (shared / "done").touch()
        return shared

    def copy_into(grading: Path) -> None:
        folder = release()
        for part in ("source", "release"):  # the formgrader looks for the assignment in source/
            shutil.copytree(folder / part, grading / part, dirs_exist_ok=True)
        shutil.copy2(folder / "gradebook.db", grading / "gradebook.db")

    return copy_into
