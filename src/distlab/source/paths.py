"""Where the course is: its root (the folder above `solutions/`), its solved sources and its
grading folder, and the assignments that have a solved source.

DISTLAB_SOLUTIONS_DIR points the whole course (release, references, grading, drills) at other
solved sources: the pipeline tests grade a toy assignment this way, and a hub without the
grading side ships only the open notebooks' sources. DISTLAB_GRADING_DIR moves nbgrader's data.
Both are read in settings.py.
"""

from __future__ import annotations

from pathlib import Path

from distlab.source import settings

ROOT = settings.ROOT  # the course: the folder above solutions/
SOLUTIONS = settings.solutions_dir()  # at import; solutions_dir(): now
GRADING = settings.grading_dir()


def solutions_dir() -> Path:
    """The solved sources as DISTLAB_SOLUTIONS_DIR says now (SOLUTIONS: at import)."""
    return settings.solutions_dir()


def assignment_ids(solutions: Path = SOLUTIONS) -> list[str]:
    """Every assignment with a solved source, in course order."""
    return sorted(p.parent.name for p in solutions.glob("*/*.py") if p.stem == p.parent.name)


def source_path(assignment: str, solutions: Path = SOLUTIONS) -> Path:
    return solutions / assignment / f"{assignment}.py"
