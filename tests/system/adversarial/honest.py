"""Honest students, graded in every batch next to the adversaries: their grades must be what
they get when graded alone."""

from __future__ import annotations

from adversarial import SOLVED, kind
from adversarial.cells import index
from distlab.source.markers import blank_source

WRONG_FUNCTION, WRONG_BLANK = "ring_allreduce", 2


@kind(base=SOLVED, exact="max", control=True)
def honest_solved(nb):
    """The solved notebook as it is: full marks."""
    return nb


@kind(base=SOLVED, exact="max-1", control=True)
def honest_one_wrong(nb):
    """The solved notebook with blank [2] of ring_allreduce answered wrongly: one point less."""
    cell = nb.cells[index(nb, WRONG_FUNCTION)]
    blank = blank_source(cell.source)[1][WRONG_BLANK - 1]
    lines = cell.source.split("\n")
    lines[blank.line - 1] = lines[blank.line - 1].replace(blank.answer, f"({blank.answer}) + 1", 1)
    cell.source = "\n".join(lines)
    return nb
