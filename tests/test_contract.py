"""The contract of every exercise of every notebook, read from the solved sources alone: each
blank's right and wrong answers are written once, in its marker (`# ACCEPT`, `# REJECT`), and
each notebook's shortcuts and honest answers in tests/shortcuts/<id>.py.

- every solution cell is one function or class with a hidden test, graded by a cell worth one
  point per blank;
- the reference passes its hidden test for several seeds, without a warning or a line on stderr;
- every blank has a wrong answer written by hand (# REJECT);
- a wrong answer earns one point less and grading names its blank, and only it, without quoting
  the reference answer (the first REJECT of each blank: grade() runs the hidden test once more
  per blank of the function to find it);
- every REJECT fails and every ACCEPT passes its hidden test: the blank-strength check
  (tests/system/test_blank_strength.py, sampled) runs each of them, with the generated mutants;
- every shortcut fails, naming the idea it skips, and every honest answer passes
  (tests/test_shortcuts.py).

Run: .venv/bin/python -m pytest tests/test_contract.py -q -n 2
"""

import warnings

import pytest
from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

from autograder import giveaway, reference
from autograder.mutants import blank_answers
from distlab.source import paths

IDS = paths.assignment_ids()
EXERCISES = [(a, name) for a in IDS for name in Notebook(a).graded_units()]


def rejects() -> list[tuple[str, str, int, str]]:
    """(assignment, function, blank number, wrong answer): the first REJECT of every blank."""
    found = []
    for assignment, name in EXERCISES:
        _, cell, blanks = reference.locate(name)
        for blank in blanks:
            _, rejected = blank_answers(cell.source, blanks, blank)
            if rejected:
                found.append((assignment, name, blank.number, rejected[0]))
    return found


REJECTS = rejects()


@pytest.mark.parametrize("assignment", IDS)
def test_every_exercise_has_a_hidden_test_and_points_equal_blanks(assignment):
    units = Notebook(assignment).graded_units()  # asserts both, per solution cell
    assert units, f"{assignment} has no exercise"


@pytest.mark.parametrize("seed", [0, 12345])
@pytest.mark.parametrize(("assignment", "name"), EXERCISES, ids=[n for _, n in EXERCISES])
def test_the_reference_passes_its_hidden_test_quietly(assignment, name, seed, capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fails(name, reference.reference(name), seed) == ""
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("assignment", IDS)
def test_every_blank_has_a_wrong_answer_written_by_hand(assignment):
    """Is there a # REJECT on every blank (the generated mutants come on top)?"""
    covered = {(name, number) for a, name, number, _ in REJECTS if a == assignment}
    missing = [f"{name} [{blank.number}] `{blank.answer}`"
               for a, name in EXERCISES if a == assignment
               for blank in reference.locate(name)[2] if (name, blank.number) not in covered]
    assert missing == []


@pytest.mark.parametrize(("assignment", "name", "number", "wrong"), REJECTS,
                         ids=[f"{n}-{k}" for _, n, k, _ in REJECTS])
def test_grading_names_the_wrong_blank_and_only_it(assignment, name, number, wrong):
    variant = Notebook(assignment).variant(name, number, wrong)
    complaint = fails(name, variant, ignore_warnings=True)
    answer = reference.locate(name)[2][number - 1].answer
    assert complaint, f"{name} [{number}] `{wrong}` passes its hidden test"
    if len(giveaway.tokens(answer)) >= giveaway.MIN_TOKENS:  # `x` or `0` stand anywhere
        assert answer not in complaint, complaint
    earned, possible, report = assess(variant, name)
    assert earned == possible - 1, report
    (line,) = [line for line in report if "looks wrong" in line]
    assert f"[{number}]" in line and line.count("[") == 1, report
