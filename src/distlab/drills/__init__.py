"""Drill mode: random blanks over the reference code of each notebook's core snippets,
redrawn on demand, checked by running the snippet's hidden test.

    from distlab.drills.widget import Drill; Drill()       # in JupyterLab (notebooks/drills/)
    python -m distlab.drills list                          # from a terminal; see __main__.py

snippets.py finds the snippets in the solved sources, positions.py where they can be blanked
and which blanks a drill gets, check.py judges the answers, history.py remembers the misses.
"""

from __future__ import annotations

from distlab.drills import history
from distlab.drills.check import INVALID, RIGHT, WRONG, Checker, Verdict
from distlab.drills.positions import Position, choose, maskable
from distlab.drills.snippets import DrillError, Snippet, get, load

__all__ = ["Checker", "DrillError", "Position", "Snippet", "Verdict", "draw", "get", "load",
           "maskable", "record"]


def draw(name: str, blanks: int, seed: int, ignore_history: bool = False):
    """(snippet, its maskable positions, the `blanks` drawn for this seed), weighted by the
    learner's misses unless `ignore_history`."""
    snippet = get(name)
    positions = maskable(snippet.source, snippet.name)
    misses = None if ignore_history else history.misses(name)
    return snippet, positions, choose(positions, blanks, seed, name, misses)


def record(snippet: Snippet, chosen: list[Position], verdicts: list[Verdict]) -> None:
    """Remember a check in the history: right, wrong and invalid answers (not empty ones)."""
    history.record(snippet.name, {
        position.key: verdict.right for position, verdict in zip(chosen, verdicts, strict=True)
        if verdict.status in (RIGHT, WRONG, INVALID)})

