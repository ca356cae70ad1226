"""Reading a learner's notebook for the export: the functions and classes its cells define,
the imports they bind, and which of them an exercise needs.

A notebook is read the way grading and the drills read one (distlab.source): a learner's
`.ipynb` (its solution cells are the learner's, the other cells the course's locked code), or a
solved source `solutions/<id>/<id>.py` (jupytext percent). Only definitions are taken, never a
cell's checks or launches: the export holds the learner's own functions and the given code
(locked helpers, imports) that they use, nothing else of the notebook.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import nbformat

from distlab.blanks import BlankNotFilled, describe, unfilled_lines
from distlab.source.cells import percent_cells
from distlab.source.definitions import definitions, functions
from distlab.source.markers import strip_markers


@dataclass(frozen=True)
class Definition:
    name: str
    source: str
    first_line: int  # of the definition, in its cell (as the notebook numbers a cell's lines)
    order: int  # the cell it comes from, in notebook order


@dataclass(frozen=True)
class Notebook:
    definitions: dict[str, Definition]  # the later of a name defined twice, as a kernel keeps
    imports: dict[str, str]  # bound name -> the import statement that binds it


def code_cells(path: Path) -> list[str]:
    """The source of each code cell, in order, of a `.ipynb` or a percent-format `.py`."""
    if path.suffix == ".ipynb":
        try:
            notebook = nbformat.read(path, as_version=4)
        except (ValueError, KeyError, AttributeError, nbformat.ValidationError) as err:
            raise ValueError(f"{path}: not a notebook ({err})") from None
        return [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    if path.suffix == ".py":
        # a solved source: its markers' hints and ACCEPT/REJECT lists are not code
        return [strip_markers(source) for attributes, source, _ in
                percent_cells(path.read_text()) if "markdown" not in attributes]
    raise ValueError(f"{path}: expected a notebook (.ipynb) or a solved source (.py)")


def _bound_imports(tree: ast.Module) -> dict[str, str]:
    bound = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                bound[name] = ast.unparse(ast.Import(names=[alias]))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                bound[alias.asname or alias.name] = ast.unparse(
                    ast.ImportFrom(module=node.module, names=[alias], level=node.level))
    return bound


def read_notebook(path: Path) -> Notebook:
    found, imports = {}, {}
    for order, cell in enumerate(code_cells(path)):
        tree = definitions(cell)
        if tree is None:
            continue  # a cell that does not parse defines nothing (a kernel could not run it)
        imports.update(_bound_imports(tree))
        for name, source in functions(cell).items():
            first = cell[: cell.index(source)].count("\n") + 1
            found[name] = Definition(name, source, first, order)
    return Notebook(found, imports)


def _names_used(source: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def needed(notebook: Notebook, names: list[str]) -> tuple[list[str], list[Definition]]:
    """(import statements, definitions in notebook order) that `names` need, following the
    names each definition uses; raise BlankNotFilled naming every needed definition with a
    `_____`, with the message the notebook gives (line numbers of its cell)."""
    todo, taken, statements = list(names), {}, {}
    while todo:
        name = todo.pop()
        if name in taken or name in statements:
            continue
        if name in notebook.definitions:
            definition = taken[name] = notebook.definitions[name]
            todo.extend(_names_used(definition.source))
        elif name in notebook.imports:
            statements[name] = notebook.imports[name]
    ordered = sorted(taken.values(), key=lambda d: (d.order, d.first_line))
    unfilled = [describe(d.name, empty, d.first_line) for d in ordered
                if (empty := unfilled_lines(d.source))]
    if unfilled:
        raise BlankNotFilled("\n".join(unfilled))
    in_notebook_order = [s for name, s in notebook.imports.items() if name in statements]
    return list(dict.fromkeys(in_notebook_order)), ordered
