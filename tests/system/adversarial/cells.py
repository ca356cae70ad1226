"""Small edits of a notebook, as a student would make them in JupyterLab."""

from __future__ import annotations

import ast
import textwrap
import uuid

from nbformat.v4 import new_code_cell


def index(nb, grade_id: str) -> int:
    """Position of the cell with this nbgrader grade_id."""
    for i, cell in enumerate(nb.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return i
    raise KeyError(grade_id)


def new_cell(source: str):
    """A code cell the student added (no nbgrader metadata, a fresh id)."""
    cell = new_code_cell(textwrap.dedent(source).strip("\n"))
    cell.id = uuid.uuid4().hex[:8]
    return cell


def add_after(nb, grade_id: str, source: str):
    """Insert a new code cell right after the cell `grade_id`."""
    nb.cells.insert(index(nb, grade_id) + 1, new_cell(source))
    return nb


def prepend_to_function(nb, name: str, source: str):
    """Put `source` first in the body of function `name` (after its docstring), in its cell."""
    cell = nb.cells[index(nb, name)]
    tree = ast.parse(cell.source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    first = fn.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    after = first.end_lineno if docstring else fn.lineno
    lines = cell.source.split("\n")
    body = textwrap.indent(textwrap.dedent(source).strip("\n"), "    ").split("\n")
    cell.source = "\n".join(lines[:after] + body + lines[after:])
    return nb


def replace_in(nb, grade_id: str, old: str, new: str):
    """Replace `old` (which must be there) by `new` in cell `grade_id`."""
    cell = nb.cells[index(nb, grade_id)]
    assert old in cell.source, f"{old!r} not in {grade_id}"
    cell.source = cell.source.replace(old, new, 1)
    return nb


def fill_blanks(nb, function: str, fills: dict):
    """Answer each blank number in `fills` of `function`'s solution cell with
    `fills[number](answer)`: what a learner may write there (code outside the blanks is graded
    as released, so a hazard meant to reach the judge goes into a blank)."""
    from distlab.source.markers import blank_source

    cell = nb.cells[index(nb, function)]
    lines = cell.source.split("\n")
    for blank in blank_source(cell.source)[1]:
        if blank.number in fills:
            line = lines[blank.line - 1]
            lines[blank.line - 1] = line.replace(blank.answer, fills[blank.number](blank.answer), 1)
    cell.source = "\n".join(lines)
    return nb


def hazard(code: str):
    """A fill that runs `code` (statements, through exec), then gives the right answer."""
    return lambda answer: f"(exec({textwrap.dedent(code).strip()!r}) or ({answer}))"


def hazard_in_every_blank(nb, function: str, code: str, **others):
    """Every blank of `function` that holds an expression runs `code`, then gives the right
    answer (`others`: other fills, by "b<number>"): no blank alone is to blame, so the function
    earns nothing whatever the search for the wrong blank finds. A blank that is a name after a
    dot cannot hold code: it keeps its answer unless `others` fills it."""
    from distlab.source.markers import blank_source

    cell = nb.cells[index(nb, function)]
    lines = cell.source.split("\n")
    fills = {}
    for blank in blank_source(cell.source)[1]:
        line = lines[blank.line - 1]
        if not line[:line.index(blank.answer)].endswith("."):
            fills[blank.number] = hazard(code)
    fills.update({int(key[1:]): fill for key, fill in others.items()})
    return fill_blanks(nb, function, fills)


# Code that runs only where the judge runs the learner's functions (not in the notebook's
# kernel), so an attack on the judge leaves the notebook's own check cells alone.
JUDGED = 'if "ipykernel" not in __import__("sys").modules:'
