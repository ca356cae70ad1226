"""What a notebook cell defines, without what it does: its top-level imports, functions,
classes and constant assignments. Used to load the solved notebooks as modules (the
references) and a submission's code in the judge's runner; checks, plots, launches, and any
patching a learner put at top level are left out. Also the source of each function a cell
defines (a drill's snippet, a graded function) and their names (Validate, the notices)."""

from __future__ import annotations

import ast
import re

_DEF = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.M)
KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _parse(code: str) -> tuple[str, ast.Module] | tuple[str, None]:
    """(the code as Python, its AST); IPython magics are translated first, as a kernel would.
    The AST is None when the cell does not parse."""
    try:
        return code, ast.parse(code)
    except SyntaxError:
        try:
            from IPython.core.inputtransformer2 import TransformerManager

            code = TransformerManager().transform_cell(code)
            return code, ast.parse(code)
        except Exception:  # noqa: BLE001 - a cell the kernel could not run either
            return code, None


def functions(code: str) -> dict[str, str]:
    """{name: source} of each top-level function or class the cell defines (what a graded cell
    can grade), decorators included; for a name defined twice, the later one (the one a kernel
    would keep)."""
    code, tree = _parse(code)
    lines = code.split("\n")
    found = {}
    for node in tree.body if tree else []:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            found[node.name] = "\n".join(lines[first - 1: node.end_lineno])
    return found


def definitions(code: str) -> ast.Module | None:
    """The cell's definitions as a module AST, or None if the cell does not parse."""
    _, tree = _parse(code)
    if tree is None:
        return None
    tree.body = [node for node in tree.body if isinstance(node, KEEP) or (
        isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant))]
    return tree


def defined_names(source: str) -> list[str]:
    """Top-level functions and classes a cell defines (read even when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _DEF.findall(source)
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
