"""The course's settings: every DISTLAB_* environment variable is read here and nowhere else
(tests/test_settings.py checks it), each by one function called when the value is needed, so a
test's monkeypatch.setenv takes effect. README.md, "Settings", lists them.

A setting that a parent hands to a child process (the grading slot, the judge's mark) is
written under the name kept here too (SLOT, JUDGE), so each name is spelled once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the course: src/distlab/source/ is three below

SLOT = "DISTLAB_SLOT"
JUDGE = "DISTLAB_JUDGE"
STORE = "DISTLAB_STORE"


def solutions_dir() -> Path:
    """DISTLAB_SOLUTIONS_DIR: the solved sources the whole course (release, references,
    grading, drills) is built from. Default: `solutions/` in the course root."""
    return Path(os.environ.get("DISTLAB_SOLUTIONS_DIR", ROOT / "solutions"))


def grading_dir() -> Path:
    """DISTLAB_GRADING_DIR: nbgrader's data (source, submitted, autograded, feedback, the
    gradebook). Default: `grading/` in the course root."""
    return Path(os.environ.get("DISTLAB_GRADING_DIR", ROOT / "grading"))


def exchange_dir() -> Path:
    """DISTLAB_EXCHANGE: nbgrader's exchange folder (release, submit, collect). Default:
    `exchange/` in the grading folder."""
    return Path(os.environ.get("DISTLAB_EXCHANGE", grading_dir() / "exchange"))


def gradebook_url() -> str:
    """DISTLAB_DB_URL: the gradebook's SQLAlchemy URL (e.g. PostgreSQL for a large class).
    Default: SQLite `gradebook.db` in the grading folder, waiting up to 60 s for a lock."""
    return os.environ.get("DISTLAB_DB_URL",
                          f"sqlite:///{grading_dir() / 'gradebook.db'}?timeout=60")


def drills_db() -> Path:
    """DISTLAB_DRILLS_DB: the learner's drill history (SQLite). Default:
    `$XDG_DATA_HOME/distlab/drills.sqlite` (XDG_DATA_HOME: ~/.local/share)."""
    if os.environ.get("DISTLAB_DRILLS_DB"):
        return Path(os.environ["DISTLAB_DRILLS_DB"])
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "distlab" / "drills.sqlite"


def drills_run_dir() -> Path:
    """DISTLAB_DRILLS_RUN: the folder of the drills' checker server's socket. Default:
    `distlab-drills-<uid>` in the temporary folder."""
    return Path(os.environ.get("DISTLAB_DRILLS_RUN") or
                Path(tempfile.gettempdir()) / f"distlab-drills-{os.getuid()}")


def drills_server() -> bool:
    """DISTLAB_DRILLS_SERVER: `0` makes `distlab.drills check` judge in its own process instead
    of a warm checker server. Default: on."""
    return os.environ.get("DISTLAB_DRILLS_SERVER", "1") != "0"


def student() -> str:
    """DISTLAB_STUDENT: whose seed a hidden test draws its data from in the learner's kernel
    (grading passes the student explicitly). Default: "" (the seed everyone shares)."""
    return os.environ.get("DISTLAB_STUDENT", "")


def judged() -> bool:
    """DISTLAB_JUDGE (JUDGE): set by `make grade` in the autograder's kernels, so the judge grades
    outside the kernel instead of the kernel grading itself. Default: unset."""
    return bool(os.environ.get(JUDGE))


def call_store() -> str | None:
    """DISTLAB_STORE (STORE): set by distlab's ranks at every call: a file path that no process
    group has used, after which a hidden test's harness names the groups it makes itself.
    Default: unset (under torchrun)."""
    return os.environ.get(STORE)


def slot() -> int:
    """DISTLAB_SLOT (SLOT): the grading slot of this process (`make grade` runs several at
    once), which picks its sandbox uid. Default: 0."""
    return _whole_number(SLOT, "0")


def sandbox_first_uid() -> int:
    """DISTLAB_SANDBOX_FIRST_UID: the uid of the judge's sandbox in grading slot 0 (slot k: this
    + k, below 61184); two graders on one machine need ranges of their own. Default: 60100."""
    return _whole_number("DISTLAB_SANDBOX_FIRST_UID", "60100")


def _whole_number(name: str, default: str) -> int:
    """The whole number environment variable `name` holds (`default` when unset), or an error
    that names it."""
    text = os.environ.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number: set it to one (default "
                         f"{default}) or unset it") from None
