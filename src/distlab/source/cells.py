"""The cells of a solved source (`solutions/<id>/<id>.py`, jupytext's percent format), read
without jupytext: importing it (with nbformat) takes seconds, too long for a learner's kernel
or a drill that needs only this. autograder.solved reads the same file with jupytext to make
nbgrader's notebook, and tests/test_solved.py checks both readings agree.

A cell starts at a `# %%` header line whose attributes say what it is:

    # %% solution="ring_allreduce" drill    the learner's cell, also a drill snippet
    # %% tests="ring_allreduce_tests" points=5
    # %% [markdown]
"""

from __future__ import annotations

import re
from pathlib import Path

from distlab.source.definitions import functions
from distlab.source.markers import MarkerError, blank_source
from distlab.source.paths import SOLUTIONS, assignment_ids, source_path

HEADER = re.compile(r"^# %%(?P<rest>.*)$")
ATTRIBUTE = re.compile(r'(?P<key>\w+)(?:=(?:"(?P<quoted>[^"]*)"|(?P<bare>\S+)))?')


def percent_cells(text: str) -> list[tuple[dict, str, int]]:
    """(header attributes, source, line of the header) of each `# %%` cell of a percent file;
    a markdown cell's attributes hold "markdown"."""
    cells, lines = [], text.split("\n")
    starts = [n for n, line in enumerate(lines) if HEADER.match(line)]
    for index, start in enumerate(starts):
        stop = starts[index + 1] if index + 1 < len(starts) else len(lines)
        rest = HEADER.match(lines[start])["rest"]
        attributes = {m["key"]: m["quoted"] if m["quoted"] is not None else m["bare"]
                      for m in ATTRIBUTE.finditer(rest.replace("[markdown]", " markdown "))}
        cells.append((attributes, "\n".join(lines[start + 1:stop]).strip("\n"), start + 1))
    return cells


def solution_sources(assignment: str, solutions: Path = SOLUTIONS) -> dict[str, str]:
    """grade_id -> source of each solution cell; the same sources as autograder.solved.load
    gives (tests/test_solved.py checks); markers are not checked here."""
    text = source_path(assignment, solutions).read_text()
    return {attributes["solution"]: source for attributes, source, _ in percent_cells(text)
            if attributes.get("solution")}


def released_templates(solutions: Path = SOLUTIONS) -> dict[str, str]:
    """function -> the released code of the solution cell that defines it (blanks as
    `_____`), for every readable solved source (one with a bad marker is skipped)."""
    templates = {}
    for assignment in assignment_ids(solutions):
        for source in solution_sources(assignment, solutions).values():
            try:
                template, _ = blank_source(source)
            except MarkerError:
                continue
            templates.update(dict.fromkeys(functions(source), template))
    return templates
