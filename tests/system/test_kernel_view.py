"""What the grading kernel can see of the course (autograder.judge.kernel_view): distlab, the
.venv and the submission it grades, never the grading side. The snoops of
tests/system/adversarial/snoop.py run in the real grading kernel of a slot, and, as a control
that they would find what is there, as plain Python outside it. (Through make grade, the
nbgrader CLI and the formgrader they run in test_adversarial, test_grading and
test_formgrader.)
"""

import os
import subprocess
import sys

import nbformat
import pytest
from adversarial.snoop import SNOOPS

from autograder import judge
from autograder.judge import limits, sandbox
from autograder.preprocessors import CappedExecute
from distlab.source import paths

ROOT = str(paths.ROOT)


def test_the_repository_is_hidden_and_only_distlab_shown():
    hidden, readable = judge.kernel_view()
    assert ROOT in hidden and readable == [str(paths.ROOT / "src")]
    assert set(sandbox.default_hidden()) <= set(hidden)
    runner_hidden, runner_readable = judge.runner_view()
    assert runner_hidden == hidden and runner_readable[:1] == readable


def test_an_autograder_installed_outside_the_repository_is_hidden_too(tmp_path):
    """A non-editable install copies autograder/, hidden tests and all, into site-packages,
    which the kernel must see (it is the .venv): that copy is hidden as well."""
    installed = str(tmp_path / "site-packages" / "autograder")
    assert installed in judge.grading_side(installed)
    assert judge.grading_side(judge.AUTOGRADER) == [*sandbox.default_hidden(), ROOT]


def _last_lines(texts: list[str]) -> list[str]:
    return [text.strip().splitlines()[-1] for text in texts]


@pytest.mark.skipif(not sandbox.available(), reason=f"no sandbox: {sandbox.why_unavailable()}")
def test_the_grading_kernel_finds_nothing_that_plain_python_finds(tmp_path, monkeypatch):
    grading = tmp_path / "grading"
    submission = grading / "submitted" / "eve" / "01_collectives"
    submission.mkdir(parents=True)
    monkeypatch.setattr(limits, "GRADING", grading)  # the slot's kernelspec goes there
    monkeypatch.setenv("JUPYTER_PATH", str(limits.install_kernel(limits.GradingLimits(), 0).parent))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in SNOOPS.values()])
    CappedExecute(timeout=60, kernel_name=sandbox.KERNEL_NAME).preprocess(
        nb, {"metadata": {"path": str(submission)}})
    inside = ["".join(o.get("text", "") for o in cell.outputs) for cell in nb.cells]
    assert all("FOUND" not in text and "IMPORTED" not in text for text in inside), inside
    said = _last_lines(inside)  # each snoop's summary: it ran, and found nothing
    assert [line.split(":")[0] for line in said] == [
        "snoop by path", "snoop by import", "snoop by sys.path and .pth"], inside
    assert all(line.endswith(" found 0") for line in said) and " 0 imported" in said[2], said
    outside = [subprocess.run([sys.executable, "-c", code], cwd=submission, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": ""}).stdout
               for code in SNOOPS.values()]
    assert not any(line.endswith(" found 0") for line in _last_lines(outside)), outside
