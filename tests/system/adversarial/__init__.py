"""Adversarial submissions of `01_collectives`: what a student could hand in to get points
they did not earn, to change someone else's grade, or to stop or litter the grading run.

Each kind is one builder: it takes the solved or the released notebook (nbformat) and returns
the submission: a notebook, raw bytes for a file that is not one, or {file name: notebook or
bytes} for a submission folder with more files in it. Its docstring says the attack and the
outcome `make grade` must give. `KINDS` lists them all, in a stable order;
tests/system/test_adversarial.py grades them in batches, next to honest students, and checks that
each one gets no points it did not earn and leaves nothing behind.

    from adversarial import KINDS
    kind = KINDS["edit_test_cell"]
    files = kind.submission(solved, released)  # {"01_collectives.ipynb": bytes, ...}
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import nbformat

SOLVED, RELEASED, NOTHING = "solved", "released", "nothing"
ALL = "all"  # every graded cell must score 0


@dataclass(frozen=True)
class Kind:
    name: str
    build: Callable  # notebook -> notebook | bytes  (NOTHING: () -> bytes)
    base: str  # SOLVED, RELEASED or NOTHING
    zero: tuple[str, ...] | str = ()  # graded cells that must score 0 (ALL: every one)
    exact: str | None = None  # the score it must get exactly: "max" or "max-1"
    batch: int = 0  # which grading run it goes to
    control: bool = False  # an honest student, graded in every run next to the adversaries

    @property
    def doc(self) -> str:
        return " ".join((self.build.__doc__ or "").split())

    def submission(self, solved, released, notebook: str = "01_collectives.ipynb"
                   ) -> dict[str, bytes]:
        """The files to hand in ({name: bytes}): the builder applied to a copy of its base."""
        if self.base == NOTHING:
            out = self.build()
        else:
            out = self.build(copy.deepcopy(solved if self.base == SOLVED else released))
        plain = isinstance(out, dict) and not isinstance(out, nbformat.NotebookNode)
        files = out if plain else {notebook: out}
        return {name: data if isinstance(data, bytes) else nbformat.writes(data).encode()
                for name, data in files.items()}


KINDS: dict[str, Kind] = {}


def kind(base: str, zero=(), exact=None, batch: int = 0, control: bool = False):
    """Register a builder as an adversarial (or honest) kind under its function name."""
    def register(build):
        KINDS[build.__name__] = Kind(build.__name__, build, base, zero, exact, batch, control)
        return build
    return register


# the builders register themselves on import, in this order
from adversarial import broken, hazards, honest, tamper  # noqa: E402,F401
