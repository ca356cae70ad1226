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
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the course: src/distlab/drills/ is three below
HEADER = re.compile(r"^# %%(?P<rest>.*)$")
ATTRIBUTE = re.compile(r'(?P<key>\w+)(?:=(?:"(?P<quoted>[^"]*)"|(?P<bare>\S+)))?')
MARKER = re.compile(r"#\s*BLANK\b")
SOLUTION_FENCE = re.compile(r"^\s*### (?:BEGIN|END) SOLUTION\s*$")


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


def solutions_dir() -> Path:
    """The solved sources; DISTLAB_SOLUTIONS_DIR moves them, as for the rest of the course."""
    return Path(os.environ.get("DISTLAB_SOLUTIONS_DIR", ROOT / "solutions"))


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


def percent_cells(text: str) -> list[tuple[dict, str, int]]:
    """(header attributes, source, line of the header) of each `# %%` cell of a percent file,
    read without jupytext (seconds to import); autograder.solved reads solution cells with it
    too, and tests/test_solved.py checks it against jupytext's reading."""
    cells, lines = [], text.split("\n")
    starts = [n for n, line in enumerate(lines) if HEADER.match(line)]
    for index, start in enumerate(starts):
        stop = starts[index + 1] if index + 1 < len(starts) else len(lines)
        rest = HEADER.match(lines[start])["rest"]
        attributes = {m["key"]: m["quoted"] if m["quoted"] is not None else m["bare"]
                      for m in ATTRIBUTE.finditer(rest.replace("[markdown]", " markdown "))}
        cells.append((attributes, "\n".join(lines[start + 1:stop]).strip("\n"), start + 1))
    return cells


def definition(code: str, name: str) -> str | None:
    """The source of the top-level function or class `name` in `code`, decorators included."""
    lines = code.split("\n")
    found = None
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and node.name == name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            found = "\n".join(lines[first - 1:node.end_lineno])
    return found


def strip_markers(source: str) -> str:
    """The code without its `# BLANK ...` comments (the hints and ACCEPT/REJECT lists)."""
    lines = [line for line in source.split("\n") if not SOLUTION_FENCE.match(line)]
    cuts = {}
    for token in tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline):
        if token.type == tokenize.COMMENT and MARKER.match(token.string):
            cuts[token.start[0] - 1] = token.start[1]
    return "\n".join(line[:cuts[row]].rstrip() if row in cuts else line
                     for row, line in enumerate(lines))


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
        source = definition(code, name)
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
