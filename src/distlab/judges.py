"""The grading side, as distlab sees it: a judge found at run time, never imported by name.

distlab is what learners install; the hidden tests, the references and the sandboxed runner
belong to the course's grading side (autograder), which distlab never imports (`lint-imports`
checks it). Where the grading side is installed, it registers a judge as an entry point of
the group "distlab.drill_judges" (the course's pyproject.toml:
`course = "autograder.drill_judge:JUDGE"`), and distlab asks it through `Judge`:

- the drills (distlab/drills/check.py) run an answer that differs from the reference's text
  through the snippet's hidden test, in a warm runner per notebook (`DrillRunner`);
- the kernel's notices (distlab/notices.py) compare an exercise with the code it was released
  as, which the grading side reads from the solved source.

Without a judge (a learner's image without the grading side), `find_judge()` is None and says
why: the drills check answers by text only, and the notices say nothing about changed lines.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

GROUP = "distlab.drill_judges"
NOT_INSTALLED = "the hidden tests are not installed here"


@runtime_checkable
class DrillRunner(Protocol):
    """One warm process that holds a notebook's cells (but its hidden tests)."""

    def start(self) -> None:
        """Start it now (else the first test starts it)."""

    def test(self, name: str, candidate: str, seconds: float | None) -> None:
        """Run function `name`'s hidden test on `candidate` (its source, defined after the
        cells), within `seconds` (None: no limit). Returns when it passes; raises
        AssertionError (the test's reason) when it fails, TimeoutError past `seconds`, and
        whatever else the candidate raised."""

    def close(self) -> None:
        """End the process and everything it started."""


@runtime_checkable
class Judge(Protocol):
    """What distlab asks of the course's grading side."""

    def load_test(self, name: str) -> None:
        """Load function `name`'s hidden test (KeyError when it has none)."""

    def runner(self, cells: Sequence[str], call_seconds: float) -> DrillRunner:
        """A runner for a notebook's `cells`; each call of the function gets `call_seconds`."""

    def released_template(self, name: str) -> str | None:
        """The released code (blanks as `_____`) of the exercise cell that defines function
        `name`, or None when `name` is no exercise."""


@functools.cache
def _found() -> tuple[Judge | None, str]:
    broken = []
    for point in sorted(entry_points(group=GROUP), key=lambda point: point.name):
        try:
            judge = point.load()
        except ImportError:  # registered, but its package is gone: not installed
            continue
        except Exception as err:  # noqa: BLE001 - a broken grading side: say so, check by text
            broken.append(f"{point.name}: {type(err).__name__}: {err}")
            continue
        if isinstance(judge, Judge):
            return judge, ""
        broken.append(f"{point.name}: {point.value} is no Judge")
    if broken:
        return None, f"the course's judge does not load here ({'; '.join(broken)})"
    return None, NOT_INSTALLED


def find_judge() -> Judge | None:
    """The installed judge (the first entry point of GROUP, by name, that loads), or None."""
    return _found()[0]


def why_no_judge() -> str:
    """Why find_judge() is None ('' when it is not)."""
    return _found()[1]
