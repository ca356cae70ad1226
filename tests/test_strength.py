"""Does the blank-strength check run every wrong answer against the hidden test, name the blank
(file:line) of each one that survives, accept listed equivalents, and stop hung mutants?

The check itself runs on every notebook in `make test`, after pytest (`python -m
autograder.strength`), and prints its report there.
"""

import re

import pytest

from autograder import exercises, strength

TOY = '''# %%
from distlab import _____

# %% solution="{name}"
{code}

# %% tests="{name}_tests" points=1
### BEGIN HIDDEN TESTS
from autograder.grade_cell import grade
grade({name})
### END HIDDEN TESTS
'''

NEXT_GPU = '''def next_gpu(i, n):
    """The GPU after GPU i on a ring of n."""
    return (i + 1) % n  # BLANK the next GPU round the ring{clauses}'''


def toy(tmp_path, code, name="next_gpu", assignment="00_toy"):
    """A solved source with one solution cell; returns the solutions folder."""
    folder = tmp_path / assignment
    folder.mkdir(parents=True)
    (folder / f"{assignment}.py").write_text(TOY.format(name=name, code=code))
    return tmp_path


def every_gpu(fn, rng):
    for n in range(1, 7):
        for i in range(n):
            assert fn(i, n) == (i + 1) % n, f"n={n}: GPU {i} sends to {fn(i, n)}"


def one_gpu(fn, rng):
    assert fn(0, 1) == 0, "one GPU"


@pytest.fixture
def hidden(monkeypatch):
    """Register hidden tests for toy functions: hidden(name=test, ...)."""
    def register(**tests):
        for name, test in tests.items():
            monkeypatch.setitem(exercises.TESTS, name, test)
    return register


def run(solutions, timeout=None, jobs=1):
    [report] = strength.check(["00_toy"], jobs=jobs, timeout=timeout, solutions=solutions)
    return report


def test_a_weak_hidden_test_leaves_survivors_named_by_file_and_line(tmp_path, hidden):
    """With a hidden test that tries one GPU only, do the wrong neighbours survive, each
    reported with the blank's file:line?"""
    hidden(next_gpu=one_gpu)
    report = run(toy(tmp_path, NEXT_GPU.format(clauses="")))
    survivors = [line for line in report.failures() if "SURVIVES" in line]
    assert any(line.endswith("SURVIVES `(i - 1) % n` (other neighbour): the hidden test passes")
               for line in survivors)
    where = re.match(r"(.*):(\d+): next_gpu \[1\] `\(i \+ 1\) % n`", survivors[0])
    assert where and where[1].endswith("00_toy/00_toy.py")
    solved = (tmp_path / "00_toy" / "00_toy.py").read_text().split("\n")
    assert "# BLANK" in solved[int(where[2]) - 1]
    assert report.text().startswith("00_toy: 1 blanks, ")
    assert "  FAIL " in report.text()


def test_a_strong_hidden_test_catches_every_mutant_and_passes_an_accepted_one(tmp_path,
                                                                              hidden):
    """With a hidden test that tries every GPU, is every mutant caught, and does the accepted
    equivalent pass?"""
    hidden(next_gpu=every_gpu)
    report = run(toy(tmp_path, NEXT_GPU.format(clauses=" # ACCEPT `(1 + i) % n`")))
    counts = report.counts()
    assert report.failures() == []
    assert counts["accepted"] == 1
    assert counts["caught"] == counts["mutants"] - 1 > 5


def test_an_accepted_answer_that_fails_fails_the_check(tmp_path, hidden):
    """Is an ACCEPT that the hidden test rejects reported?"""
    hidden(next_gpu=every_gpu)
    report = run(toy(tmp_path, NEXT_GPU.format(clauses=" # ACCEPT `(i + n - 1) % n`")))
    assert any("ACCEPTED `(i + n - 1) % n` fails the hidden test: n=3: GPU 0 sends to 2" in line
               for line in report.failures())


def test_a_blank_without_mutants_fails_until_a_wrong_answer_is_written(tmp_path, hidden):
    """Is a blank for which nothing can be generated a failure, and does a REJECT fix it?"""
    def nothing(fn, rng):
        assert fn() is None, "returns nothing"

    hidden(clear=nothing)
    code = "def clear():\n    return None  # BLANK what is left{clauses}"
    report = run(toy(tmp_path, code.format(clauses=""), name="clear"))
    assert any("no wrong answer could be made" in line for line in report.failures())

    report = run(toy(tmp_path / "again", code.format(clauses=" # REJECT `0` `[]`"),
                     name="clear"))
    assert report.failures() == []
    assert report.counts()["caught"] == 2


def test_a_hung_mutant_counts_as_caught_after_its_timeout(tmp_path, hidden):
    """Does `i += 0` (an endless loop) stop after the timeout and count as caught, and do the
    mutants after it still run?"""
    def counts(fn, rng):
        assert fn(3) == 3, "count_to(3)"

    hidden(count_to=counts)
    code = ("def count_to(n):\n    i = 0\n    while i < n:\n"
            "        i += 1  # BLANK one step\n    return i")
    report = run(toy(tmp_path, code, name="count_to"), timeout=0.5)
    outcomes = report.cases[0].outcomes
    assert outcomes["0"].timed_out and not outcomes["0"].passed
    assert not outcomes["2"].passed and not outcomes["2"].timed_out
    assert report.failures() == []
    assert "(1 by timeout, 0 by the drill verdicts)" in report.text()


def test_a_worker_that_stops_answering_is_replaced(tmp_path, monkeypatch):
    """Is a worker that ignores its alarm (here: a mutant that blocks SIGALRM and sleeps) killed
    after the grace time, its task counted as caught, and the next task run by a new worker?"""
    monkeypatch.setattr(strength.workers, "KILL_GRACE_S", 0.5)
    solutions = toy(tmp_path, "def f():\n    pass  # BLANK")
    hang = ("import signal\nimport time\n"
            "@(lambda fn: (signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}), "
            "time.sleep(60)))\ndef f():\n    pass")
    base = {"assignment": "00_toy", "solutions": str(solutions), "students": [""],
            "tests": [], "expect_pass": False, "timeout": 0.5}
    workers = strength.Workers(1)
    try:
        first = workers.slots[0]["pid"]
        results = dict(workers.run([{**base, "id": "hang", "source": hang},
                                    {**base, "id": "fine", "source": "def f():\n    pass"}]))
        assert workers.slots[0]["pid"] != first
    finally:
        workers.close()
    assert results["hang"].timed_out and "stopped answering" in results["hang"].reason
    assert results["fine"].passed  # no test to fail


def test_a_reference_that_fails_its_own_test_is_reported(tmp_path, hidden):
    """If the solved function fails its hidden test, is that the report (and no mutant run)?"""
    def never(fn, rng):
        raise AssertionError("never passes")

    hidden(next_gpu=never)
    report = run(toy(tmp_path, NEXT_GPU.format(clauses="")))
    assert any("the reference next_gpu fails its own hidden test: never passes" in line
               for line in report.failures())
    assert not report.cases[0].outcomes


def test_a_mutant_that_does_not_parse_in_its_line_is_skipped(tmp_path, hidden):
    """Is `x + 1` (made from the answer `x`) dropped where it cannot stand: after `del`?"""
    hidden(drop=lambda fn, rng: None)
    code = "def drop(x):\n    y = x + 1\n    del x  # BLANK `x`\n    return y * 2"
    [case] = strength.plan("00_toy", toy(tmp_path, code, name="drop"))
    texts = [m.text for m in case.mutants]
    assert "y" in texts and "x + 1" not in texts


def test_the_clauses_stay_out_of_the_learners_hint(tmp_path, hidden):
    """Is the ACCEPT list read by the check but left out of the hint the learner sees?"""
    hidden(next_gpu=every_gpu)
    [case] = strength.plan("00_toy", toy(tmp_path, NEXT_GPU.format(
        clauses=" # ACCEPT `(1 + i) % n`")))
    assert "ACCEPT" not in case.blank.hint and case.problems == []


def test_the_command_line_exits_1_on_a_survivor(tmp_path, hidden, monkeypatch, capsys):
    """Does `python -m autograder.strength` print each report and exit 1 on a survivor?"""
    hidden(next_gpu=one_gpu)
    solutions = toy(tmp_path, NEXT_GPU.format(clauses=""))
    report = run(solutions)
    monkeypatch.setattr(strength.cli, "check", lambda *args, **options: [report])
    given = strength.giveaway.check
    monkeypatch.setattr(strength.giveaway, "check", lambda ids: given(ids, solutions))
    assert strength.main(["00_toy"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("00_toy: 1 blanks, ") and "blank strength: FAILED" in out
    assert "give-away: ok" in out  # the toy's one blank is a short answer


def test_the_sample_keeps_one_generated_and_every_hand_written_answer_the_same_each_run():
    """Does --sample keep every ACCEPT and REJECT and exactly one generated mutant, the same
    one on every run, in the original order?"""
    from autograder.mutants import Mutant

    mutants = [Mutant("a", "other name"), Mutant("b", "other name"), Mutant("n + 1", "off by one"),
               Mutant("c", "other name"), Mutant("x", "REJECT"), Mutant("y", "ACCEPT", True),
               Mutant("n - 1", "off by one")]
    kept = strength.sampled(mutants)
    assert kept == strength.sampled(list(mutants))
    assert [m.text for m in kept if m.kind in ("REJECT", "ACCEPT")] == ["x", "y"]
    generated = [m for m in kept if m.kind not in ("REJECT", "ACCEPT")]
    assert len(generated) == 1
    again = [m for m in strength.sampled(mutants[::-1]) if m.kind not in ("REJECT", "ACCEPT")]
    assert again == generated  # chosen by its text, not by where it stands
    assert [m for m in mutants if m in kept] == kept
