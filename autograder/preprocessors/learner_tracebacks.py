"""LearnerTracebacks: feedback tracebacks show the learner's code, not the course's or libraries'.

IPython stores a traceback as a list of strings, ANSI-coloured: a rule, the `ValueError ...
Traceback` heading, one string per frame ("Cell In[3], line 4" for a cell, "File /path.py:40,
in fn(...)" for a module), and the `ValueError: message` line. A frame in distlab, the grader
or an installed package (site-packages, the standard library) is the course's or a library's
inside, not something the learner can change: each run of such frames becomes one line.
"""

import importlib.util
import os
import re
import sysconfig

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, List, Unicode, default

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# IPython 8+: "File /a/b.py:40, in fn(x)"; IPython 7: "/a/b.py in fn(x)".
FRAME_FILE = re.compile(r"\A(?:File (?P<new>.+?):\d+(?:, in |\n|\Z)|(?P<old>/\S+\.py) in )")
LIBRARY_FOLDERS = ("site-packages", "dist-packages")


def _package_folder(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # its folder, without importing it
    return os.path.dirname(spec.origin) if spec and spec.origin else None


class LearnerTracebacks(Preprocessor):
    """Drop traceback frames whose file is inside `hidden_folders` or an installed package."""

    # nbconvert's preprocessors are off unless enabled (nbgrader's are on, as here)
    enabled = Bool(True, help="Use this preprocessor").tag(config=True)

    hidden_folders = List(Unicode(), help="Folders whose frames feedback leaves out (besides "
                          "every site-packages and dist-packages)").tag(config=True)
    note = Unicode("... {count} frame(s) inside distlab and the libraries it uses",
                   help="Replaces each run of hidden frames ({count}: how many)"
                   ).tag(config=True)

    @default("hidden_folders")
    def _default_hidden_folders(self):
        folders = [_package_folder("distlab"), _package_folder("autograder"),
                   sysconfig.get_path("stdlib")]
        return [os.path.realpath(f) for f in folders if f]

    def hidden(self, frame: str) -> bool:
        """Is this traceback entry a frame in a hidden folder?"""
        match = FRAME_FILE.match(ANSI.sub("", frame))
        if match is None:  # the heading, the message, "During handling of ...", a cell's frame
            return False
        path = os.path.realpath(match.group("new") or match.group("old"))
        if any(part in LIBRARY_FOLDERS for part in path.split(os.sep)):
            return True
        return any(path.startswith(folder + os.sep) for folder in self.hidden_folders)

    def learner_traceback(self, traceback: list[str]) -> list[str]:
        kept, run = [], 0
        for entry in traceback:
            if self.hidden(entry):
                run += 1
                continue
            if run:
                kept.append(self.note.format(count=run))
                run = 0
            kept.append(entry)
        if run:
            kept.append(self.note.format(count=run))
        return kept

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = self.learner_traceback(output.get("traceback", []))
        return cell, resources
