"""Only the blanks are the learner's: where a learner's function differs from the code it was
released as anywhere else. Grading grades such a function as released, with the learner's
fills (autograder/grade_cell.py); Validate and the kernel's notices say which line.
"""

from __future__ import annotations

import ast

from distlab.source.definitions import functions
from distlab.source.markers import BLANK

_IGNORED_FIELDS = {"ctx", "lineno", "col_offset", "end_lineno", "end_col_offset",
                   "type_comment"}


def _is_blank(node) -> bool:
    return isinstance(node, ast.Name) and node.id == BLANK


def changed_line(learner_source: str, template_source: str) -> int | None:
    """The first line (1-based, in the learner's source) whose code differs from the released
    template anywhere but in a blank, or None. Compared as syntax trees: spacing, comments, a
    fill written over several lines and several statements in a whole-statement blank do not
    count as changes."""
    try:
        learner, template = ast.parse(learner_source), ast.parse(template_source)
    except SyntaxError as err:
        return err.lineno or 1

    def differ(mine, theirs) -> int | None:
        if _is_blank(theirs) and isinstance(mine, ast.expr):
            return None  # an expression blank: anything the learner wrote
        if (isinstance(theirs, ast.Expr) and _is_blank(theirs.value)
                and isinstance(mine, ast.stmt)):
            return None  # a whole-statement blank
        if type(mine) is not type(theirs):
            return getattr(mine, "lineno", None) or 1
        if isinstance(mine, ast.AST):
            for field in mine._fields:
                if field in _IGNORED_FIELDS:
                    continue
                found = differ(getattr(mine, field, None), getattr(theirs, field, None))
                if found is not None:
                    return found or getattr(mine, "lineno", None) or 1
            return None
        if isinstance(mine, list):
            statement_blanks = [k for k, node in enumerate(theirs) if isinstance(node, ast.Expr)
                                and _is_blank(node.value)]
            if len(statement_blanks) == 1 and len(mine) > len(theirs):
                # a whole-statement blank filled with several statements: it takes the ones
                # between the code before it and the code after it
                k, extra = statement_blanks[0], len(mine) - len(theirs)
                mine = mine[:k] + [mine[k]] + mine[k + extra + 1:]
            if len(mine) != len(theirs):
                extra = (mine + theirs)[min(len(mine), len(theirs))]
                return getattr(extra, "lineno", None) or 1
            for a, b in zip(mine, theirs, strict=True):
                found = differ(a, b)
                if found is not None:
                    return found
            return None
        if theirs == BLANK:  # a blank in place of a name: `dist._____()`, `f(_____=1)`
            return None
        return None if mine == theirs else 0  # 0: the enclosing node's line

    found = differ(learner, template)
    return found if found is None else max(found, 1)


def changed_outside_blanks(name: str, learner_source: str, template: str | None
                           ) -> tuple[int, str] | None:
    """(line, its code) of the first line of learner function `name` that differs from
    `template`, the released code of its cell, outside the blanks; None when it does not, or
    when there is no template or `name` is not in it (no exercise)."""
    released = functions(template).get(name) if template else None
    line = changed_line(learner_source, released) if released and learner_source else None
    return None if line is None else (line, learner_source.split("\n")[line - 1].strip())
