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
import os
import sys
import tempfile
import warnings
import zlib

import numpy as np

from autograder import diagnose, reference
from autograder.exercises import test_for
from autograder.markers import blank_source


def seed_for(name: str) -> int:
    """The hidden tests' seed: fixed per function, and per student when grading sets one."""
    student = os.environ.get("DISTLAB_STUDENT", "")
    return zlib.crc32(f"{student}/{name}".encode())


@contextlib.contextmanager
def quiet():
    """Keep everything the code under test writes (Python or C level) out of the cell."""
    sink = io.StringIO()
    saved = []
    try:
        for fd in (1, 2):
            sys.stdout.flush(), sys.stderr.flush()
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


def _failure(test, fn, seed: int) -> str | None:
    """None if `fn` passes its hidden test, else a one-line reason a learner can act on."""
    try:
        with quiet():
            test(fn, np.random.default_rng(seed))
    except AssertionError as err:
        return str(err) or "a hidden test failed"
    except BaseException as err:  # noqa: BLE001 - any crash of learner code is a failure
        if isinstance(err, KeyboardInterrupt | SystemExit):
            return f"the code stopped the test ({type(err).__name__})"
        return f"{type(err).__name__}: {err}".splitlines()[0]
    return None


def _labels(blanks, numbers) -> str:
    return ", ".join(
        f"[{b.number}]" + (f" ({b.hint})" if b.hint else "") for b in blanks if b.number in numbers
    )


def assess(fn, points: float | None = None) -> tuple[float, float, list[str]]:
    """(earned, possible, report lines) for the learner function `fn`."""
    name = getattr(fn, "__name__", str(fn))
    _, cell, blanks = reference.locate(name)
    test = test_for(name)
    possible = float(points if points is not None else max(len(blanks), 1))
    seed = seed_for(name)
    reason = _failure(test, fn, seed)
    if reason is None:
        return possible, possible, [f"✓ {name}: every hidden test passed"]

    template, _ = blank_source(cell.source)
    filled = diagnose.read_fills(fn, template, blanks)
    unfilled = filled.unfilled()
    wrong = None
    if blanks and filled.aligned():

        def passes(candidate_source: str) -> bool:
            try:
                with quiet():
                    candidate = diagnose.rebuild(fn, candidate_source)
            except BaseException:  # noqa: BLE001
                return False
            return _failure(test, candidate, seed) is None

        wrong = diagnose.wrong_blanks(filled, blanks, passes)
    report = [f"✗ {name}"]
    if unfilled:
        report.append(f"  not filled yet: {_labels(blanks, unfilled)}")
    if wrong is None:
        report.append(f"  a hidden test failed: {reason}")
        report.append("  it is not one blank alone: check each blank's hint, and any line you "
                      "changed outside the blanks")
        return 0.0, possible, report
    if wrong - unfilled:
        report.append(f"  looks wrong: {_labels(blanks, wrong - unfilled)}")
        report.append(f"  a hidden test failed: {reason}")
    earned = round(possible * (len(blanks) - len(wrong)) / len(blanks), 2)
    return earned, possible, report


def grade(fn, points: float | None = None) -> float:
    """Grade a learner function; print the report; return the points earned."""
    try:
        earned, possible, report = assess(fn, points)
    except Exception as err:  # noqa: BLE001 - the grader itself must never crash the cell
        earned, possible, report = 0.0, float(points or 0), [f"✗ could not grade: {err}"]
    print("\n".join(report))
    print(f"score: {earned:g} / {possible:g}")
    return earned
