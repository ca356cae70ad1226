"""The `_____` a learner fills, and the check that none is left empty.

A released notebook imports `_____` from here, so an unfilled blank never fails with a bare
`NameError`: using it raises `BlankNotFilled`, and `require_filled(fn)` names every empty blank
of a function (with its line) before the function runs anywhere.
"""

from __future__ import annotations

import ast
import inspect
import io
import linecache
import re
import sys
import tokenize

BLANK = "_____"


class BlankNotFilled(Exception):
    """A `_____` is still in the code: fill it, re-run the cell, then run the check again."""


class _Blank:
    """The value of `_____`: any use of it says which blank to fill instead of crashing later."""

    def __repr__(self):
        return BLANK

    def _refuse(self, *args, **kwargs):
        __tracebackhide__ = True  # IPython and pytest: the learner's frame is the one to show
        where = _where_used(sys._getframe(1))
        raise BlankNotFilled(
            where or "a blank `_____` is not filled yet: replace it with your code and re-run "
            "the cell")

    __call__ = __getattr__ = __getitem__ = __setitem__ = __iter__ = __len__ = _refuse
    __bool__ = __index__ = __int__ = __float__ = __neg__ = __abs__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __matmul__ = __rmatmul__ = __pow__ = __rpow__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __eq__ = __ne__ = __hash__ = _refuse  # a blank used as a dict key or in a set, too


_____ = _Blank()


class CallStatementBlanks(ast.NodeTransformer):
    """A blank that is a whole statement (`_____  # [2] ...`) or a whole value (`request = _____`,
    `return _____`) is a bare name: Python evaluates it and moves on, so an empty one would pass
    silently and fail later as a wrong number, or as a rank waiting forever for a message never
    sent. In a notebook (an IPython AST transformer, installed by `import distlab`) it becomes
    `_____()`, which raises `BlankNotFilled` naming it, on whatever rank it runs."""

    def _call_if_blank(self, node):
        self.generic_visit(node)
        value = getattr(node, "value", None)
        if isinstance(value, ast.Name) and value.id == BLANK:
            node.value = ast.copy_location(ast.Call(func=value, args=[], keywords=[]), value)
        return node

    visit_Expr = visit_Assign = visit_AugAssign = visit_AnnAssign = visit_Return = _call_if_blank


def _learner_frame(frame):
    """The frame of the function the learner wrote: a comprehension or generator expression
    runs in a frame of its own (`<listcomp>`), named after nothing the learner sees."""
    while frame is not None and frame.f_code.co_name.startswith("<") and \
            frame.f_code.co_name != "<module>":
        frame = frame.f_back
    return frame


def _numbers(text: str) -> list[str]:
    """The blank numbers a released line's hint carries (`# [2] ...` or `# [2], [3] ...`)."""
    column = text.find("#")
    return re.findall(r"\[(\d+)\]", text[column:]) if column >= 0 else []


def describe(name: str, empty: list[tuple[int, str]], first: int = 1) -> str:
    """`ring_allreduce still has 2 blank line(s) to fill: blanks [2], [4] (lines 12, 15).`"""
    numbers = [n for _, text in empty for n in _numbers(text)]
    if numbers:
        lines = ", ".join(str(first + row - 1) for row, _ in empty)
        which = (f"blank{'s' if len(numbers) > 1 else ''} {', '.join(f'[{n}]' for n in numbers)}"
                 f" (line{'s' if len(empty) > 1 else ''} {lines})")
    else:  # not a released exercise: show the lines themselves
        which = "; ".join(f"line {first + row - 1}: {text}" for row, text in empty)
    return (f"{name} still has {len(empty)} blank line(s) to fill: {which}.\n"
            "Replace each `_____` with your code, re-run its cell, then run the check again.")


def _where_used(frame) -> str:
    """What to tell a learner whose function used an unfilled `_____`."""
    frame = _learner_frame(frame)
    if frame is None or frame.f_code.co_name == "<module>":
        return ""
    try:
        source, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return ""
    empty = unfilled_lines("".join(source))
    return describe(frame.f_code.co_name, empty, first) if empty else ""


def unfilled_lines(source: str) -> list[tuple[int, str]]:
    """(line number, stripped line) of every `_____` name in `source`, comments ignored."""
    found = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    lines = source.splitlines()
    for tok in tokens:
        if tok.type == tokenize.NAME and tok.string == BLANK:
            row = tok.start[0]
            if not found or found[-1][0] != row:
                found.append((row, lines[row - 1].strip()))
    return found


def _code_of(member):
    """The code object behind a class member (method, static/class method, property)."""
    for candidate in (member, getattr(member, "__func__", None), getattr(member, "fget", None)):
        code = getattr(inspect.unwrap(candidate) if callable(candidate) else None,
                       "__code__", None)
        if code is not None:
            return code
    return None


def source_lines(obj) -> tuple[list[str], int]:
    """(source lines, first line) of a function or a class, also of a class defined in a
    notebook cell, which inspect cannot find (its module, __main__, has no file): the class is
    found again in the cell of one of its methods."""
    try:
        return inspect.getsourcelines(obj)
    except (OSError, TypeError):
        if not inspect.isclass(obj):
            raise
    codes = [code for member in vars(obj).values() if (code := _code_of(member)) is not None]
    for code in codes:
        lines = linecache.getlines(code.co_filename)
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef) and node.name == obj.__name__
                    and node.lineno <= code.co_firstlineno <= node.end_lineno):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                return lines[first - 1:node.end_lineno], first
    raise OSError(f"could not find the source of class {obj.__name__}")


def require_filled_calls(fn, *args) -> None:
    """require_filled for fn, for every function among args, and for each function of their
    module that their code names, and theirs in turn: a demo that would reach an empty blank on
    the ranks stops before any rank starts, naming the function that still holds it (distlab's
    own helpers, in another module, are not followed)."""
    import types

    module = getattr(fn, "__module__", None)
    todo = [fn, *(a for a in args if isinstance(a, types.FunctionType))]
    seen = set()
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        require_filled(current)
        codes = [getattr(current, "__code__", None)]
        names = set()
        while codes:
            code = codes.pop()
            if code is not None:
                names.update(code.co_names)
                codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        found = getattr(current, "__globals__", {})
        todo += [found[name] for name in sorted(names)
                 if isinstance(found.get(name), types.FunctionType)
                 and found[name].__module__ == module]


def require_filled(fn) -> None:
    """Raise `BlankNotFilled` naming each line of `fn` (a function or a class) that still holds
    a `_____`."""
    try:
        source, first = source_lines(fn)
    except (OSError, TypeError):
        return  # no source to read (a builtin, or a function made by exec): nothing to check
    empty = unfilled_lines("".join(source))
    if empty:
        raise BlankNotFilled(describe(fn.__name__, empty, first))
