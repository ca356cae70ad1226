"""`make test` runs the suite in two lanes (pytest-xdist: `-n 2 --dist loadgroup`). The grading
batches keep a core busy; much of the rest waits (on Lab, a browser, ranks starting, a deadlock's
timeout), and the other lane fills that time.

- Each worker grades in its own grading folder with its own sandbox uids, as two graders on one
  machine must: a uid's process limit, memory cgroup and kernel sockets belong to one sandbox
  at a time, and a grading folder's kernelspecs to one grader.
- Each module is one unit of work (its module fixtures are built once), and the three modules
  that grade in `make grade` batches are one unit: they share the session's release.
- The longest units go first (measured on 2 cores), so that the lanes end together.
"""

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist; else None
LANE_GRADING = HERE.parent / "grading" / "lanes" / str(WORKER)  # git-ignored, not under /tmp
if WORKER:
    os.environ["DISTLAB_SANDBOX_FIRST_UID"] = str(60100 + 64 * int(WORKER.removeprefix("gw")))
    shutil.rmtree(LANE_GRADING, ignore_errors=True)
    LANE_GRADING.mkdir(parents=True)
    os.environ["DISTLAB_GRADING_DIR"] = str(LANE_GRADING)

GRADING_BATCHES = ("system/test_adversarial.py", "system/test_grading.py",
                   "system/test_adversarial_notebooks.py")
# the other long units, longest first (seconds alone on 2 cores, in parentheses)
LONGEST_FIRST = (
    "system/test_browser.py",  # 210
    "system/test_blank_strength.py",  # 140
    "system/test_exchange.py",  # 110
    "test_collectives.py",  # 70
    "test_data_parallel.py",  # 60
    "system/test_batch_timeouts.py",  # 50
    "judge/test_judge.py",  # 50
    "test_pipeline_exercises.py",  # 50
    "test_tensor_parallel.py",  # 50
    "test_launch.py",  # 45
    "test_zero.py",  # 40
    "system/test_formgrader.py",  # 35
    "test_release.py",  # 30
    "system/test_lab.py",  # 30
    "judge/test_sandbox.py",  # 20
    "system/test_drills_browser.py",  # 20
    "test_cost_models.py",  # 20
)


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate((GRADING_BATCHES[0], *LONGEST_FIRST))}
    for name in GRADING_BATCHES:
        rank[name] = 0

    def module(item):
        return Path(item.fspath).relative_to(HERE).as_posix()

    for item in items:
        group = "grading_batches" if module(item) in GRADING_BATCHES else module(item)
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: rank.get(module(item), len(rank)))  # stable: order within


def pytest_sessionfinish(session):
    if WORKER:
        shutil.rmtree(LANE_GRADING, ignore_errors=True)
