"""The class report's numbers, from a GradedClass: per blank the share of students who lost it
and what the wrong ones wrote (grouped as `ast.unparse` writes it), per exercise the share of
full marks, and per student what an instructor should look at (code changed outside the
blanks; a function whose blanks were all filled that still failed, with the idea the hidden
test named: where a shortcut shows).
"""

from __future__ import annotations

import hashlib
import hmac
import warnings
from collections import Counter
from dataclasses import dataclass, field

from autograder import mutants
from autograder.report.collect import GradedClass
from distlab.source.markers import Blank


@dataclass
class BlankTally:
    function: str
    blank: Blank
    graded: int = 0  # students whose function has a verdict
    unfilled: int = 0
    wrong: Counter = field(default_factory=Counter)  # normalized wrong answer -> students
    # lost although right: its function failed as a whole (not one blank alone), or its
    # blanks could not be read back after a change outside them
    with_function: int = 0

    @property
    def lost(self) -> int:
        return self.unfilled + sum(self.wrong.values()) + self.with_function

    @property
    def share(self) -> float:
        return self.lost / self.graded if self.graded else 0.0

    @property
    def label(self) -> str:
        return f"{self.function} [{self.blank.number}]"


@dataclass
class Flag:
    student: str  # an anonymous label unless the instructor asked for names
    function: str
    kind: str  # "changed outside the blanks" or "filled, still failed"
    detail: str  # the changed line, or the hidden test's complaint


CHANGED, FAILED_FILLED = "changed outside the blanks", "filled, still failed"


def normalized(text: str) -> str:
    """A fill as `ast.unparse` writes it, so that spacing and parentheses do not split a
    group (a fill that does not parse stays as written, spacing trimmed)."""
    with warnings.catch_warnings():  # `1if x` parses, with a SyntaxWarning: not news here
        warnings.simplefilter("ignore")
        return mutants.normalized(text)


def blank_tallies(graded: GradedClass, blanks: dict[str, list[Blank]]) -> list[BlankTally]:
    """One tally per blank of every graded function, worst (largest share lost) first."""
    tallies = {(fn, b.number): BlankTally(fn, b) for fn, bs in blanks.items() for b in bs}
    for submission in graded.submissions:
        for function, verdict in submission.verdicts.items():
            every = range(1, len(blanks.get(function, [])) + 1)
            lost, unfilled = set(verdict["lost"]), set(verdict["unfilled"])
            if not lost and verdict["earned"] < verdict["possible"]:
                lost = set(every)  # the function could not be graded at all
            for number in every:
                tally = tallies[function, number]
                tally.graded += 1
                fill = verdict["fills"].get(str(number))
                if number in unfilled:
                    tally.unfilled += 1
                elif number not in lost:
                    continue
                elif fill is None or normalized(fill) == normalized(tally.blank.answer):
                    tally.with_function += 1
                else:
                    tally.wrong[normalized(fill)] += 1
    measured = [t for t in tallies.values() if t.graded]
    return sorted(measured, key=lambda t: (-t.share, t.function, t.blank.number))


def full_marks(graded: GradedClass) -> dict[str, tuple[int, int]]:
    """graded cell -> (students with every point of it, students graded), in cell order."""
    counts: dict[str, tuple[int, int]] = {}
    for submission in graded.submissions:
        for cell, (score, most) in submission.cells.items():
            full, total = counts.get(cell, (0, 0))
            counts[cell] = (full + (score >= most), total + 1)
    return counts


def anonymous(student: str, key: bytes) -> str:
    """A label that stays the same for a student from one report to the next (a keyed hash:
    without the key, which stays in the grading folder, a roster does not reverse it)."""
    return "student " + hmac.new(key, student.encode(), hashlib.sha256).hexdigest()[:6]


def flags(graded: GradedClass, name) -> list[Flag]:
    """Per student (`name(student_id)` says how to show them), each function changed outside
    its blanks and each function whose blanks were all filled that still lost points."""
    found = []
    for submission in graded.submissions:
        who = name(submission.student)
        for function, verdict in submission.verdicts.items():
            if verdict["changed"]:
                found.append(Flag(who, function, CHANGED, verdict["changed"]))
            if verdict["lost"] and not verdict["unfilled"] and verdict["reason"]:
                found.append(Flag(who, function, FAILED_FILLED, verdict["reason"]))
    return sorted(found, key=lambda f: (f.student, f.function, f.kind))
