"""Does real grading give every notebook fair grades? One `make grade` batch grades, for each
notebook, three students: the solved source (full marks), the untouched learner notebook (0,
with the unfilled blanks named) and "shortcuts": the solved source with one wrong blank in one
function (that blank's point lost, and named) and the first shortcut of tests/shortcuts/ in
every other function that has one (each loses points, and the feedback names the idea). One
solved submission also goes through nbgrader's own CLI; 01 also gets a cheat and a corrupt file.

(The wrong blank and the shortcuts share a student because each function is graded on its own:
a student per idea would grade every notebook's solved code once more, a minute of CPU a
notebook. The shortcut of the function that holds the wrong blank is checked by
tests/test_shortcuts.py, through the same judge.)
"""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import shortcuts
from rewrites import until_rewritten

from autograder import giveaway, solved
from autograder.nbgrader_cli import nbgrader
from distlab.source import paths
from distlab.source.markers import blank_source

IDS = paths.assignment_ids()
# per notebook: a graded function, one of its blanks, and a wrong answer for it (WRONG in
# solutions/<id>/shortcuts.py, beside the notebook's other secrets)
WRONG = {assignment: wrong for assignment in IDS
         if (wrong := getattr(shortcuts.module_of(assignment), "WRONG", None))}
KINDS = ("solved", "untouched", "shortcuts")
progress = [""]  # make grade's output
CHEAT = "ring_allreduce"  # in 01, the cheat replaces its body with a numpy mean


def cheat(nb):
    """The solved notebook with ring_allreduce's body replaced by a correct numpy mean (code
    changed outside the blanks) and a harmless change in chunk_bounds' docstring."""
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == CHEAT:
            cell.source = ("import numpy as np\n\n"
                           "def ring_allreduce(gpu_grads, op='mean'):\n"
                           "    total = np.sum(gpu_grads, axis=0)\n"
                           "    out = total / len(gpu_grads) if op == 'mean' else total\n"
                           "    return [out.tolist() for _ in gpu_grads]\n")
        elif grade_id == "chunk_bounds":
            cell.source = cell.source.replace('"""(start, end)', '"""My notes. (start, end)', 1)
    return nb


def shortcut_functions(assignment):
    """{function: the shortcut the "shortcuts" student wrote in it}: all but the wrong blank's."""
    return {function: shortcut for function, shortcut in shortcuts.first_of_each(assignment).items()
            if function != WRONG[assignment][0]}


def shortcuts_and_one_wrong_blank(assignment):
    """The solved notebook with one blank answered wrongly and the first shortcut of every other
    function."""
    function, number, wrong = WRONG[assignment]
    nb = shortcuts.submission(assignment, shortcut_functions(assignment))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == function:
            blank = blank_source(cell.source)[1][number - 1]
            lines = cell.source.split("\n")
            lines[blank.line - 1] = lines[blank.line - 1].replace(
                blank.answer, wrong(blank.answer), 1)
            cell.source = "\n".join(lines)
            return nb
    raise AssertionError(f"{assignment}: no solution cell {function}")


def submission(assignment, kind):
    if kind == "solved":
        return solved.load(assignment)
    if kind == "untouched":
        path = paths.ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
        return nbformat.read(str(path), as_version=4)
    return shortcuts_and_one_wrong_blank(assignment)


@pytest.fixture(scope="module")
def grading(tmp_path_factory, start_from_release):
    grading = tmp_path_factory.mktemp("grading")
    start_from_release(grading)
    env = dict(os.environ, DISTLAB_GRADING_DIR=str(grading),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return grading, env


@pytest.fixture(scope="module")
def graded(grading):
    grading, env = grading
    for assignment in IDS:
        if assignment not in WRONG:
            continue
        for kind in KINDS:
            folder = grading / "submitted" / kind / assignment
            folder.mkdir(parents=True)
            nbformat.write(submission(assignment, kind), folder / f"{assignment}.ipynb")
    folder = grading / "submitted" / "cheat" / "01_collectives"
    folder.mkdir(parents=True)
    nbformat.write(cheat(solved.load("01_collectives")), folder / "01_collectives.ipynb")
    folder = grading / "submitted" / "corrupt" / "01_collectives"  # a half-saved file
    folder.mkdir(parents=True)
    text = nbformat.writes(solved.load("01_collectives"))
    (folder / "01_collectives.ipynb").write_text(text[: len(text) // 2])
    result = subprocess.run([sys.executable, "-m", "autograder.batch", *WRONG],
                            cwd=paths.ROOT, env=env, capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    rows, feedback = {}, {}
    progress[0] = result.stdout
    for assignment in WRONG:
        with (grading / "grades" / f"{assignment}.csv").open() as handle:
            rows[assignment] = {row["student"]: row for row in csv.DictReader(handle)}
        feedback[assignment] = {
            kind: (grading / "feedback" / kind / assignment / f"{assignment}.html").read_text()
            for kind in rows[assignment]}
    return rows, feedback


@pytest.mark.parametrize("assignment", IDS)
def test_every_notebook_has_a_wrong_blank_to_grade(assignment):
    """Is every notebook in the grading batch (a wrong blank in its solutions/<id>/shortcuts.py)?"""
    assert assignment in WRONG, f"solutions/{assignment}/shortcuts.py has no WRONG"


@pytest.mark.parametrize("assignment", IDS)
def test_solved_source_gets_full_marks(graded, assignment):
    """Does the solved source, submitted as a student, earn every point?"""
    row = graded[0][assignment]["solved"]
    assert float(row["score"]) == float(row["max_score"]) > 0, row


@pytest.mark.parametrize("assignment", IDS)
def test_untouched_notebook_gets_zero_and_feedback_lists_unfilled_blanks(graded, assignment):
    """Does the untouched learner notebook earn 0, with feedback naming unfilled blanks?"""
    rows, feedback = graded
    assert float(rows[assignment]["untouched"]["score"]) == 0
    assert "not filled yet: [1]" in feedback[assignment]["untouched"]


@pytest.mark.parametrize("assignment", IDS)
def test_one_wrong_blank_costs_its_point_and_is_named(graded, assignment):
    """Does one wrong blank cost that blank's point only (its function's other blanks, and the
    functions without a shortcut, keep full marks), and does feedback name it?"""
    rows, feedback = graded
    function, number, _ = WRONG[assignment]
    row, solved = rows[assignment]["shortcuts"], rows[assignment]["solved"]
    cell = f"{function}_tests"
    assert float(row[cell]) == float(solved[cell]) - 1
    untouched = [c for c in solved if c.endswith("_tests") and c != cell
                 and c.removesuffix("_tests") not in shortcut_functions(assignment)]
    assert all(float(row[c]) == float(solved[c]) for c in untouched), row
    assert f"looks wrong: [{number}]" in feedback[assignment]["shortcuts"]


@pytest.mark.parametrize("assignment", IDS)
def test_feedback_never_shows_hidden_tests_or_answers(graded, assignment):
    """Is no hidden-test source in any feedback page, and on the page of the notebook with
    every blank empty no blank's answer that the notebook does not show (the longer ones,
    which could not appear by chance)?"""
    for html in graded[1][assignment].values():
        assert "HIDDEN TESTS" not in html
        assert "autograder.grade_cell" not in html
    shown = "\n".join(cell.source for cell in submission(assignment, "untouched").cells)
    answers = {b.answer for _, blanks in solved.solution_cells(assignment) for b in blanks
               if len(b.answer) >= 12 and b.answer not in shown}
    leaked = [a for a in answers if a in graded[1][assignment]["untouched"]]
    assert not leaked, leaked


def test_code_changed_outside_the_blanks_earns_nothing_and_is_reported(graded):
    """Does a function body replaced by other (correct) code earn 0, a harmless change
    elsewhere earn nothing and cost nothing, and does the CSV name both for the instructor?"""
    rows, feedback = graded
    row, solved = rows["01_collectives"]["cheat"], rows["01_collectives"]["solved"]
    assert float(row[f"{CHEAT}_tests"]) == 0
    assert float(row["chunk_bounds_tests"]) == float(solved["chunk_bounds_tests"])
    assert row["changed_outside_blanks"].split() == [CHEAT, "chunk_bounds"]
    assert "was changed outside the blanks" in feedback["01_collectives"]["cheat"]
    assert solved["changed_outside_blanks"] == ""


def test_a_corrupt_notebook_gets_its_real_reason_everywhere(graded):
    """Does a half-saved notebook get 0 with the real reason (not valid JSON) in the CSV, in
    make grade's progress line and on the learner's feedback page?"""
    rows, feedback = graded
    reason = rows["01_collectives"]["corrupt"]["not_graded_because"]
    assert reason.startswith("the notebook file is not valid JSON"), reason
    assert float(rows["01_collectives"]["corrupt"]["score"]) == 0
    assert reason in progress[0]
    page = feedback["01_collectives"]["corrupt"]
    assert "not valid JSON" in page and "above traceback" not in page


def test_honest_submissions_raise_no_tampering_warning(grading, graded):
    """Does grading log no "Attribute 'checksum' ... has changed!" for submissions whose locked
    cells are as released (their hidden tests removed at release)?"""
    grading, _ = grading
    logs = "".join(path.read_text() for path in (grading / "logs").glob("slot*.log"))
    assert "Autograding" in logs or "autograd" in logs.lower()
    assert "has changed!" not in logs


def test_nbgrader_cli_grades_like_make_grade(grading, graded):
    """Does `nbgrader autograde` itself (same config: sandbox and judge) give the solved
    source the same full marks as make grade, and does its kernel see no more of the course
    than make grade's: the solved source with the snoops of adversarial/snoop.py after its
    first cell finds nothing?"""
    from adversarial.snoop import SNOOPS

    grading, env = grading
    assignment = IDS[0]
    folder = grading / "submitted" / "cli" / assignment
    folder.mkdir(parents=True)
    submission = solved.load(assignment)
    submission.cells[1:1] = [nbformat.v4.new_code_cell(code) for code in SNOOPS.values()]
    nbformat.write(submission, folder / f"{assignment}.ipynb")
    overrides = {"db_url": f"sqlite:///{grading / 'gradebook.db'}"}
    nbgrader("autograde", assignment, "--student", "cli", "--force", env=env, timeout=900,
             **overrides)
    from nbgrader.api import Gradebook

    with Gradebook(overrides["db_url"]) as book:
        score = book.find_submission(assignment, "cli").score
    assert score == float(graded[0][assignment]["solved"]["score"])
    autograded = nbformat.read(grading / "autograded" / "cli" / assignment /
                               f"{assignment}.ipynb", as_version=4)
    said = [out.get("text", "").strip().splitlines()[-1] for cell in autograded.cells[1:4]
            for out in cell.outputs if out.get("name") == "stdout"]
    assert len(said) == 3 and all(line.endswith(" found 0") for line in said), said


@pytest.mark.parametrize("assignment", [until_rewritten(a) for a in IDS])
def test_what_the_solved_notebook_prints_gives_no_blank_away(grading, graded, assignment):
    """The give-away check with what each cell printed on the screen too: the solved
    submission as make grade ran it (the executed copy the check reuses: it runs nothing)."""
    grading, _ = grading
    executed = nbformat.read(grading / "autograded" / "solved" / assignment /
                             f"{assignment}.ipynb", as_version=4)
    assert any(cell.get("outputs") for cell in executed.cells)
    report = giveaway.check_assignment(assignment, executed=executed)
    assert report.failures() == [], report.text()


@pytest.mark.parametrize("assignment", IDS)
def test_a_shortcut_loses_points_and_the_feedback_names_the_idea(graded, assignment):
    """Does each function that holds a shortcut (tests/shortcuts/) earn less than full marks
    under make grade, while the functions graded beside it keep theirs, and does the feedback
    name the idea the shortcut skipped?"""
    assert shortcuts.first_of_each(assignment), (
        f"{assignment} has no shortcut suite (tests/shortcuts/{assignment}.py)")
    firsts = shortcut_functions(assignment)
    rows, feedback = graded
    row, full = rows[assignment]["shortcuts"], rows[assignment]["solved"]
    for function, shortcut in firsts.items():
        cell = f"{function}_tests"
        assert float(row[cell]) < float(full[cell]), (shortcut.id, row)
        assert shortcut.says.lower() in feedback[assignment]["shortcuts"].lower(), shortcut.id


def test_the_class_report_counts_what_the_batch_planted(grading, graded):
    """Does `python -m autograder.report` on this graded class write one page per notebook and
    count what was planted: per blank the untouched student (not filled), the one wrong blank
    with what was written there, the cheat's changed function, each shortcut's function
    flagged, and per exercise the full marks the CSV shows; students anonymous by default?"""
    from autograder.report import collect, tally

    folder, env = grading
    result = subprocess.run([sys.executable, "-m", "autograder.report", *WRONG], cwd=paths.ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and not result.stderr, result.stdout + result.stderr
    url = f"sqlite:///{folder / 'gradebook.db'}"
    rows = graded[0]
    for assignment, (function, number, wrong) in WRONG.items():
        students = {"solved", "untouched", "shortcuts"} | (
            {"cheat"} if assignment == "01_collectives" else set())
        graded_class = collect.read_class(assignment, url, folder)
        verdicts = {s.student: s.verdicts for s in graded_class.submissions}
        # test_nbgrader_cli_grades_like_make_grade may have added a solved "cli" student
        assert set(verdicts) - students <= {"cli"}
        solved_too = len(set(verdicts) - students)
        assert set(verdicts) >= students
        assert f"{assignment}: {len(verdicts)} graded" in result.stdout
        page = (folder / "reports" / f"{assignment}.html").read_text()
        assert re.search(r"student [0-9a-f]{6}", page)  # anonymous
        assert not re.search(rf"student ({'|'.join(students)})\b", page)
        tallies = {(t.function, t.blank.number): t
                   for t in tally.blank_tallies(graded_class, collect.exercise_blanks(assignment))}
        for (fn, n), t in tallies.items():
            by_shortcuts = n in verdicts["shortcuts"][fn]["lost"]  # a shortcut, or the wrong blank
            cheated = assignment == "01_collectives" and fn == CHEAT
            assert by_shortcuts or (fn, n) != (function, number), t.label
            assert t.unfilled == 1, t.label  # the untouched notebook
            assert t.lost == 1 + by_shortcuts + cheated, t.label
        planted = tally.normalized(wrong(tallies[function, number].blank.answer))
        assert tallies[function, number].wrong[planted] == 1
        flags = {(f.student, f.function, f.kind)
                 for f in tally.flags(graded_class, lambda student: student)}
        assert not any(f[0] in ("solved", "untouched") for f in flags), flags
        for shortcut in (function, *shortcut_functions(assignment)):
            assert ("shortcuts", shortcut, tally.FAILED_FILLED) in flags, (shortcut, flags)
        if assignment == "01_collectives":
            assert graded_class.not_graded == ["corrupt"]
            assert {f[1] for f in flags if f[0] == "cheat"} == {CHEAT, "chunk_bounds"}
        solved_row = rows[assignment]["solved"]
        for cell, (full, total) in tally.full_marks(graded_class).items():
            assert (full, total) == (solved_too + sum(float(rows[assignment][s][cell]) >= float(
                solved_row[cell]) for s in students), len(verdicts)), cell
    browser_check(folder / "reports" / "01_collectives.html")


def browser_check(page_path: Path) -> None:
    """The report opens in Chromium: its chart is drawn and its tables are there."""
    import importlib.util

    from lab_server import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists() or importlib.util.find_spec("playwright") is None:
        pytest.skip(f"the report's counts pass; its browser check needs {CHROMIUM} and "
                    "playwright (`apt-get install -y chromium`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(page_path.as_uri())
            assert page.evaluate("document.querySelector('img').naturalWidth") > 0
            assert page.locator("#changed + p + table tr").count() == 3  # header, 2 changed
            assert page.locator("text=what the class missed").count() == 1
        finally:
            browser.close()
