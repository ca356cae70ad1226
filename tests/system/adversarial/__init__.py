"""Adversarial submissions of `01_collectives`: what a student could hand in to get points
they did not earn, to change someone else's grade, or to stop or litter the grading run.

Each kind is one builder: it takes the solved or the released notebook (nbformat) and returns
the submission: a notebook, raw bytes for a file that is not one, or {file name: notebook or
bytes} for a submission folder with more files in it. Its docstring says the attack and the
outcome `make grade` must give: the cells that must score 0 (`zero`), those that must earn all
their points (`earns`), or an exact score. A hazard that needs right code around it to show what
it costs starts from the released notebook with a few functions solved (`solve`): the judge and
the kernel then run those alone, not the whole solved notebook, and a function solved and left
alone must keep its points whatever the hazard did. `KINDS` lists them all, in a stable order;
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
    solve: tuple[str, ...] = ()  # RELEASED base: these functions' cells as solved
    earns: tuple[str, ...] = ()  # graded cells that must earn all their points
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
        elif self.base == SOLVED:
            out = self.build(copy.deepcopy(solved))
        else:
            out = self.build(with_solved(copy.deepcopy(released), solved, self.solve))
        plain = isinstance(out, dict) and not isinstance(out, nbformat.NotebookNode)
        files = out if plain else {notebook: out}
        return {name: data if isinstance(data, bytes) else nbformat.writes(data).encode()
                for name, data in files.items()}


def with_solved(released, solved, functions):
    """The released notebook with the solution cells of `functions` as in the solved one."""
    from adversarial.cells import index

    for function in functions:
        answer = solved.cells[index(solved, function)]
        assert answer.metadata["nbgrader"].get("solution"), f"{function}: not a solution cell"
        released.cells[index(released, function)].source = answer.source
    return released


KINDS: dict[str, Kind] = {}


def kind(base: str, zero=(), exact=None, solve=(), earns=(), batch: int = 0,
         control: bool = False):
    """Register a builder as an adversarial (or honest) kind under its function name."""
    def register(build):
        assert not solve or base == RELEASED, "solve: functions solved in the released notebook"
        KINDS[build.__name__] = Kind(build.__name__, build, base, zero, exact, tuple(solve),
                                     tuple(earns), batch, control)
        return build
    return register


# the builders register themselves on import, in this order
from adversarial import broken, hazards, honest, snoop, tamper  # noqa: E402,F401
