"""What the drill verdicts (src/distlab/drills/verdicts.json) already settled for the strength
check.

Those verdicts come from running every mutant of a drill position through the snippet's hidden
test (tests/test_drills.py computes them; a test fails when one is stale). A blank of a drilled
function whose answer is such a position, on the same line of code and at the same column, has
the same generated mutants: where the drills ran them all and none survived, the sampled
strength check need not run them again. It still runs every ACCEPT and REJECT, every blank the
drills do not cover, and everything where a verdict is stale or counted other mutants.
"""

from __future__ import annotations

import inspect

from distlab.drills import positions, snippets
from distlab.drills.positions import _code_of


def test_digest(name: str) -> str:
    """A digest of the code of the hidden test module of `name` (what a verdict was computed
    against)."""
    from autograder.exercises import all_tests

    return positions.code_digest(inspect.getsource(inspect.getmodule(all_tests()[name])))


def settled(function: str, line: str, column: int, answer: str, generated: int) -> bool:
    """Did the drills run all `generated` mutants of `answer` (at `column` of the solved line
    `line`, in `function`) against the current hidden test, and did every one fail?"""
    snippet = snippets.load(every=True).get(function)
    entry = positions.stored()["snippets"].get(function)
    if snippet is None or entry is None or entry.get("test") != test_digest(function):
        return False
    code = _code_of(line)
    rows = snippet.source.split("\n")
    starts = [0]
    for row in rows:
        starts.append(starts[-1] + len(row) + 1)
    found = positions.candidates(snippet.source)
    matches = []
    for position, place in zip(found, positions.places(snippet.source, found), strict=True):
        row = next(r for r in range(len(rows)) if starts[r] <= position.start < starts[r + 1])
        if (position.text == answer and position.start - starts[row] == column
                and _code_of(rows[row]) == code):
            matches.append(entry["positions"].get(place))
    return bool(matches) and all(positions.seen_by_test(v) and v[0] == generated
                                 for v in matches)
