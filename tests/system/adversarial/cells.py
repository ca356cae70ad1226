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


# Code that runs only where the judge runs the learner's functions (not in the notebook's
# kernel), so an attack on the judge leaves the notebook's own check cells alone.
JUDGED = 'if "ipykernel" not in __import__("sys").modules:'
