"""What one submission may use while it is graded, and the sandboxed kernel it runs in.

CappedExecute (the kernel) and JudgeGrades (the judge's runners) read them whenever nbgrader
autogrades, whatever started it: `make grade`, `nbgrader autograde`, the formgrader's button or
nbgrader's Python API. `make grade` runs several autogrades at once and gives each a slot
(DISTLAB_SLOT): its own sandbox uid, so one submission's process limit or memory cannot touch
another's.
"""

from __future__ import annotations

import json
from pathlib import Path

from traitlets import Float, Int
from traitlets.config import Configurable

from autograder import judge
from autograder.judge import sandbox
from distlab import kernel
from distlab.source import settings
from distlab.source.paths import GRADING


class GradingLimits(Configurable):
    """What one submission may use while it is graded (set them in nbgrader_config.py)."""

    cell_seconds = Int(120, help="Wall time of one notebook cell").tag(config=True)
    notebook_seconds = Float(1800, help="Wall time of one whole submission, judge included "
                             "(make grade stops it then)").tag(config=True)
    cpu_seconds = Int(1800, help="CPU seconds of any one process").tag(config=True)
    memory_bytes = Int(6 << 30, help="Memory of the kernel and everything it starts"
                       ).tag(config=True)
    processes = Int(256, help="Processes alive at once (ranks count)").tag(config=True)
    file_bytes = Int(64 << 20, help="Largest file one process may write").tag(config=True)
    tmp_bytes = Int(512 << 20, help="Size of the private /tmp").tag(config=True)
    call_seconds = Float(judge.CALL_TIMEOUT, help="Wall time of one call of a learner's "
                         "function by the judge").tag(config=True)
    function_seconds = Float(300, help="Wall time the judge gives one graded function: its "
                             "hidden test and the search for the wrong blank").tag(config=True)

    def sandbox_limits(self) -> sandbox.Limits:
        return sandbox.Limits(wall_seconds=self.notebook_seconds, cpu_seconds=self.cpu_seconds,
                              memory_bytes=self.memory_bytes, processes=self.processes,
                              file_bytes=self.file_bytes, tmp_bytes=self.tmp_bytes)


def slot() -> int:
    return settings.slot()


def install_kernel(limits: GradingLimits, slot_number: int) -> Path:
    """Write this slot's sandboxed kernelspec; return the folder of its `kernels/` (give it to
    a KernelSpecManager: nothing else in this process sees the kernel)."""
    folder = GRADING / "jupyter" / f"slot{slot_number}"
    env = {**sandbox.default_env(), settings.JUDGE: "1"}
    if sandbox.available():  # no network of its own: CappedExecute talks to it over IPC
        hidden, readable = judge.kernel_view()  # of the course: distlab, the .venv, the submission
        sandbox.kernelspec(folder, uid=sandbox.uid_for(slot_number), hidden=hidden,
                           readable=readable, limits=limits.sandbox_limits(), env=env,
                           network=False)
    else:  # no root or no namespaces: the judge still decides, the kernel just runs as is
        spec = folder / "kernels" / sandbox.KERNEL_NAME
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": kernel.COMMAND,
            "display_name": "Python 3 (grading)", "language": "python", "env": env}, indent=1))
    return folder / "kernels"
