"""`make test` runs the suite in three lanes (pytest-xdist: `-n 3`), on a 2-core machine too:
much of the suite waits (on Lab and the browser, ranks starting, a deadlock's timeout, a kernel
between cells), and a third lane fills that time; the grading batches keep a core busy.

- Each worker grades in its own grading folder with its own sandbox uids, as two graders on one
  machine must: a uid's process limit, memory cgroup and kernel sockets belong to one sandbox
  at a time, and a grading folder's kernelspecs to one grader.
- Each module is one unit of work (its module fixtures are built once). The grading batches
  were one unit once, sharing one release of the course; that unit (about 19 minutes in a
  lane) was the suite's critical path, so each now releases what it grades in its own lane
  (about 50 s of CPU more).
- The longest units go first (measured on 2 cores), so that the lanes end together.
"""

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist; else None
LANE_GRADING = HERE.parent / "grading" / "lanes" / str(WORKER)  # git-ignored, not under /tmp
# two checkouts testing at once on one machine: give each its own DISTLAB_SANDBOX_FIRST_UID
FIRST_UID = int(os.environ.get("DISTLAB_SANDBOX_FIRST_UID", "60100"))
if WORKER:
    os.environ["DISTLAB_SANDBOX_FIRST_UID"] = str(FIRST_UID + 64 * int(WORKER.removeprefix("gw")))
    shutil.rmtree(LANE_GRADING, ignore_errors=True)
    LANE_GRADING.mkdir(parents=True)
    os.environ["DISTLAB_GRADING_DIR"] = str(LANE_GRADING)

# the long units, longest first (seconds in a lane of `make test`, in parentheses)
LONGEST_FIRST = (
    "system/test_grading.py",  # 605
    "system/test_adversarial.py",  # 570
    "system/test_browser.py",  # 320
    "test_contract.py",  # ~300 (175 on 2 workers): every exercise, one grade() per blank
    "system/test_adversarial_notebooks.py",  # 235
    "system/test_blank_strength.py",  # 155 (sampled)
    "system/test_exchange.py",  # 130
    "system/test_bench.py",  # 175: python -m bench --quick, every table
    "test_shortcuts.py",  # 125
    "test_tensor_parallel.py",  # 70
    "test_data_parallel.py",  # 65
    "test_collectives.py",  # 60
    "test_pipeline_parallel.py",  # 55
    "system/test_batch_timeouts.py",  # 55
    "test_launch.py",  # 55
    "test_hybrid.py",  # 45
    "test_expert_parallel.py",  # 25
    "test_context_parallel.py",  # 60
    "test_zero.py",  # 45
    "system/test_lab.py",  # 45
    "judge/test_judge.py",  # 40
    "test_export.py",  # 40: three torchrun launches
    "test_release.py",  # 30
    "system/test_formgrader.py",  # 30
    "judge/test_sandbox.py",  # 30
    "system/test_drills_browser.py",  # 25
    "test_drills.py",  # 20
    "test_cost_models.py",  # 20
)


def pytest_addoption(parser):
    parser.addoption("--exhaustive", action="store_true",
                     help="the strength check with every mutant (make test-all), not one of "
                     "each kind per blank")


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].removeprefix("tests/")


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST, start=1)}
    items.sort(key=lambda item: rank.get(module_of(item.nodeid), len(rank)))  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by scope, one scope per module, handed out in the order above."""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return module_of(nodeid)

    config.option.loadscopereorder = False
    return Lanes(config, log)


def pytest_sessionfinish(session):
    if WORKER:
        shutil.rmtree(LANE_GRADING, ignore_errors=True)
