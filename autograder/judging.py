"""How `nbgrader autograde` grades this course: the learner's kernel runs in the sandbox and
the judge, not the kernel, decides every `grade(fn)` cell.

nbgrader_config.py calls `configure(c)` for the autograde command only. `make grade` runs
several autogrades at once and gives each a slot (DISTLAB_SLOT): its own sandbox uid, so
one submission's process limit or memory cannot touch another's.
"""

from __future__ import annotations

import json
import os
import sys

from traitlets import Float, Int
from traitlets.config import Configurable

from autograder import judge, sandbox
from autograder.source import GRADING


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
    return int(os.environ.get("DISTLAB_SLOT", "0"))


def install_kernel(limits: GradingLimits, slot_number: int) -> str:
    """Write this slot's kernelspec, put it on JUPYTER_PATH, and return the kernel's name."""
    folder = GRADING / "jupyter" / f"slot{slot_number}"
    env = {**sandbox.default_env(), "DISTLAB_JUDGE": "1"}
    if sandbox.available():  # no network of its own: CappedExecute talks to it over IPC
        sandbox.kernelspec(folder, uid=sandbox.uid_for(slot_number),
                           limits=limits.sandbox_limits(), env=env, network=False)
    else:  # no root or no namespaces: the judge still decides, the kernel just runs as is
        spec = folder / "kernels" / sandbox.KERNEL_NAME
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (grading)", "language": "python", "env": env}, indent=1))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        filter(None, [str(folder), os.environ.get("JUPYTER_PATH")]))
    return sandbox.KERNEL_NAME


def configure(c) -> None:
    """Sandboxed kernel, limits, and the judge in nbgrader's autograde pipeline."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        ClearOutput,
        IgnorePattern,
        LimitOutput,
        OverwriteCells,
        OverwriteKernelspec,
        SaveAutoGrades,
    )
    from traitlets.config.loader import KVArgParseConfigLoader

    from autograder.preprocessors import CappedExecute, DropDuplicateIds, JudgeGrades

    # `--GradingLimits.NAME=VALUE` on nbgrader's command line (make grade passes them on): this
    # file's `c` does not see the command line, and the kernelspec is written from it here.
    flags = [arg for arg in sys.argv[1:] if arg.startswith("--GradingLimits.")]
    if flags:
        c.merge(KVArgParseConfigLoader(argv=flags).load_config())
    limits = GradingLimits(config=c)
    c.Execute.kernel_name = install_kernel(limits, slot())
    if sandbox.available():
        uid = sandbox.uid_for(slot())
        c.CappedExecute.sockets, c.CappedExecute.sockets_uid = sandbox.sockets_folder(uid), uid
    c.Execute.timeout = limits.cell_seconds
    c.Execute.startup_timeout = 120
    c.JudgeGrades.slot = slot()
    # nbgrader's own lists. A copied cell is an ordinary cell, not a broken notebook:
    c.Autograde.sanitize_preprocessors = [
        ClearOutput,
        DropDuplicateIds,
        OverwriteKernelspec,
        OverwriteCells,
        CheckCellMetadata,
    ]
    # Execute keeping a bounded amount of output, then the judge: the trusted verdict replaces
    # whatever graded cells showed before anything reads their outputs.
    c.Autograde.autograde_preprocessors = [
        CappedExecute,
        JudgeGrades,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
