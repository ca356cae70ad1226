"""Where a snippet can be blanked, and which blanks one drill gets.

A maskable position is a span of the code read off its syntax tree: a name, an attribute, a
literal, a subscript or its index, a call argument, an operand, a right-hand side, a return
value, a condition, an element, or a whole simple statement; each on one line (a blank is one
input box). Spans that teach nothing (`self`, a lone bracket or colon) are left out, and so
are docstrings, f-strings and `raise` statements (their text is not checked by running).

A drill draws `count` of them that do not overlap, from a generator seeded by the snippet and
the seed, each weighted by how often the learner missed it before: the same seed and history
give the same blanks.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

from distlab.drills.snippets import DrillError

WEAK_WEIGHT = 2  # a position missed m times is drawn as if it were there 1 + 2m times
TRIVIAL = re.compile(r"[\s\[\](){}:,.*]*|self")


@dataclass(frozen=True, order=True)
class Position:
    start: int  # offsets into the snippet's source
    end: int
    text: str
    kind: str  # what it is in the code: "name", "operand", "condition", ...
    key: str  # stable across refreshes: its text and which occurrence of that text

    def overlaps(self, other: Position) -> bool:
        return self.start < other.end and other.start < self.end


def _slots(node: ast.AST):
    """(child, kind) for the parts of `node` that make a blank of their own."""
    match node:
        case ast.Assign() | ast.AugAssign() | ast.AnnAssign() if node.value is not None:
            yield node.value, "right-hand side"
        case ast.Return() if node.value is not None:
            yield node.value, "return value"
        case ast.If() | ast.While() | ast.IfExp() | ast.Assert():
            yield node.test, "condition"
        case ast.Call():
            yield from ((arg, "argument") for arg in node.args)
            yield from ((kw, "argument") for kw in node.keywords)
            yield from ((kw.value, "argument") for kw in node.keywords)
        case ast.BinOp():
            yield from ((node.left, "operand"), (node.right, "operand"))
        case ast.BoolOp():
            yield from ((value, "operand") for value in node.values)
        case ast.Compare():
            yield from ((v, "operand") for v in (node.left, *node.comparators))
        case ast.UnaryOp():
            yield node.operand, "operand"
        case ast.Subscript():
            yield node.slice, "index"
        case ast.For() | ast.comprehension():
            yield from ((node.target, "loop variable"), (node.iter, "iterable"))
            yield from ((cond, "condition") for cond in getattr(node, "ifs", []))
        case ast.ListComp() | ast.SetComp() | ast.GeneratorExp():
            yield node.elt, "element"
        case ast.List() | ast.Tuple() | ast.Set():
            yield from ((elt, "element") for elt in node.elts)
        case ast.withitem():
            yield node.context_expr, "context"


def _kind(node: ast.AST) -> str | None:
    """The kind of a node that is maskable wherever it stands, else None."""
    match node:
        case ast.Name():
            return "name"
        case ast.Attribute():
            return "attribute"
        case ast.Constant():
            return "literal"
        case ast.Subscript():
            return "subscript"
        case ast.Assign() | ast.AugAssign() | ast.AnnAssign() | ast.Return() | ast.Expr() | \
                ast.Delete() | ast.Break() | ast.Continue():
            return "statement"
    return None


def _skipped(node: ast.AST, parent: ast.AST | None) -> bool:
    docstring = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                 and isinstance(node.value.value, str)
                 and isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                 and parent.body[0] is node)
    return docstring or isinstance(node, ast.Raise | ast.JoinedStr)


def maskable(source: str) -> list[Position]:
    """Every maskable position of `source`, in order; no span twice."""
    lines = source.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(row: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return starts[row - 1] + len(lines[row - 1].encode()[:col].decode())

    spans: dict[tuple[int, int], str] = {}

    def add(node: ast.AST, kind: str, start: int | None = None) -> None:
        if getattr(node, "end_lineno", None) != getattr(node, "lineno", 0):
            return  # a blank is one line
        span = (offset(node.lineno, node.col_offset) if start is None else start,
                offset(node.end_lineno, node.end_col_offset))
        if not TRIVIAL.fullmatch(source[span[0]:span[1]]):
            spans.setdefault(span, kind)

    def visit(node: ast.AST, parent: ast.AST | None) -> None:
        if _skipped(node, parent):
            return
        kind = _kind(node)
        if kind:
            add(node, kind)
        if isinstance(node, ast.Attribute):  # `add_` of `x.add_`, alone
            end = offset(node.end_lineno, node.end_col_offset)
            add(node, "attribute name", end - len(node.attr))
        for child, slot in _slots(node):
            if not _skipped(child, node):
                add(child, slot)
        for child in ast.iter_child_nodes(node):
            visit(child, node)

    tree = ast.parse(source)
    for node in tree.body:  # the definition's own line (`def name(...)`) is not asked
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                visit(child, node)
    seen: dict[str, int] = {}
    found = []
    for (start, end), kind in sorted(spans.items()):
        text = source[start:end]
        found.append(Position(start, end, text, kind, f"{text}#{seen.get(text, 0)}"))
        seen[text] = seen.get(text, 0) + 1
    return found


def fitting(positions: list[Position]) -> list[Position]:
    """A largest set of positions that do not overlap (earliest end first)."""
    found, end = [], -1
    for position in sorted(positions, key=lambda p: p.end):
        if position.start >= end:
            found.append(position)
            end = position.end
    return found


def choose(positions: list[Position], count: int, seed: int, snippet: str = "",
           misses: dict[str, int] | None = None) -> list[Position]:
    """`count` non-overlapping positions, drawn with weights 1 + WEAK_WEIGHT * misses."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise DrillError(f"the number of blanks must be a whole number, 0 or more, not {count!r}")
    if count > len(positions):
        raise DrillError(f"{count} blanks asked, but {snippet or 'this snippet'} has only "
                         f"{len(positions)} maskable positions")
    most = len(fitting(positions))
    if count > most:
        raise DrillError(f"{count} blanks asked: {snippet or 'this snippet'} has "
                         f"{len(positions)} maskable positions, but they overlap, and at most "
                         f"{most} fit at once")
    misses = misses or {}
    weights = [1 + WEAK_WEIGHT * misses.get(p.key, 0) for p in positions]
    rng = random.Random(f"{snippet}/{seed}")
    for _ in range(20):  # a draw can box itself in when count is near `most`: draw again
        chosen, free = [], list(range(len(positions)))
        while len(chosen) < count and free:
            pick = positions[rng.choices(free, [weights[i] for i in free])[0]]
            chosen.append(pick)
            free = [i for i in free if not positions[i].overlaps(pick)]
        if len(chosen) == count:
            return sorted(chosen)
    return sorted(rng.sample(fitting(positions), count))


def template(source: str, chosen: list[Position]) -> list[list[str | int]]:
    """The snippet's lines, each a list of code pieces (str) and blanks (int: an index into
    the sorted `chosen`): what a drill shows."""
    lines: list[list[str | int]] = [[]]

    def code(piece: str) -> None:
        for number, part in enumerate(piece.split("\n")):
            if number:
                lines.append([])
            if part:
                lines[-1].append(part)

    cursor = 0
    for index, position in enumerate(sorted(chosen)):
        code(source[cursor:position.start])
        lines[-1].append(index)
        cursor = position.end
    code(source[cursor:])
    return lines
