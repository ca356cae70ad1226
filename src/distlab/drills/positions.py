"""Where a snippet can be blanked, and which blanks one drill gets.

A maskable position is an idea of the code, read off its syntax tree, on one line (a blank is
one input box):

- an index or offset expression (`(i - step) % N`, `start:end`, `:, start:end`, `shape[1]`),
- a condition (`step < N - 1`, `0 <= mb < M`, `rank == 0`),
- a formula: an arithmetic expression or a call that computes something (`2 * (n - 1)`,
  `x_shard @ w_shard.t()`, `F.cross_entropy(model(x), y)`),
- a collective or point-to-point call, and the arguments of it that matter: the tensor it
  reads or writes, `op=`, `group=`, `src=`, `dst=`,
- the tensor a step reads or writes (a subscripted target, the tensor an in-place method
  changes), and a step of its own (`loss.backward()`, `optimizer.step()`, `request.wait()`).

Never a lone name, keyword, literal, punctuation, nor a builtin call on plain names
(`range(N)`, `len(x)`): what a learner refreshing a snippet should drill is the idea, not its
spelling. Docstrings, f-strings, `print` and `raise` are not asked (their text is not checked
by running).

Those are the candidates. A candidate is maskable only where the snippet's hidden test sees
it: every wrong answer the blank-strength check makes of it (autograder/mutants.py) fails the
test. That verdict is computed on the grading side (`.venv/bin/python tests/test_drills.py
verdicts`: autograder's mutants, run by the strength check's workers) and stored in
verdicts.json beside this module, one entry per position's line, column and text (digests: the
file holds no code). A position whose line changed since has no verdict and is not drilled
until they are computed again; tests/test_drills.py fails while any is missing.

A drill draws `count` positions that do not overlap, from a generator seeded by the snippet and
the seed, each weighted by how often the learner missed it before: the same seed and history
give the same blanks.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from distlab.drills.snippets import DrillError

WEAK_WEIGHT = 2  # a position missed m times is drawn as if it were there 1 + 2m times
VERDICTS = Path(__file__).with_name("verdicts.json")
# what a collective or point-to-point call is called (dist.<name>, or a course helper)
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter",
               "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
               "barrier", "init_process_group", "destroy_process_group", "new_group",
               "all_reduce_sum", "batch_isend_irecv"}
MATTERING = {"op", "group", "src", "dst", "tag", "async_op"}  # keyword arguments that matter
QUIET_CALLS = {"print", "super"}  # calls that are never an idea
# builtins whose idea, if any, is inside their arguments (`range(N - 1)`: `N - 1`)
WRAPPING_CALLS = {"range", "len", "enumerate", "zip", "sorted", "reversed", "isinstance", "iter"}
# the kinds of position; a test asserts no other kind is ever drawn
KINDS = ("index", "condition", "formula", "collective", "collective argument", "tensor",
         "step")


@dataclass(frozen=True, order=True)
class Position:
    start: int  # offsets into the snippet's source
    end: int
    text: str
    kind: str  # one of KINDS
    key: str  # stable across refreshes: its text and which occurrence of that text

    def overlaps(self, other: Position) -> bool:
        return self.start < other.end and other.start < self.end


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def code_digest(source: str) -> str:
    """A digest of what the code does: its syntax tree without docstrings (editing a comment
    or a docstring changes no verdict)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return digest(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module) \
                and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return digest(ast.dump(tree))


def _code_of(line: str) -> str:
    """The line without its comment."""
    import io
    import tokenize

    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[:token.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line.rstrip()


def _atom(node: ast.AST) -> bool:
    """A lone name, literal, attribute chain of names (`self.rank`, `dist.ReduceOp.SUM` is
    not one: an enum member is an idea only as a collective's `op=`), or `-1`."""
    if isinstance(node, ast.Name | ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return True
    if isinstance(node, ast.Attribute):
        return _atom(node.value)
    if isinstance(node, ast.Tuple | ast.List):
        return all(_atom(elt) for elt in node.elts)
    return False


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _is_collective(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and _callee(call) in COLLECTIVES


def _builtin_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and hasattr(builtins, call.func.id)


def _trivial_call(call: ast.Call) -> bool:
    """`range(N)`, `len(grads)`, `list(x)`: a builtin on plain names; `print(...)`."""
    if _callee(call) in QUIET_CALLS or (_builtin_call(call) and call.func.id in WRAPPING_CALLS):
        return True
    if _builtin_call(call):
        return all(_atom(arg) for arg in call.args) and \
            all(_atom(kw.value) for kw in call.keywords)
    return not call.args and not call.keywords  # `model.parameters()`, `nn.ReLU()`


def _key_lookup(node: ast.AST) -> bool:
    """`history["loss"]`: a dictionary's key, spelling rather than an idea."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
        and isinstance(node.slice.value, str)


def _trivial_index(node: ast.AST) -> bool:
    if isinstance(node, ast.Slice):
        return node.lower is None and node.upper is None and node.step is None
    if isinstance(node, ast.Tuple):
        return all(_trivial_index(elt) for elt in node.elts)
    return _atom(node)


def _ideas(node: ast.AST, parent: ast.AST | None, field: str | None):
    """(node, kind) for the ideas `node` itself is (none for most nodes)."""
    if _key_lookup(node):
        return
    if isinstance(node, ast.Subscript):
        if not _trivial_index(node.slice):
            yield node.slice, "index"
        elif isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            yield node, "index"  # which dimension
        if isinstance(node.ctx, ast.Store) and not isinstance(parent, ast.Subscript):
            yield node, "tensor"  # the slot a step writes
        elif not isinstance(parent, ast.Subscript) and (
                isinstance(node.value, ast.Subscript) or field == "args"
                or (field == "value" and isinstance(parent, ast.Assign | ast.AugAssign))):
            yield node, "tensor"  # what a step reads: `chunks[i][j]`, `x = parts[k]`
    elif isinstance(node, ast.Compare | ast.BoolOp) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        yield node, "condition"
    elif isinstance(node, ast.BinOp):
        yield node, "formula"
    elif isinstance(node, ast.Call):
        if _is_collective(node):
            yield node, "collective"
            data = _callee(node) not in ("init_process_group", "destroy_process_group",
                                         "new_group", "barrier")
            for arg in node.args if data else ():
                if not isinstance(arg, ast.Starred):
                    yield arg, "collective argument"
            for kw in node.keywords:
                if kw.arg in MATTERING:
                    yield kw.value, "collective argument"
        elif isinstance(parent, ast.Expr) and _callee(node) not in QUIET_CALLS:
            yield parent, "step"  # `loss.backward()`, `optimizer.step()`: a step of its own
        elif isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                and not node.func.attr.startswith("_") and not node.args:
            yield node, "step"  # x.requires_grad_()
        elif not _trivial_call(node):
            yield node, "formula"
        if isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                and not node.func.attr.endswith("__") and not isinstance(node.func.value, ast.Call):
            yield node.func.value, "tensor"  # the tensor an in-place method changes
    elif isinstance(node, ast.Delete):
        yield node, "step"


def _skipped(node: ast.AST, parent: ast.AST | None) -> bool:
    docstring = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                 and isinstance(node.value.value, str)
                 and isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                 and parent.body[0] is node)
    printed = isinstance(node, ast.Call) and _callee(node) == "print"
    return docstring or printed or isinstance(node, ast.Raise | ast.JoinedStr)


def candidates(source: str) -> list[Position]:
    """Every idea of `source` a blank could ask, in order; no span twice (the hidden test may
    not see all of them: `maskable` keeps those it sees)."""
    lines = source.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(row: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return starts[row - 1] + len(lines[row - 1].encode()[:col].decode())

    spans: dict[tuple[int, int], str] = {}

    def add(node: ast.AST, kind: str) -> None:
        if getattr(node, "end_lineno", None) != getattr(node, "lineno", 0):
            return  # a blank is one line
        if kind not in ("collective argument", "tensor") and _atom(node):
            return  # a lone name or literal is no idea (except the tensor a step moves)
        span = (offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset))
        if source[span[0]:span[1]].strip():
            spans.setdefault(span, kind)

    def visit(node: ast.AST, parent: ast.AST | None, field: str | None) -> None:
        if _skipped(node, parent):
            return
        for child, kind in _ideas(node, parent, field):
            add(child, kind)
        for name, value in ast.iter_fields(node):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    visit(child, node, name)

    tree = ast.parse(source)
    for node in tree.body:  # the definition's own line (`def name(...)`) is not asked
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                visit(child, node, "body")
    seen: dict[str, int] = {}
    found = []
    for (start, end), kind in sorted(spans.items()):
        text = source[start:end]
        found.append(Position(start, end, text, kind, f"{text}#{seen.get(text, 0)}"))
        seen[text] = seen.get(text, 0) + 1
    return found


# ---------------------------------------------------------------- what the hidden test sees

_stored: dict = {}


def stored() -> dict:
    """verdicts.json: {"snippets": {name: {"assignment", "test": digest of its hidden test's
    module, "positions": {place: [mutants tried, survivor]}}}}; survivor is the kind of the
    first wrong answer the hidden test let pass, or null (every mutant failed)."""
    stamp = VERDICTS.exists() and VERDICTS.stat().st_mtime_ns
    if _stored.get("stamp") != stamp:
        data = json.loads(VERDICTS.read_text()) if stamp else {"snippets": {}}
        _stored.update(stamp=stamp, data=data)
    return _stored["data"]


def places(source: str, found: list[Position]) -> list[str]:
    """Each position's place: a digest of its line's code (and which occurrence of that line),
    its column and its text, so that its verdict holds while its line is unchanged."""
    lines = source.split("\n")
    starts, seen, row_place = [0], {}, []
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
        code = _code_of(line)
        row_place.append(f"{code}\0{seen.get(code, 0)}")
        seen[code] = seen.get(code, 0) + 1
    out = []
    for p in found:
        row = next(r for r in range(len(lines)) if starts[r] <= p.start < starts[r + 1])
        out.append(digest(f"{row_place[row]}\0{p.start - starts[row]}\0{p.text}"))
    return out


def seen_by_test(verdict) -> bool:
    """A verdict that makes a position maskable: mutants were made, and none survived."""
    return bool(verdict) and verdict[0] > 0 and verdict[1] is None


def maskable(source: str, name: str | None = None) -> list[Position]:
    """The candidates of snippet `name` (without it: the snippet whose source this is) that
    its hidden test sees by verdicts.json: every mutant of them failed the test. A candidate
    without a verdict (its line changed since they were computed) is not drilled."""
    if name is None:
        from distlab.drills.snippets import load

        name = next((n for n, s in load(every=True).items() if s.source == source), None)
    found = candidates(source)
    verdicts = stored()["snippets"].get(name, {}).get("positions", {})
    return [p for p, place in zip(found, places(source, found), strict=True)
            if seen_by_test(verdicts.get(place))]


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
