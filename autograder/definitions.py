"""What a notebook cell defines, without what it does: its top-level imports, functions,
classes and constant assignments. Used to load the solved notebooks as modules (the
references) and a submission's code in the judge's runner; checks, plots, launches, and any
patching a learner put at top level are left out."""

from __future__ import annotations

import ast

KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(code: str) -> ast.Module | None:
    """The cell's definitions as a module AST, or None if the cell does not parse (IPython
    magics are translated first, as a kernel would)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        try:
            from IPython.core.inputtransformer2 import TransformerManager

            tree = ast.parse(TransformerManager().transform_cell(code))
        except Exception:  # noqa: BLE001 - a cell the kernel could not run either
            return None
    tree.body = [node for node in tree.body if isinstance(node, KEEP) or (
        isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant))]
    return tree
