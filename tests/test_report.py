"""Does the class report count what a graded class holds? A synthetic class of 300 students of
01_collectives is written as make grade leaves it (gradebook rows and autograded notebooks with
the judge's verdicts), with wrong answers drawn from the strength check's mutants of the real
blanks, written with other spacing and parentheses; the report's counts must be the planted
ones.
"""

import json
import random
from collections import Counter

import pytest

from autograder import mutants
from autograder.report import collect, tally
from autograder.report.cli import main, report

ASSIGNMENT = "01_collectives"
STUDENTS = 300


def respaced(text: str, rng: random.Random) -> str:
    """The same answer as a learner might type it: other spacing, redundant parentheses."""
    return rng.choice([text, f"({text})", f" {text}  ", text.replace(", ", " ,  ")])


def plan_class(rng: random.Random) -> dict:
    """Per student and graded function, what was planted: each blank right, wrong (a mutant)
    or unfilled; some functions failed as a whole, or changed outside the blanks."""
    blanks = collect.exercise_blanks(ASSIGNMENT)
    wrong_rate = {fn: {b.number: rng.choice([0.0, 0.05, 0.3, 0.6]) for b in bs}
                  for fn, bs in blanks.items()}
    made = {(fn, b.number): [m.text for m in mutants.generate(b.answer)]
            for fn, bs in blanks.items() for b in bs}
    plan = {}
    for index in range(STUDENTS):
        student = f"learner{index:03d}"
        plan[student] = {}
        for function, bs in blanks.items():
            fills, lost, unfilled = {}, [], []
            for blank in bs:
                wrong = made[function, blank.number]
                roll = rng.random()
                if roll < 0.05:
                    fills[blank.number] = "_____"
                    unfilled.append(blank.number)
                    lost.append(blank.number)
                elif wrong and roll < 0.05 + wrong_rate[function][blank.number]:
                    fills[blank.number] = respaced(rng.choice(wrong), rng)
                    lost.append(blank.number)
                else:
                    fills[blank.number] = blank.answer
            whole = rng.random() < 0.02  # the test failed in a way no one blank explains
            changed = "line 3: return 0" if rng.random() < 0.01 else ""
            if whole:
                lost = [b.number for b in bs]
            reason = "world_size=3: GPU 0 holds [1], expected [2]" if lost else ""
            plan[student][function] = {
                "function": function, "earned": float(len(bs) - len(lost)),
                "possible": float(len(bs)), "lost": lost, "unfilled": unfilled,
                "changed": changed, "reason": reason if lost and not unfilled else "",
                "fills": {str(n): text for n, text in fills.items()}}
    return plan


def write_class(grading, plan: dict) -> str:
    """The gradebook and autograded notebooks make grade would leave for `plan`."""
    from nbformat.v4 import new_code_cell, new_notebook
    from nbgrader.api import Base, Grade, Gradebook, Student, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import create_engine

    url = f"sqlite:///{grading / 'gradebook.db'}"
    functions = list(next(iter(plan.values())))
    # nbgrader's tables, made here: a new gradebook would first ask the `alembic` program for
    # its schema version (a process that takes seconds), which the report never reads
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    engine.dispose()
    with Gradebook(url) as gb:
        assignment = gb.add_assignment(ASSIGNMENT)
        notebook = gb.add_notebook(ASSIGNMENT, ASSIGNMENT)
        cells = {function: gb.add_grade_cell(
            f"{function}_tests", ASSIGNMENT, ASSIGNMENT, cell_type="code",
            max_score=plan["learner000"][function]["possible"]) for function in functions}
        # the rows nbgrader's add_submission and autograde write, in one commit (its API
        # commits per student: seconds for a class of hundreds)
        for student, verdicts in plan.items():
            submitted = SubmittedNotebook(notebook=notebook, assignment=SubmittedAssignment(
                assignment=assignment, student=Student(id=student)))
            gb.db.add_all([Grade(cell=cells[fn], notebook=submitted, needs_manual_grade=False,
                                 auto_score=verdict["earned"])
                           for fn, verdict in verdicts.items()])
        gb.db.commit()
    for student, verdicts in plan.items():
        cells = [new_code_cell(f"grade({fn})", metadata={
            "nbgrader": {"grade": True, "grade_id": f"{fn}_tests"},
            "distlab": {"verdict": verdict}}) for fn, verdict in verdicts.items()]
        folder = grading / "autograded" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(new_notebook(cells=cells)))
    corrupt = grading / "submitted" / "corrupt" / ASSIGNMENT  # submitted, never graded
    corrupt.mkdir(parents=True)
    return url


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    grading = tmp_path_factory.mktemp("grading")
    plan = plan_class(random.Random(29))
    return grading, write_class(grading, plan), plan


def test_each_blank_is_lost_by_the_planted_students(planted):
    """Does every blank's tally count exactly the students planted wrong, unfilled, or lost
    with their function, and are the blanks sorted by the share lost?"""
    grading, url, plan = planted
    graded = collect.read_class(ASSIGNMENT, url, grading)
    assert len(graded.submissions) == STUDENTS and graded.not_graded == ["corrupt"]
    blanks = collect.exercise_blanks(ASSIGNMENT)
    tallies = tally.blank_tallies(graded, blanks)
    assert len(tallies) == sum(len(bs) for bs in blanks.values())
    shares = [t.share for t in tallies]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0.3
    for t in tallies:
        verdicts = [plan[s][t.function] for s in plan]
        number = t.blank.number
        assert t.lost == sum(number in v["lost"] for v in verdicts), t.label
        assert t.unfilled == sum(number in v["unfilled"] for v in verdicts), t.label
        planted_wrong = Counter(
            tally.normalized(v["fills"][str(number)]) for v in verdicts
            if number in v["lost"] and number not in v["unfilled"]
            and v["fills"][str(number)] != t.blank.answer)
        assert t.wrong == planted_wrong, t.label


def test_wrong_answers_written_differently_are_one_group(planted):
    """Are `(x)`, `x` and `x` with other spacing counted as one wrong answer?"""
    grading, url, plan = planted
    tallies = tally.blank_tallies(collect.read_class(ASSIGNMENT, url, grading),
                                  collect.exercise_blanks(ASSIGNMENT))
    worst = next(t for t in tallies if t.wrong)
    raw = Counter(plan[s][worst.function]["fills"][str(worst.blank.number)] for s in plan)
    assert len(worst.wrong) < len([text for text in raw if text != worst.blank.answer])


def test_full_marks_and_flags_are_the_planted_ones(planted):
    """Is each exercise's full-marks count the planted one, and is every change outside the
    blanks and every filled function that failed flagged, under an anonymous label?"""
    grading, url, plan = planted
    graded = collect.read_class(ASSIGNMENT, url, grading)
    full = tally.full_marks(graded)
    for function in plan["learner000"]:
        assert full[f"{function}_tests"] == (
            sum(not plan[s][function]["lost"] for s in plan), STUDENTS)
    flags = tally.flags(graded, lambda s: tally.anonymous(s, b"key"))
    changed = {(tally.anonymous(s, b"key"), fn) for s in plan for fn, v in plan[s].items()
               if v["changed"]}
    assert {(f.student, f.function) for f in flags if f.kind == tally.CHANGED} == changed
    failed = sum(bool(v["lost"] and not v["unfilled"]) for s in plan for v in plan[s].values())
    assert sum(f.kind == tally.FAILED_FILLED for f in flags) == failed
    assert all(f.student.startswith("student ") and "learner" not in f.student for f in flags)


def test_the_page_is_written_anonymous_unless_names_are_asked(planted, tmp_path):
    """Does the report write one HTML page with the chart embedded, no student id by default,
    the ids with --names, and a summary naming the worst blank?"""
    grading, url, plan = planted
    lines = report(ASSIGNMENT, url, grading, tmp_path, names=False, worst=5)
    full = sum(not any(v["lost"] for v in plan[s].values()) for s in plan)
    assert lines[0] == f"{ASSIGNMENT}: {STUDENTS} graded, 1 not graded; {full} with full marks"
    page = (tmp_path / f"{ASSIGNMENT}.html").read_text()
    assert "data:image/png;base64," in page and "learner0" not in page
    worst = tally.blank_tallies(collect.read_class(ASSIGNMENT, url, grading),
                                collect.exercise_blanks(ASSIGNMENT))[0]
    assert worst.label in lines[1] and worst.label in page
    report(ASSIGNMENT, url, grading, tmp_path, names=True, worst=5)
    assert "learner0" in (tmp_path / f"{ASSIGNMENT}.html").read_text()


def test_a_class_graded_before_verdicts_were_kept_is_told_to_regrade(tmp_path, planted):
    """Does a submission whose autograded notebook holds no verdict get left out, with the
    advice to grade again, rather than counted as all right?"""
    grading, url, plan = planted
    empty = tmp_path / "grading"
    for student in plan:  # autograded notebooks without verdicts
        folder = empty / "autograded" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps({"cells": []}))
    lines = report(ASSIGNMENT, url, empty, tmp_path, names=False, worst=5)
    assert lines[0] == f"{ASSIGNMENT}: nothing graded"
    assert f"{STUDENTS} submission(s) graded before" in lines[1] and "make grade" in lines[1]


def test_an_assignment_nobody_handed_in_is_left_out(planted, tmp_path):
    """Does an assignment without submissions give no page and no summary line?"""
    grading, url, _ = planted
    assert report("02_cost_models", url, grading, tmp_path, names=False, worst=5) == []
    assert not (tmp_path / "02_cost_models.html").exists()


def test_a_function_that_could_not_be_graded_loses_every_blank():
    """Does a verdict with points lost but no blank named (the judge could not grade the
    function) count every blank of it as lost with its function, not as right?"""
    blanks = collect.exercise_blanks(ASSIGNMENT)
    function = next(iter(blanks))
    verdict = {"function": function, "earned": 0.0, "possible": float(len(blanks[function])),
               "lost": [], "unfilled": [], "changed": "", "reason": "", "fills": {}}
    graded = collect.GradedClass(ASSIGNMENT, [collect.Submission("ann", {}, {function: verdict})])
    tallies = tally.blank_tallies(graded, {function: blanks[function]})
    assert [(t.lost, t.with_function, t.graded) for t in tallies] == [(1, 1, 1)] * len(tallies)


def test_without_a_gradebook_it_says_to_grade_first(tmp_path, monkeypatch, capsys):
    """Does make report before any make grade stop with a message saying so?"""
    monkeypatch.setenv("DISTLAB_GRADING_DIR", str(tmp_path))  # nbgrader_config.py's gradebook
    with pytest.raises(SystemExit, match="no gradebook at .*: run make grade first"):
        main([ASSIGNMENT])


def test_an_unknown_assignment_is_named_with_the_known_ones(capsys):
    """Does a mistyped id stop the report with the assignments there are?"""
    with pytest.raises(SystemExit):
        main(["01_colectives"])
    assert "no solved source for 01_colectives (assignments: 01_collectives" in \
        capsys.readouterr().err
