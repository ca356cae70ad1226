"""Grade every submission with nbgrader (`make grade`).

    python -m autograder.grade [assignment ...]

Submissions live in grading/submitted/<student>/<assignment>/<assignment>.ipynb (nbgrader's
layout; `nbgrader collect` or `nbgrader zip_collect` put them there). For each one this runs
`nbgrader autograde` (with that student's seed for the hidden tests) and
`nbgrader generate_feedback`, then writes grading/grades/<assignment>.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

from nbgrader.api import Gradebook

from autograder import release, source
from autograder.nbgrader_cli import nbgrader

GRADING = source.GRADING
SUBMITTED = GRADING / "submitted"
GRADES = GRADING / "grades"
DB_URL = f"sqlite:///{GRADING / 'gradebook.db'}"  # as in nbgrader_config.py


def submissions(ids: list[str], submitted: Path = SUBMITTED) -> list[tuple[str, str]]:
    """(student, assignment) for every submitted notebook folder, sorted."""
    return sorted(
        (folder.parent.name, folder.name)
        for folder in submitted.glob("*/*")
        if folder.is_dir() and folder.name in ids
    )


def autograde(student: str, assignment: str) -> None:
    os.environ["DISTLAB_STUDENT"] = student  # inherited by the kernel: per-student seeds
    nbgrader("autograde", assignment, "--student", student, "--force")
    nbgrader("generate_feedback", assignment, "--student", student, "--force")


def write_csv(assignment: str, out: Path = GRADES, db_url: str = DB_URL) -> Path:
    """One row per student: each graded cell's score, then the total."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{assignment}.csv"
    with Gradebook(db_url) as gb:
        cells = [cell.name for notebook in gb.find_assignment(assignment).notebooks
                 for cell in notebook.grade_cells]
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["student", *cells, "score", "max_score"])
            for sub in sorted(gb.assignment_submissions(assignment), key=lambda s: s.student.id):
                by_cell = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
                writer.writerow([sub.student.id, *(by_cell.get(c, 0) for c in cells),
                                 sub.score, sub.max_score])
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    args = parser.parse_args(argv)
    ids = args.ids or source.assignment_ids()
    # The gradebook learns each assignment's cells, checksums and hidden tests from a release.
    release.release(ids, release_dir=GRADING / "release")
    todo = submissions(ids)
    if not todo:
        print(f"no submissions under {SUBMITTED}/<student>/<assignment>/")
    for count, (student, assignment) in enumerate(todo, start=1):
        print(f"[{count}/{len(todo)}] {assignment} / {student}", flush=True)
        autograde(student, assignment)
    for assignment in sorted({a for _, a in todo}):
        print(f"grades: {write_csv(assignment)}")
    if todo:
        print(f"feedback: {GRADING / 'feedback'}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
