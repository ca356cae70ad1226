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

import bisect
import functools
import inspect
import itertools

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
    spot = (_code_of(line), column, answer)
    matches = [entry["positions"].get(place)
               for place in _places_by_spot(snippet.source).get(spot, [])]
    return bool(matches) and all(positions.seen_by_test(v) and v[0] == generated
                                 for v in matches)


@functools.cache
def _places_by_spot(source: str) -> dict[tuple[str, int, str], list[str]]:
    """A snippet's candidate positions by (their line's code, column, text) -> their places:
    one pass per snippet, however many of its blanks the strength check asks about."""
    lines = source.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    found = positions.candidates(source)
    spots: dict[tuple[str, int, str], list[str]] = {}
    for position, place in zip(found, positions.places(source, found), strict=True):
        row = bisect.bisect_right(starts, position.start) - 1
        spot = (_code_of(lines[row]), position.start - starts[row], position.text)
        spots.setdefault(spot, []).append(place)
    return spots
