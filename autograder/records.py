"""What grading leaves for what reads it back: the gradebook's URL (make grade writes the
gradebook, make report and the grades CSV read it) and the judge's verdict that JudgeGrades
keeps in each graded cell of an autograded notebook (the report's per-blank counts, the CSV's
"changed outside the blanks" column). make grade (autograder/batch/) and make report
(autograder/report/) both import this module and neither imports the other.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from distlab.source import paths

VERDICT = "verdict"  # the key under a graded cell's metadata["distlab"]


def db_url() -> str:
    """The gradebook's SQLAlchemy URL, as nbgrader_config.py sets it."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(paths.ROOT)).load_config()
    return config.CourseDirectory.db_url


def db_path(url: str) -> str:
    """The SQLite file of a gradebook URL ('' for other databases)."""
    return url.removeprefix("sqlite:///").split("?")[0] if url.startswith("sqlite:///") else ""


def keep_verdict(cell, function: str, record: dict) -> None:
    """Keep a graded function's verdict (grade_cell.Verdict.record()) in its graded cell."""
    cell.metadata.setdefault("distlab", {})[VERDICT] = {"function": function, **record}


def drop_verdict(cell) -> None:
    """Drop a verdict from a cell (only the judge writes them: a submission brings none)."""
    cell.metadata.get("distlab", {}).pop(VERDICT, None)


def verdicts(notebook: Path) -> dict[str, dict]:
    """function -> the judge's verdict, from an autograded notebook's graded cells ({} when
    the file is not a readable notebook)."""
    try:
        nb = nbformat.read(notebook, as_version=nbformat.NO_CONVERT)
    except (OSError, ValueError, KeyError, AttributeError):
        return {}
    found = {}
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {})
        verdict = meta.get("distlab", {}).get(VERDICT)
        if verdict and meta.get("nbgrader", {}).get("grade"):
            found[verdict["function"]] = verdict
    return found
