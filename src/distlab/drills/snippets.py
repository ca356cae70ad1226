"""Drill snippets: the core functions of each notebook, read from its solved source.

A solution cell whose header says `drill` is a snippet (its function is the one `solution=`
names); `drill="name"` picks another function or class of the cell:

    # %% solution="ring_allreduce" drill

The snippet is the solved definition with its marker comments (`# BLANK hint`, `# ACCEPT ...`)
cut off, read afresh whenever the file changes: a drill is never a copy of the answer.

Which notebooks' snippets learners may drill is one instructor setting, `drills.toml` in the
course root (the folder above solutions/): `notebooks = "all"` (the default, also without the
file) or a list of assignment ids. A drill shows the reference code, so list a notebook there
once its deadline has passed.

The solved source is read by distlab.source (its cells, its markers, what a cell defines), as
the grading side reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distlab.source.cells import percent_cells
from distlab.source.definitions import functions
from distlab.source.markers import strip_markers
from distlab.source.paths import solutions_dir


class DrillError(ValueError):
    """Input a drill cannot use (an unknown snippet, too many blanks, ...): the message says
    what to do instead."""


@dataclass(frozen=True)
class Snippet:
    name: str  # the function or class, e.g. "ring_allreduce"
    assignment: str  # its notebook, e.g. "01_collectives"
    source: str  # its solved definition, without marker comments
    cells: tuple[str, ...]  # the notebook's code cells but hidden tests: what it runs beside
    where: str  # file:line of its cell, for messages


def setting_path(solutions: Path) -> Path:
    return solutions.parent / "drills.toml"


def allowed_notebooks(solutions: Path) -> set[str] | None:
    """The assignment ids the instructor opened to drills, or None for all of them."""
    import tomllib

    path = setting_path(solutions)
    if not path.exists():
        return None
    try:
        chosen = tomllib.loads(path.read_text()).get("notebooks", "all")
    except tomllib.TOMLDecodeError as err:
        raise DrillError(f"{path}: {err}") from None
    if chosen == "all":
        return None
    if not (isinstance(chosen, list) and all(isinstance(x, str) for x in chosen)):
        raise DrillError(f'{path}: `notebooks` must be "all" or a list of assignment ids, '
                         f"such as [\"01_collectives\"]; found {chosen!r}")
    return set(chosen)


def _read(path: Path, assignment: str) -> list[Snippet]:
    text = path.read_text()
    cells = percent_cells(text)
    runnable = tuple(code for attrs, code, _ in cells
                     if "markdown" not in attrs and "tests" not in attrs)
    found = []
    for attrs, code, line in cells:
        if "drill" not in attrs:
            continue
        name = attrs["drill"] or attrs.get("solution")
        where = f"{path}:{line}"
        if not name:
            raise DrillError(f'{where}: `drill` needs a name: drill="function" (or put it on a '
                             'solution cell, whose name it takes)')
        source = functions(code).get(name)
        if source is None:
            raise DrillError(f"{where}: the drill tag names {name!r}, but this cell defines no "
                             "such function or class")
        found.append(Snippet(name, assignment, strip_markers(source), runnable, where))
    return found


_cache: dict = {}


def load(solutions: Path | None = None, every: bool = False) -> dict[str, Snippet]:
    """{name: snippet} of every tagged snippet, in course order; only the notebooks that
    drills.toml opens unless `every`. Re-read when a solved source changes."""
    solutions = solutions or solutions_dir()
    paths = sorted(p for p in solutions.glob("*/*.py") if p.stem == p.parent.name)
    setting = setting_path(solutions)
    stamp = (str(solutions), every, setting.exists() and setting.stat().st_mtime_ns,
             tuple((p, p.stat().st_mtime_ns) for p in paths))
    if stamp not in _cache:
        allowed = None if every else allowed_notebooks(solutions)
        snippets = {}
        for path in paths:
            if allowed is None or path.stem in allowed:
                snippets.update((s.name, s) for s in _read(path, path.stem))
        _cache.clear()
        _cache[stamp] = snippets
    return _cache[stamp]


def get(name: str, solutions: Path | None = None) -> Snippet:
    snippets = load(solutions)
    if name not in snippets:
        known = ", ".join(snippets) or "none (no solved sources, or drills.toml opens none)"
        raise DrillError(f"unknown snippet {name!r}; the snippets are: {known}")
    return snippets[name]
