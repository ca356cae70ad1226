"""make grade's gradebook bookkeeping (autograder/batch/cli.py), without grading anything.
(The race it prevents, one student's assignments graded in two slots at once, is graded for
real by tests/system/test_adversarial_notebooks.py: one student, six assignments, two slots.)"""

import os
import sys
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.batch.cli import enrol_students


def test_every_student_is_in_the_gradebook_before_grading_and_named(tmp_path, monkeypatch):
    """Does make grade add each student it will grade (last name the id, first name empty),
    name one known by id only, and keep names the instructor gave?"""
    # a new gradebook runs `alembic`, a program of the venv (make puts its bin/ on PATH)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_student("by_id_only")
        gb.add_student("named", first_name="Ada", last_name="Lovelace")
    enrol_students(url, {"new", "by_id_only", "named"})
    enrol_students(url, {"new"})  # again: nothing changes, nothing fails
    with Gradebook(url) as gb:
        names = {s.id: (s.first_name, s.last_name) for s in gb.students}
    assert names == {"new": ("", "new"), "by_id_only": ("", "by_id_only"),
                     "named": ("Ada", "Lovelace")}
