"""Is every door to autograding judged? The formgrader's Autograde button (its HTTP endpoint,
which calls nbgrader's Python API inside the Jupyter server, where no command line says
"autograde") must grade in the sandbox with the judge, like make grade and the CLI.
"""

import re

import nbformat
import pytest
from lab_server import ROOT, LabServer, unavailable

ASSIGNMENT = "01_collectives"
RELEASED = ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
TAMPER = ("print('kernel uid', __import__('os').getuid())\n"
          "try:  # the grading side is not importable in the kernel: this fails there\n"
          "    import autograder.grade_cell as grading\n"
          "    grading.grade = lambda fn, points=None: print('score: 5 / 5') or 5.0\n"
          "except ImportError:\n"
          "    pass\n")

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def tampering_submission():
    """The untouched learner notebook (every blank empty) whose first exercise cell replaces
    the grade() that graded cells call with one that claims full marks, and which snoops for
    the hidden tests after its first cell (adversarial/snoop.py)."""
    from adversarial.snoop import SNOOPS

    nb = nbformat.read(str(RELEASED), as_version=4)
    first = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    first.source = TAMPER + first.source
    nb.cells[1:1] = [nbformat.v4.new_code_cell(code) for code in SNOOPS.values()]
    return nb


@pytest.fixture(scope="module")
def formgrader(tmp_path_factory, start_from_release):
    grading = tmp_path_factory.mktemp("grading")
    env = {"DISTLAB_GRADING_DIR": str(grading)}
    start_from_release(grading)
    folder = grading / "submitted" / "mallory" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(tampering_submission(), folder / f"{ASSIGNMENT}.ipynb")
    server = LabServer(tmp_path_factory.mktemp("server"), instructor=True, env=env).wait_ready()
    yield server, grading
    assert server.stop() == [], "processes left behind"


def test_the_formgrader_button_grades_with_the_judge(formgrader):
    """Does the formgrader's Autograde endpoint give a tampering submission with every blank
    empty 0 points (the judge's verdict), not the 31 its own grade() claims?"""
    server, grading = formgrader
    reply = server.api("POST", f"/formgrader/api/submission/{ASSIGNMENT}/mallory/autograde",
                       timeout=600)
    assert reply["success"], reply
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}") as book:
        submission = book.find_submission(ASSIGNMENT, "mallory")
        assert submission.max_score > 0 and submission.score == 0
    graded = nbformat.read(str(grading / "autograded" / "mallory" / ASSIGNMENT /
                               f"{ASSIGNMENT}.ipynb"), as_version=4)
    texts = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert "score: 5 / 5" not in texts and "not filled yet" in texts
    from autograder.judge import sandbox

    if sandbox.available():  # the kernel ran as the slot's unprivileged uid, not as the server
        assert f"kernel uid {sandbox.uid_for(0)}" in texts, texts[:2000]
    # nbgrader's Python API, called by the button, runs the same kernel: the snoops find nothing
    said = re.findall(r"snoop by [^:\n]*: [^\n{]*found \d+", texts)
    assert len(said) == 3 and all(line.endswith(" found 0") for line in said), said


def test_nbgrader_export_writes_into_the_grading_folder(formgrader):
    """Does `nbgrader export` put grades.csv in the grading folder, never in the repository?"""
    from autograder.nbgrader_cli import nbgrader

    _, grading = formgrader
    nbgrader("export", env={"DISTLAB_GRADING_DIR": str(grading)}, timeout=300)
    assert "mallory" in (grading / "grades.csv").read_text()
    assert not (ROOT / "grades.csv").exists()
