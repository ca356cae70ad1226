"""`grade(fn)`: what a graded cell calls. Runs the hidden test of the learner's function and
returns the points earned (nbgrader reads the cell's value as partial credit).

Points are per blank: a function with five blanks, one of them wrong, earns 4 of 5. The
report names unfilled blanks and the blank(s) most likely wrong, with their hints; it never
shows the hidden test or an answer. Nothing is written to stderr: nbgrader gives a cell that
does 0 points.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
import tempfile
import time
import warnings
import zlib
from dataclasses import dataclass, field

import numpy as np

from autograder import diagnose, reference
from autograder.exercises import test_for
from distlab.blanks import unfilled_lines
from distlab.source import settings
from distlab.source.changes import changed_outside_blanks
from distlab.source.definitions import functions
from distlab.source.markers import blank_source


def seed_for(name: str, student: str | None = None) -> int:
    """The hidden tests' seed: fixed per function and student (reproducible regrades)."""
    student = settings.student() if student is None else student
    return zlib.crc32(f"{student}/{name}".encode())


@contextlib.contextmanager
def quiet():
    """Keep everything the code under test writes (Python or C level) out of the cell."""
    sink = io.StringIO()
    saved = []
    try:
        for fd in (1, 2):
            sys.stdout.flush()
            sys.stderr.flush()
            saved.append((fd, os.dup(fd)))
            tmp = tempfile.TemporaryFile()
            os.dup2(tmp.fileno(), fd)
            tmp.close()
    except OSError:
        pass
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield sink
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)


def _failure(test, make, source: str | None, seed: int) -> str | None:
    """None if the function `make(source)` builds passes its hidden test, else a one-line
    reason a learner can act on."""
    fn = None
    try:
        with quiet():
            fn = make(source)
            test(fn, np.random.default_rng(seed))
    except AssertionError as err:
        return str(err) or "a hidden test failed"
    except BaseException as err:  # noqa: BLE001 - any crash of learner code is a failure
        if isinstance(err, KeyboardInterrupt | SystemExit):
            return f"the code stopped the test ({type(err).__name__})"
        return f"{type(err).__name__}: {err}".splitlines()[0]
    finally:
        getattr(fn, "close", lambda: None)()
    return None


def _labels(blanks, numbers) -> str:
    return ", ".join(
        f"[{b.number}]" + (f" ({b.hint})" if b.hint else "") for b in blanks if b.number in numbers
    )


MAX_FILL_CHARS = 300  # of a learner's fill kept in the verdict (the class report shows it)


@dataclass
class Verdict:
    """What grading one learner function decided. It unpacks as (earned, possible, report);
    the rest is what the class report (autograder/report/) reads back from the autograded
    notebook, where JudgeGrades stores it (`record()`)."""

    earned: float
    possible: float
    report: list[str]
    fills: dict[int, str] = field(default_factory=dict)  # blank -> what was graded there
    lost: list[int] = field(default_factory=list)  # blanks that earned nothing
    unfilled: list[int] = field(default_factory=list)
    changed: str = ""  # `line N: code` changed outside the blanks (graded as released)
    reason: str = ""  # the hidden test's complaint: the idea it names

    def __iter__(self):
        return iter((self.earned, self.possible, self.report))

    def record(self) -> dict:
        """Plain data for a notebook's metadata (JSON keys are strings)."""
        return {"earned": self.earned, "possible": self.possible, "lost": self.lost,
                "unfilled": self.unfilled, "changed": self.changed, "reason": self.reason,
                "fills": {str(n): text[:MAX_FILL_CHARS] for n, text in self.fills.items()}}


def assess(name: str, learner_source: str, make, points: float | None = None,
           student: str | None = None) -> Verdict:
    """The verdict on learner function `name`: (earned, possible, report lines), and per blank
    what was graded there and whether it earned its point.

    `make(None)` gives the learner's function as submitted; `make(source)` the function defined
    by `source` (the learner's code with some blanks set to the reference answers).
    """
    _, cell, blanks = reference.locate(name)
    test = test_for(name)
    possible = float(points if points is not None else max(len(blanks), 1))
    every = sorted(b.number for b in blanks)
    seed = seed_for(name, student)
    template, _ = blank_source(cell.source)
    filled = diagnose.read_fills(learner_source, template, blanks)
    # Only the blanks are the learner's: code changed elsewhere is graded as released.
    notes, graded, where = [], None, ""
    changed = changed_outside_blanks(name, learner_source, template)
    if changed is not None:
        line, text = changed
        where = f"line {line}: {text}"
        if not filled.aligned():
            return Verdict(0.0, possible, [
                f"✗ {name}", f"  line {line} was changed outside the blanks: {text}",
                "  and the blanks could not be read back: restore the released code and "
                "change only the `_____` parts"], lost=every, changed=where)
        notes = [f"  line {line} was changed outside the blanks ({text}): that change earns "
                 "nothing; graded as released, with your fills"]
        graded = functions(filled.on_template(template))[name]
        filled = diagnose.read_fills(graded, template, blanks)
    unfilled = filled.unfilled()

    def verdict(earned: float, report: list[str], lost=(), reason: str = "") -> Verdict:
        return Verdict(earned, possible, report, filled.fills, sorted(lost), sorted(unfilled),
                       where, reason)

    # An unfilled blank earns nothing, even where the function returns before reaching it.
    empty = unfilled_lines(graded or learner_source)
    reason = "a blank is not filled yet" if empty else _failure(test, make, graded, seed)
    if reason is None:
        return verdict(possible, [f"✓ {name}: every hidden test passed", *notes])

    wrong = None
    if blanks and filled.aligned() and unfilled == set(every):
        wrong = unfilled  # nothing filled, nothing to search: no blank earns a point
    elif blanks and filled.aligned():
        wrong = diagnose.wrong_blanks(
            filled, blanks, lambda source: _failure(test, make, source, seed) is None)
    report = [f"✗ {name}", *notes]
    if unfilled:
        report.append(f"  not filled yet: {_labels(blanks, unfilled)}")
    if wrong is None:
        report.append(f"  a hidden test failed: {reason}")
        report.append("  it is not one blank alone: check each blank's hint, and any line you "
                      "changed outside the blanks")
        return verdict(0.0, report, every, reason)
    if wrong - unfilled:
        report.append(f"  looks wrong: {_labels(blanks, wrong - unfilled)}")
        report.append(f"  a hidden test failed: {reason}")
    earned = round(possible * (len(blanks) - len(wrong)) / len(blanks), 2)
    return verdict(earned, report, wrong, reason if wrong - unfilled else "")


def report_text(name: str, earned: float, possible: float, report: list[str]) -> str:
    return "\n".join(report) + f"\nscore: {earned:g} / {possible:g}\n"


def grade(fn, points: float | None = None) -> float | None:
    """Grade a learner function in this kernel; print the report; return the points earned.

    Under `make grade` (DISTLAB_JUDGE set) the judge grades outside the kernel instead, and
    what this cell shows is replaced by its verdict.
    """
    if settings.judged():
        print("graded outside the notebook by the course's judge")
        return None
    name = getattr(fn, "__name__", str(fn))

    def make(source):
        return fn if source is None else diagnose.rebuild(fn, source)

    try:
        earned, possible, report = assess(name, diagnose.source_of(fn), make, points)
    except Exception as err:  # noqa: BLE001 - the grader itself must never crash the cell
        earned, possible, report = 0.0, float(points or 0), [f"✗ could not grade: {err}"]
    print(report_text(name, earned, possible, report), end="")
    return earned


def function_source(cells: list[str], name: str) -> str:
    """The source of the last top-level `def name` in the cells (the one a kernel would use)."""
    found = ""
    for code in cells:
        found = functions(code).get(name, found)
    return found


def verdicts(cells: list[str], graded: list[tuple[str, float | None]], student: str,
             slot: int = 0, limits=None, call_seconds: float | None = None,
             function_seconds: float = math.inf) -> list[Verdict]:
    """The Verdict of each (function, points) of a submission whose code cells are `cells`,
    decided outside the learner's kernel: the hidden tests run here against the judge's
    `Remote`s (autograder.judge), the learner's functions in its sandboxed runner. One runner,
    started once, serves the whole submission; each graded function, and each candidate of the
    wrong-blank search (the learner's code with some reference answers in it), runs in a fresh
    process forked from it. Runners are sandboxed with `limits`; one call may take
    `call_seconds` (default: the judge's CALL_TIMEOUT), and one function's hidden test and
    wrong-blank search together `function_seconds` (then it is not one blank).
    """
    from autograder.judge import CALL_TIMEOUT, Remote, Runner  # the grading side's, not a kernel's

    runner = Runner(cells, slot=slot, limits=limits,
                    call_seconds=CALL_TIMEOUT if call_seconds is None else call_seconds)
    try:
        results = []
        for name, points in graded:
            runner.deadline = time.monotonic() + function_seconds

            def make(candidate: str | None, name=name):
                runner.fork(candidate)
                return Remote(runner, name)

            try:
                results.append(assess(name, function_source(cells, name), make, points,
                                      student))
            except Exception as err:  # noqa: BLE001 - one broken exercise must not sink the rest
                results.append(Verdict(0.0, float(points or 0), [
                    f"✗ {name}: could not be graded ({type(err).__name__})"]))
        return results
    finally:
        runner.close()
