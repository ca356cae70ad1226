"""Does a class run through nbgrader's exchange? The instructor releases an assignment, two
simulated learners fetch it and submit (solved, a half-saved file), the instructor
collects, grades with `make grade`, releases feedback, and each learner fetches their own.

Each learner is a separate home folder (where nbgrader keeps its submission cache) and working
folder, with the learners' nbgrader config the README gives for /etc/jupyter (course id and
exchange folder, nothing of the course's own config), and an explicit student id: nbgrader's
own `--student`, since everyone here is one Unix user (on a hub, the Unix user or
JUPYTERHUB_USER names the learner). The exchange and the grading folder are temporary.
Run: .venv/bin/python -m pytest tests/system/test_exchange.py -q   (about 35 s on 2 cores)
"""

import csv
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from lab_server import LabServer, unavailable

from autograder import solved
from autograder.nbgrader_cli import nbgrader
from distlab.source import paths

ASSIGNMENT = "01_collectives"  # the cheapest to grade: about 10 CPU-s, 02 twice that
RELEASED = paths.ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
# solved, half-saved (an untouched notebook grades as in test_grading: the exchange adds nothing)
STUDENTS = ("alice", "carol")
BIN = str(Path(sys.executable).parent)


def learner_config(exchange: Path) -> str:
    """The README's /etc/jupyter/nbgrader_config.py for learners, with this test's exchange."""
    readme = (paths.ROOT / "README.md").read_text()
    block = re.search(r"```python\n( *# /etc/jupyter/nbgrader_config\.py.*?\n) *```", readme,
                      re.S)
    assert block, "README: no learner nbgrader_config.py block"
    text = textwrap.dedent(block[1])
    assert '"/srv/nbgrader/exchange"' in text
    return text.replace('"/srv/nbgrader/exchange"', repr(str(exchange)))


def submission(student: str, fetched: Path) -> bytes:
    if student == "alice":
        return nbformat.writes(solved.load(ASSIGNMENT)).encode()
    return fetched.read_bytes()[: len(fetched.read_bytes()) // 2]  # saved half-way


class Class:
    """The temporary exchange, grading folder and learners' homes, and how each side runs."""

    def __init__(self, tmp: Path):
        self.exchange, self.grading = tmp / "exchange", tmp / "grading"
        self.homes = {s: tmp / "home" / s for s in STUDENTS}
        etc = tmp / "etc-jupyter"  # what /etc/jupyter holds on the learners' servers
        etc.mkdir()
        (etc / "nbgrader_config.py").write_text(learner_config(self.exchange))
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("DISTLAB_", "JUPYTER_", "JUPYTERHUB_"))}
        self.instructor = {"DISTLAB_GRADING_DIR": str(self.grading),
                           "DISTLAB_EXCHANGE": str(self.exchange)}
        self.learner = {s: {**base, "HOME": str(home), "JUPYTER_CONFIG_PATH": str(etc),
                            "PATH": BIN + os.pathsep + base["PATH"]}
                        for s, home in self.homes.items()}
        for home in self.homes.values():
            home.mkdir(parents=True)

    def teach(self, *args: str) -> str:
        """An nbgrader command of the instructor's, in the course root; its log."""
        result = nbgrader(*args, env=self.instructor, timeout=300)
        assert "Traceback" not in result.stderr, result.stderr
        return result.stdout + result.stderr

    def learn(self, *args: str, as_student: bool = False) -> dict[str, str]:
        """The same nbgrader command run by every learner at once, each in their home; logs."""
        procs = {s: subprocess.Popen(
            [sys.executable, "-m", "nbgrader", *args, *([f"--student={s}"] if as_student else [])],
            cwd=self.homes[s], env=self.learner[s], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) for s in STUDENTS}
        logs = {s: proc.communicate(timeout=300)[0] for s, proc in procs.items()}
        for s, proc in procs.items():
            assert proc.returncode == 0 and "Traceback" not in logs[s], f"{s}: {logs[s]}"
        return logs


@pytest.fixture(scope="module")
def course(tmp_path_factory, start_from_release):
    """The whole round trip; what each step left, for the tests below."""
    c = Class(tmp_path_factory.mktemp("class"))
    start_from_release(c.grading)  # the instructor's course, released once for every test
    seen = {"list before release": c.teach("list")}
    c.teach("release_assignment", ASSIGNMENT)
    seen["list"] = c.learn("list")
    c.learn("fetch_assignment", ASSIGNMENT)
    work = {s: home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb" for s, home in c.homes.items()}
    seen["fetched"] = {s: path.read_bytes() for s, path in work.items()}
    seen["submitted"] = {s: submission(s, path) for s, path in work.items()}
    for s, path in work.items():
        path.write_bytes(seen["submitted"][s])
    c.learn("submit", ASSIGNMENT, as_student=True)
    seen["inbound"] = c.teach("list", "--inbound")
    # Everyone here is one Unix user: nbgrader's "claims to be submitted by ... but is owned
    # by ..." check would flag every learner (see the README on Kubernetes).
    c.teach("collect", ASSIGNMENT, "--ExchangeCollect.check_owner=False")
    env = {**os.environ, **c.instructor, "PATH": BIN + os.pathsep + os.environ["PATH"]}
    graded = subprocess.run([sys.executable, "-m", "autograder.batch", ASSIGNMENT],
                            cwd=paths.ROOT, env=env, capture_output=True, text=True,
                            timeout=900)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    seen["make grade"] = graded.stdout
    c.teach("release_feedback", ASSIGNMENT)
    c.learn("fetch_feedback", ASSIGNMENT, as_student=True)
    with (c.grading / "grades" / f"{ASSIGNMENT}.csv").open() as handle:
        seen["grades"] = {row["student"]: row for row in csv.DictReader(handle)}
    return c, seen


def test_each_learner_fetched_the_released_notebook(course):
    c, seen = course
    assert all(f"distlab {ASSIGNMENT}" in log for log in seen["list"].values()), seen["list"]
    for student in STUDENTS:
        assert seen["fetched"][student] == RELEASED.read_bytes(), student


def test_collect_puts_each_submission_in_the_grading_folder(course):
    c, seen = course
    for student in STUDENTS:
        assert f"distlab {student} {ASSIGNMENT}" in seen["inbound"]
        folder = c.grading / "submitted" / student / ASSIGNMENT
        assert (folder / f"{ASSIGNMENT}.ipynb").read_bytes() == seen["submitted"][student]
        assert (folder / "timestamp.txt").is_file()


def test_make_grade_grades_the_collected_submissions(course):
    _, seen = course
    alice, carol = (seen["grades"][s] for s in STUDENTS)
    assert float(alice["score"]) == float(alice["max_score"]) > 0, alice
    assert carol["not_graded_because"] and float(carol["score"]) == 0, carol


def test_each_learner_fetches_their_own_feedback_and_no_one_elses(course):
    c, seen = course
    pages = {}
    for student, home in c.homes.items():
        found = list((home / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
        assert len(found) == 1, (student, found)
        pages[student] = found[0].read_text()
        mine = c.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        assert pages[student] == mine.read_text(), student
    assert len(set(pages.values())) == len(STUDENTS)  # a page each
    assert "not graded" in pages["carol"]  # make grade's page for a submission it could not grade


def test_list_finds_the_exchange_before_and_after_release(course):
    _, seen = course
    for log in (seen["list before release"], seen["inbound"], *seen["list"].values()):
        assert "Unwritable" not in log and "CRITICAL" not in log, log


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_the_formgrader_sees_the_exchange_and_names_students(course, tmp_path_factory):
    """The instructor's formgrader: the assignment released with its submissions, students
    named (not "None, None"), and no "Unwritable directory ... exchange" in its log."""
    c, seen = course
    server = LabServer(tmp_path_factory.mktemp("server"), instructor=True,
                       env=c.instructor).wait_ready()
    try:
        assignment = server.api("GET", f"/formgrader/api/assignment/{ASSIGNMENT}")
        submissions = server.api("GET", f"/formgrader/api/submissions/{ASSIGNMENT}")
    finally:
        assert server.stop() == [], "processes left behind"
    assert assignment["status"] == "released" and assignment["num_submissions"] == len(STUDENTS)
    names = {s["student"]: (s["last_name"], s["first_name"]) for s in submissions}
    assert names == {s: (s, "") for s in STUDENTS}, names
    assert "Unwritable" not in server.log(), server.log()
    # The formgrader's mean counts a submission make grade could not grade as 0 (the README
    # says so); make grade's summary is the mean of the graded ones.
    scores = {s: float(row["score"]) for s, row in seen["grades"].items()}
    assert assignment["average_score"] == pytest.approx(sum(scores.values()) / len(STUDENTS))
    assert f"mean {scores['alice']:.1f} /" in seen["make grade"]
