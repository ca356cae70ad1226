"""CappedExecute: nbgrader's Execute for a kernel that runs untrusted code.

The kernel is the sandboxed one of this grading slot (GradingLimits; see judge/limits.py),
set up here when the notebook runs, so every way of autograding (make grade, the nbgrader CLI,
the formgrader, nbgrader's Python API) runs submissions in the sandbox. Where the sandbox
works, the kernel is reached over IPC sockets in a fresh folder made for that kernel alone (it
has no network of its own: see sandbox.kernelspec).

nbgrader's LimitOutput counts lines, after the whole notebook ran: one 100 MB line, or a cell
that prints as fast as it can until its time limit, would first fill this (trusted, unlimited)
process's memory, then the autograded notebook and the feedback page. Here output is counted
in characters as it arrives, per cell and per notebook; past the cap it is dropped and one
line says so. A message larger than MAX_MESSAGE is not even received from the kernel.

With `skip_judged`, the cells JudgeGrades decides (a graded cell's `grade(fn)`) are not run in
the kernel: the judge runs their hidden tests outside it and replaces whatever the kernel would
have shown, so the kernel never needs to import the grading side (autograder.grade_cell and
the hidden tests under it: a second or two per submission).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import zmq
from jupyter_core.utils import run_sync
from nbclient.output_widget import OutputWidget
from nbformat.v4 import new_output, output_from_msg
from nbgrader.preprocessors import Execute
from traitlets import Bool, Int, Unicode

from autograder.preprocessors.judge_grades import judged

MAX_MESSAGE = 64 << 20  # a message from the kernel larger than this is refused
NOTICE = ("\n... output cut here: the grader keeps {} characters of a cell (fewer once the "
          "notebook has printed a lot)\n")


def _size(content) -> int:
    """About how many characters a message's content holds."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, dict):
        return sum(_size(v) for v in content.values())
    if isinstance(content, list | tuple):
        return sum(_size(v) for v in content)
    return 8


def _cut(output, room: int):
    """The output shortened to about `room` characters (an error keeps its type)."""
    if output.output_type == "stream":
        output.text = output.text[:room]
    elif output.output_type == "error":
        output.evalue = str(output.get("evalue", ""))[:room]
        output.traceback = [line[:room] for line in output.get("traceback", [])[:3]]
    else:  # an image or other rich output is dropped whole
        return None
    return output


class KeptOutput(OutputWidget):
    """nbclient's stand-in for an Output widget (what interact draws into), keeping what the
    widget shows, without echoing each output back to the kernel on the shell channel."""

    def sync_state(self) -> None:
        pass


class QuietOutputWidgets:
    """For an nbclient executor: Output widgets are KeptOutput. Nothing reads the echoes (not
    the grading kernel, not Validate's), and after a cell whose widgets sent them, the next
    cell's request sometimes waited for that cell's time limit: 120 s in grading, 30 s in
    Validate, 3-6 times in 30 widget cells."""

    def on_comm_open_jupyter_widget(self, msg):
        state = msg["content"]["data"]["state"]
        if (state.get("_model_module"), state.get("_model_name")) == (
                "@jupyter-widgets/output", "OutputModel"):
            return KeptOutput(msg["content"]["comm_id"], state, self.kc, self)
        return super().on_comm_open_jupyter_widget(msg)


class CappedExecute(QuietOutputWidgets, Execute):
    """Execute, keeping at most `cell_chars` characters of output per cell and `notebook_chars`
    per notebook."""

    cell_chars = Int(1 << 20, help="Output characters kept per cell").tag(config=True)
    notebook_chars = Int(8 << 20, help="Output characters kept per notebook").tag(config=True)
    sandboxed = Bool(True, help="Run the notebook in this grading slot's sandboxed kernel "
                     "(False: the notebook's own kernel, for tests)").tag(config=True)
    sockets = Unicode("", help="Folder for the kernel's IPC sockets ('': TCP on 127.0.0.1); "
                      "set from the sandbox when `sandboxed`").tag(config=True)
    sockets_uid = Int(0, help="The uid the kernel runs as, owner of its sockets").tag(config=True)
    skip_judged = Bool(False, help="Leave the cells JudgeGrades decides (graded `grade(fn)` "
                       "cells) unrun: set it where JudgeGrades follows").tag(config=True)

    def use_sandbox(self) -> None:
        """This slot's sandboxed kernelspec, its limits and, where the sandbox works, its IPC
        sockets folder."""
        from autograder.judge import limits as grading
        from autograder.judge import sandbox

        limits = grading.GradingLimits(parent=self)
        slot = grading.slot()
        self._kernel_dirs = [str(grading.install_kernel(limits, slot))]
        self.kernel_name = sandbox.KERNEL_NAME
        self.timeout, self.startup_timeout = limits.cell_seconds, 120
        if sandbox.available():
            self.sockets_uid = sandbox.uid_for(slot)
            self.sockets = sandbox.sockets_folder(self.sockets_uid)

    def preprocess(self, nb, resources=None, km=None):
        self._notebook_used, self._cell_used, self._cut_cells = 0, {}, set()
        self._socket_folder, self._kernel_dirs = None, []
        if self.sandboxed and km is None:
            self.use_sandbox()
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self._socket_folder:
                shutil.rmtree(self._socket_folder, ignore_errors=True)
                with contextlib.suppress(OSError):  # no other kernel of the uid uses it
                    os.rmdir(self.sockets)

    def preprocess_cell(self, cell, resources, index):
        if self.skip_judged and judged(cell):
            cell.outputs = []  # JudgeGrades writes them
            return cell, resources
        return super().preprocess_cell(cell, resources, index)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self._kernel_dirs:  # this kernel only: the process's own kernel list is untouched
            from jupyter_client.kernelspec import KernelSpecManager

            km.kernel_spec_manager = KernelSpecManager(kernel_dirs=self._kernel_dirs)
        if self.sockets:
            # Made here, for this kernel only: nothing an earlier kernel of the uid left in
            # the shared folder (a planted file, a symlink) can be in it.
            os.makedirs(self.sockets, mode=0o755, exist_ok=True)  # the kernelspec binds it
            self._socket_folder = tempfile.mkdtemp(prefix="kernel-", dir=self.sockets)
            os.chown(self._socket_folder, self.sockets_uid, self.sockets_uid)
            km.transport, km.ip = "ipc", os.path.join(self._socket_folder, "zmq")
        return km

    async def async_start_new_kernel_client(self):
        # The client's sockets queue only a few messages and refuse one larger than
        # MAX_MESSAGE: however much and however fast the kernel sends, what waits here to be
        # read stays small (the kernel's own queue is in its sandbox). A refused message ends
        # that connection for good (ZMQ treats it as a protocol error): the kernel's later
        # output is lost, and nbgrader fails the notebook when a cell's output never ends.
        client = self.km.client

        def capped_client(**kwargs):
            kc = client(**kwargs)
            kc.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            kc.context.setsockopt(zmq.RCVHWM, 4)
            return kc

        self.km.client = capped_client
        try:
            return await super().async_start_new_kernel_client()
        finally:
            del self.km.client

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _room(self, cell_index: int) -> int:
        return min(self.cell_chars - self._cell_used.get(cell_index, 0),
                   self.notebook_chars - self._notebook_used)

    def _spend(self, cell_index: int, size: int) -> None:
        self._cell_used[cell_index] = self._cell_used.get(cell_index, 0) + size
        self._notebook_used += size

    def output(self, outs, msg, display_id, cell_index):
        size = _size(msg.get("content", {}))
        room = self._room(cell_index)
        if size <= room:
            self._spend(cell_index, size)
            return super().output(outs, msg, display_id, cell_index)
        if cell_index not in self._cut_cells:  # the first output past the cap: its start, a note
            self._cut_cells.add(cell_index)
            try:
                out = _cut(output_from_msg(msg), max(room, 0))
            except ValueError:
                out = None
            outs.extend([out] if out is not None else [])
            outs.append(new_output("stream", name="stdout", text=NOTICE.format(self.cell_chars)))
            self._spend(cell_index, max(room, 0))
        return None

    def on_cell_executed(self, **kwargs):
        super().on_cell_executed(**kwargs)
        # the reply's own error (a timeout, or an error not already shown) is capped too
        cell = kwargs["cell"]
        for output in cell.get("outputs", []):
            if output.output_type == "error" and _size(output) > self.cell_chars:
                _cut(output, self.cell_chars)
