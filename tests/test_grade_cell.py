"""Does grade(fn) give a point per blank and name the blank that is wrong?"""

import copy
import linecache
import sys
import warnings

import pytest

from autograder import diagnose, exercises, grade_cell, reference
from distlab.source.markers import blank_source

SOLVED = '''def ring_sum(grads):
    N = len(grads)
    size = len(grads[0]) // N
    chunks = [[list(g[j * size:(j + 1) * size]) for j in range(N)] for g in grads]
    for step in range(N - 1):
        new = copy.deepcopy(chunks)
        for i in range(N):
            send = (i - step) % N   # BLANK which chunk?
            dst = (i + 1) % N       # BLANK next GPU
            for k in range(size):
                new[dst][send][k] = chunks[dst][send][k] + chunks[i][send][k]  # BLANK add
        chunks = new
    for step in range(N - 1):
        new = copy.deepcopy(chunks)
        for i in range(N):
            send = (i - step + 1) % N  # BLANK
            dst = (i + 1) % N
            new[dst][send] = list(chunks[i][send])  # BLANK `list(chunks[i][send])`
        chunks = new
    return [[v for c in row for v in c] for row in chunks]
'''
TEMPLATE, BLANKS = blank_source(SOLVED)


class Cell:
    source = SOLVED


def ring_sum_test(fn, rng):
    for n in range(1, 6):
        grads = rng.integers(0, 9, size=(n, 2 * n)).tolist()
        result = fn(copy.deepcopy(grads))
        expected = [sum(column) for column in zip(*grads, strict=True)]
        assert all(row == expected for row in result), f"world_size={n}: wrong sums"


@pytest.fixture(autouse=True)
def exercise(monkeypatch):
    monkeypatch.setattr(reference, "locate", lambda name: ("00_toy", Cell, BLANKS))
    monkeypatch.setitem(exercises.TESTS, "ring_sum", ring_sum_test)


def assess(fn):
    """grade()'s verdict as data: (earned, possible, report lines)."""
    return grade_cell.assess(fn.__name__, diagnose.source_of(fn),
                             lambda src: fn if src is None else diagnose.rebuild(fn, src))


def define(source):
    """Define a function the way a notebook cell does (source readable via linecache)."""
    filename = f"<cell-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"copy": copy, "sys": sys, "warnings": warnings}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["ring_sum"]


def test_solved_function_earns_every_point(capsys):
    """Does the reference earn one point per blank, 5 of 5?"""
    assert grade_cell.grade(define(SOLVED)) == 5.0
    assert "every hidden test passed" in capsys.readouterr().out


def test_untouched_template_earns_zero_and_lists_unfilled_blanks(capsys):
    """Does the released template earn 0 and say which blanks are empty?"""
    assert grade_cell.grade(define(TEMPLATE)) == 0.0
    out = capsys.readouterr().out
    assert "not filled yet: [1] (which chunk?), [2] (next GPU), [3] (add), [4], [5]" in out


def test_one_wrong_blank_costs_one_point_and_is_named(capsys):
    """Does one wrong blank cost exactly its point, and is it named with its hint?"""
    learner = SOLVED.replace("(i + 1) % N       # BLANK next GPU", "(i + 2) % N")
    assert grade_cell.grade(define(learner)) == 4.0
    out = capsys.readouterr().out
    assert "looks wrong: [2] (next GPU)" in out
    assert "(i + 1) % N" not in out  # the answer is never shown


def test_two_wrong_blanks_are_both_named():
    """Are two wrong blanks both found (3 of 5)?"""
    learner = SOLVED.replace("(i + 1) % N       # BLANK next GPU", "(i + 2) % N")
    learner = learner.replace("(i - step) % N   # BLANK which chunk?", "(i - step - 1) % N")
    verdict = assess(define(learner))
    assert verdict.earned == 3.0
    assert "[1] (which chunk?), [2] (next GPU)" in "\n".join(verdict.report)


def test_the_verdict_keeps_each_blanks_fill_and_which_lost_for_the_class_report():
    """Does the verdict record what was written in each blank, which blanks lost their point
    (unfilled ones too) and the hidden test's complaint, for the class report?"""
    learner = TEMPLATE.replace("send = _____  # [1] which chunk?", "send = (i-step-1)%N"
                               ).replace("dst = _____  # [2] next GPU", "dst = (i + 1) % N")
    verdict = assess(define(learner))
    assert (verdict.earned, verdict.lost, verdict.unfilled) == (1.0, [1, 3, 4, 5], [3, 4, 5])
    assert verdict.fills[1] == "(i-step-1)%N" and verdict.fills[2] == "(i + 1) % N"
    assert verdict.changed == ""
    learner = SOLVED.replace("(i + 1) % N       # BLANK next GPU", "(i + 2) % N")
    verdict = assess(define(learner))
    assert verdict.lost == [2] and verdict.fills[2] == "(i + 2) % N"
    assert "wrong sums" in verdict.reason


def test_extra_lines_and_spacing_do_not_confuse_the_alignment():
    """Does a learner's debug print and different spacing still line up with the blanks?"""
    learner = TEMPLATE.replace(
        "send = _____  # [1] which chunk?", "print('debug', i)\n            send = (i-step)%N")
    earned, _, report = assess(define(learner))
    assert earned == 1.0
    assert "not filled yet: [2] (next GPU), [3] (add), [4], [5]" in "\n".join(report)


def test_code_rewritten_beyond_the_blanks_earns_zero_with_advice():
    """If the learner broke a line outside the blanks so that the blanks cannot be read back,
    is it 0 with the changed line named, not blamed on a blank?"""
    learner = SOLVED.replace("for step in range(N - 1):\n        new = copy.deepcopy(chunks)\n"
                             "        for i in range(N):\n            send = (i - step) % N",
                             "for step in range(N - 2):\n        new = copy.deepcopy(chunks)\n"
                             "        for i in range(N):\n            send = (i - step) % N", 1)
    earned, _, report = assess(define(learner))
    assert earned == 0.0
    assert "line 5 was changed outside the blanks: for step in range(N - 2):" in report[1]
    assert "restore the released code" in report[2]


def test_nothing_reaches_stderr_even_when_the_learner_writes_there(capfd):
    """Does grading keep the learner's stderr prints and warnings out of the cell?"""
    learner = SOLVED.replace(
        "    N = len(grads)\n",
        "    N = len(grads)\n    print('noise', file=sys.stderr)\n    warnings.warn('careful')\n")
    assert grade_cell.grade(define(learner)) == 5.0
    captured = capfd.readouterr()
    assert captured.err == ""
    assert "noise" not in captured.out


def test_grader_error_is_reported_as_zero_not_raised(monkeypatch, capsys):
    """If the grader itself cannot grade (no such exercise), does the cell still get a value?"""
    monkeypatch.setattr(reference, "locate", lambda name: (_ for _ in ()).throw(KeyError(name)))
    assert grade_cell.grade(define(SOLVED), points=5) == 0.0
    assert "could not grade" in capsys.readouterr().out


def test_student_seed_changes_the_cases(monkeypatch):
    """Do different students get different (but reproducible) hidden-test seeds?"""
    monkeypatch.setenv("DISTLAB_STUDENT", "alice")
    alice = grade_cell.seed_for("ring_sum")
    monkeypatch.setenv("DISTLAB_STUDENT", "bob")
    assert grade_cell.seed_for("ring_sum") != alice
    monkeypatch.setenv("DISTLAB_STUDENT", "alice")
    assert grade_cell.seed_for("ring_sum") == alice


def test_a_whole_statement_blank_is_found_between_its_neighbours():
    """Is a blank that is a whole statement read from the line between its neighbours, not
    from the first line that happens to come next?"""
    from autograder.diagnose import read_fills

    solved = "def f(x):\n    y = x + 1\n    log(y)  # BLANK\n    z = y * 2  # BLANK\n    return z"
    template, blanks = blank_source(solved)
    learner = "def f(x):\n    y = x + 1\n    print(y)\n    z = y * 3\n    return z"
    filled = read_fills(learner, template, blanks)
    assert filled.fills == {1: "print(y)", 2: "y * 3"}
    assert filled.where == [2, 3]


COUNTER = '''class Counter:
    """Counts calls; reset() starts again."""

    def __init__(self, start=0):
        self.count = start  # BLANK where counting starts

    def __call__(self):
        self.count += 1  # BLANK
        return self.count

    def reset(self):
        self.count = 0
'''


def cell_class(source: str, name: str):
    """`name` defined from `source` as a notebook cell defines it: its module (__main__ here)
    has no file, and the cell's text is only in linecache."""
    filename = f"<cell-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def counter_test(cls, rng):
    for start in rng.integers(0, 5, size=3).tolist():
        counter = cls(start)
        assert [counter() for _ in range(3)] == [start + 1, start + 2, start + 3], \
            f"Counter({start}) counted wrongly"


def test_a_class_is_graded_per_blank_like_a_function(monkeypatch):
    """Is a class (found in its notebook cell, where inspect cannot find it) graded like a
    function: full marks when right, and its wrong blank named?"""
    template, blanks = blank_source(COUNTER)

    class CounterCell:
        source = COUNTER

    monkeypatch.setattr(reference, "locate", lambda name: ("00_toy", CounterCell, blanks))
    monkeypatch.setitem(exercises.TESTS, "Counter", counter_test)
    right = cell_class(COUNTER, "Counter")
    assert diagnose.source_of(right).startswith("class Counter:")
    assert tuple(assess(right))[:2] == (2.0, 2.0)
    wrong = cell_class(COUNTER.replace("self.count += 1  #", "self.count += 2  #"), "Counter")
    earned, possible, report = assess(wrong)
    assert (earned, possible) == (1.0, 2.0)
    assert "looks wrong: [2]" in "\n".join(report)


def test_an_unfilled_blank_in_a_class_is_named():
    """Does require_filled name the unfilled line of a class defined in a cell?"""
    from distlab import BlankNotFilled, require_filled

    template, _ = blank_source(COUNTER)
    cls = cell_class("from distlab import _____\n" + template, "Counter")
    with pytest.raises(BlankNotFilled, match="Counter still has 2 blank line"):
        require_filled(cls)


def test_a_body_replaced_outside_the_blanks_earns_nothing():
    """Does a function whose body was replaced by other code (a numpy sum, say) earn 0, with a
    report naming the changed line, even though it returns the right values?"""
    cheat = ("def ring_sum(grads):\n"
             "    import numpy as np\n"
             "    total = np.sum(grads, axis=0).tolist()\n"
             "    return [total for _ in grads]\n")
    fn = cell_function(cheat, "ring_sum")
    earned, possible, report = assess(fn)
    assert earned == 0 and possible == len(BLANKS)
    assert "line 2 was changed outside the blanks" in "\n".join(report), report


def test_a_changed_line_is_graded_as_released_with_the_fills():
    """Does a line changed outside the blanks earn nothing (it is graded as released), while the
    blanks still earn their points, and does the report say which line changed?"""
    changed = SOLVED.replace("    N = len(grads)\n", "    N = len(grads)  # world size\n"
                             ).replace("return [[v for c in row for v in c] for row in chunks]",
                                       "return [[0 for c in row for v in c] for row in chunks]")
    verdict = assess(cell_function(changed, "ring_sum"))
    earned, possible, report = verdict
    assert earned == possible, report
    assert verdict.changed.startswith("line ") and "return [[0" in verdict.changed
    assert any("was changed outside the blanks" in line and "return [[0" in line
               for line in report), report


def test_spacing_comments_and_a_fill_over_several_lines_are_not_changes():
    """Are other spacing, other comments and a fill split over lines still the learner's own
    code (no change reported, full marks)?"""
    respaced = SOLVED.replace("send = (i - step) % N   # BLANK which chunk?",
                              "send = ((i -\n                     step) % N)  # mine").replace(
        "    N = len(grads)", "    N = len( grads )")
    earned, possible, report = assess(cell_function(respaced, "ring_sum"))
    assert earned == possible and not any("changed" in line for line in report), report


def cell_function(source: str, name: str):
    """`name` defined from `source` in a file linecache knows (as a notebook cell would)."""
    filename = f"<cell-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__", "copy": copy}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]
