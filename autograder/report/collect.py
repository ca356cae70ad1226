"""Read a graded class back, without running anything: each student's points per graded cell
from the gradebook (one query per assignment), and each graded function's verdict (what was
written in each blank, which blanks lost their point, a change outside the blanks, the hidden
test's complaint) from the metadata JudgeGrades left in the autograded notebook (read by
autograder.records, which make grade's CSV reads too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autograder.records import verdicts
from distlab.source.cells import solution_sources
from distlab.source.definitions import functions
from distlab.source.markers import Blank, blank_source


@dataclass
class Submission:
    student: str
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # cell: (score, max)
    verdicts: dict[str, dict] = field(default_factory=dict)  # function: its verdict


@dataclass
class GradedClass:
    assignment: str
    submissions: list[Submission]  # graded, with their verdicts, by student id
    not_graded: list[str] = field(default_factory=list)  # submitted, no autograded notebook
    without_verdicts: list[str] = field(default_factory=list)  # graded before verdicts were kept


def exercise_blanks(assignment: str) -> dict[str, list[Blank]]:
    """function -> the blanks of the solution cell that defines it, in course order (a cell
    that defines two functions grades both on all its blanks)."""
    found = {}
    for source in solution_sources(assignment).values():
        blanks = blank_source(source)[1]
        for name in functions(source):
            found[name] = blanks
    return found


def cell_scores(url: str, assignment: str) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> graded cell -> (score, max score), every submission of `assignment` in one
    query (a class of hundreds costs one round trip, not one per student)."""
    from nbgrader.api import (
        Assignment,
        Grade,
        Gradebook,
        GradeCell,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    scores: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(url) as gb:
        rows = (gb.db.query(SubmittedAssignment.student_id, GradeCell.name, Grade.score,
                            GradeCell.max_score)
                .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
                .join(SubmittedAssignment,
                      SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .join(GradeCell, Grade.cell_id == GradeCell.id)
                .filter(Assignment.name == assignment))
        for student, cell, score, most in rows:
            scores.setdefault(student, {})[cell] = (float(score or 0), float(most or 0))
    return scores


def read_class(assignment: str, url: str, grading: Path) -> GradedClass:
    """The graded submissions of `assignment` in the grading folder `grading` and the
    gradebook at `url`."""
    scores = cell_scores(url, assignment)
    graded, without = [], []
    for student in sorted(scores):
        notebook = grading / "autograded" / student / assignment / f"{assignment}.ipynb"
        if not notebook.exists():  # nbgrader stopped at it (not valid JSON, say)
            continue
        if found := verdicts(notebook):
            graded.append(Submission(student, scores[student], found))
        else:
            without.append(student)
    counted = {s.student for s in graded} | set(without)
    submitted = {folder.parent.name for folder in (grading / "submitted").glob(f"*/{assignment}")
                 if folder.is_dir()}
    return GradedClass(assignment, graded, sorted((submitted | set(scores)) - counted), without)
