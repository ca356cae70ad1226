"""Jupyter settings of the learner's JupyterLab. Only `make lab` reads them: it puts this folder
first on JUPYTER_CONFIG_PATH, so an instructor's own Jupyter and nbgrader's CLI are untouched.
labconfig/page_config.json, beside this file, hides nbgrader's instructor UI in the browser."""

import logging
import os
import platform

import zmq
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

c = get_config()  # noqa: F821 (provided by traitlets when this file is loaded)

# The learner notebooks, opening on the first one.
c.ServerApp.root_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "notebooks")
c.LabApp.default_url = "/lab/tree/01_collectives/01_collectives.ipynb"

# Learners get nbgrader's Validate button only. Formgrader, the course list and the assignment
# list are for instructors (the lists fail without an nbgrader exchange folder).
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.validate_assignment": True,
}

# Encrypt kernel traffic (CurveZMQ) where pyzmq can: this also keeps ipykernel's warning that
# the kernel "is running over TCP without encryption" off the learner's terminal.
if zmq.has("curve"):
    c.KernelManager.transport_encryption = "auto"


class CourseContents(AsyncLargeFileManager):
    """Jupyter's file contents, opened so that a fresh notebook stays clean:
    - Lab writes the kernel's `language_info` (with its Python version) into the notebook as
      it opens, which marks it modified unless the notebook already says the same: the
      released notebooks leave the version out (it is the learner's), so it is filled here.
    - A notebook without outputs has nothing to trust or distrust (only outputs can run
      code), so it opens trusted, without the "not trusted" line in the log."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook" and model.get("content"):
            info = model["content"].get("metadata", {}).get("language_info")
            if isinstance(info, dict) and info.get("name") == "python":
                info.setdefault("version", platform.python_version())
        return model

    def mark_trusted_cells(self, nb, path=""):
        if any(cell.get("outputs") for cell in nb.cells):
            return super().mark_trusted_cells(nb, path)
        self.notary.mark_cells(nb, True)


c.ServerApp.contents_manager_class = CourseContents


class _TornadoPingTimeoutNotice(logging.Filter):
    """jupyter_server pings kernel websockets itself (every 30 s, closing after 90 s without an
    answer); tornado >= 6.5 still warns, once, that its own ping timeout (unused here) exceeds
    the interval. Drop that one line, nothing else."""

    def filter(self, record):
        return not str(record.msg).startswith("The websocket_ping_timeout")


logging.getLogger("tornado.general").addFilter(_TornadoPingTimeoutNotice())
