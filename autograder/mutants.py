"""Plausible wrong answers to a blank, made from its reference answer with `ast` (for the
blank-strength check, autograder/strength/), and the marker clauses that list answers by hand.

    generate("(i + 1) % N", scope)  ->  (i - 1) % N, i + 1, (i + 2) % N, (step + 1) % N, ...

Kinds: an int off by one (and an index name ± 1), the other neighbour (`+ 1` / `- 1`), `-` for
`+`, `/` for `*`, `//` for `%`, a dropped `% N` or term, swapped operands, arguments or tuple
elements, another name of the same kind used in the function, a dropped call or method call
(`list(x)` -> `x`, `t.clone()` -> `t`), another method called on the same kind of object, the
in-place twin (`add` for `add_`), another member of the same enum (`ReduceOp.MAX` for
`ReduceOp.SUM`), a negated condition or comparison, a boundary (`<=` for `<`), another string of
the function, True for False, a dropped statement. Mutants are deduplicated as `ast.unparse`
writes them; none is the answer itself.

"Of the same kind" is read off how the function uses a name: as a number (arithmetic, an index,
an ordering), a callable, an object (`x.attr`) or a container (`x[i]`, `for _ in x`). A name used
only in other ways is of the kind of the other such names.

A solved line lists answers that the generator cannot judge, after the hint: accepted
equivalents (which must pass the hidden test) and wrong answers written by hand (which must
fail it). Each clause is `# ACCEPT` or `# REJECT`, optionally the blank's position on the line
(1 = leftmost; required on a line with several blanks), then answers in backticks:

    dst = (r + k) % N  # BLANK k places to the right # ACCEPT `(k + r) % N` # REJECT `r + k`
    x = f(a) + g(b)  # BLANK `f(a)` `g(b)` both calls # ACCEPT 2 `g(b=b)`

The clauses are not hint: `split_clauses` returns the hint without them.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

from distlab.source.markers import MarkerError, line_clauses

MAX_SIBLINGS = 12  # other members of an enum tried for one blank

# ---------------------------------------------------------------- # ACCEPT / # REJECT


def answer_lists(line: str, count: int, where: str = "<cell>") -> list[tuple[tuple, tuple]]:
    """(accepted, rejected) answers of each of the `count` blanks of a solved line."""
    lists: list[tuple[list, list]] = [([], []) for _ in range(count)]
    for clause in line_clauses(line, where):
        if clause.kind in ("SHAPE", "API"):  # for the give-away check, not answers
            continue
        if clause.which is None and count > 1:
            raise MarkerError(f"{where}: the line has {count} blanks: say which one the "
                              f"{clause.kind} is for, e.g. # {clause.kind} 2 `...`")
        index = (clause.which or 1) - 1
        if not 0 <= index < count:
            raise MarkerError(f"{where}: {clause.kind} {clause.which}: the line has {count} "
                              "blank(s)")
        lists[index][clause.kind == "REJECT"].extend(clause.answers)
    return [(tuple(accepted), tuple(rejected)) for accepted, rejected in lists]


def blank_answers(source: str, blanks: list, blank, where: str = "<cell>") -> tuple[tuple, tuple]:
    """(accepted, rejected) answers of one blank of a solved cell (`blanks`: all of its)."""
    on_line = [b for b in blanks if b.line == blank.line]
    line = source.split("\n")[blank.line - 1]
    return answer_lists(line, len(on_line), where)[on_line.index(blank)]


# ---------------------------------------------------------------- what a function offers


@dataclass(frozen=True)
class Mutant:
    text: str  # what goes into the blank
    kind: str  # how it was made, for the report ("REJECT" and "ACCEPT": from the marker)
    accepted: bool = False  # an accepted equivalent: it must pass
    written: bool = False  # generated, and in the marker's ACCEPT or REJECT list too

    @property
    def by_hand(self) -> bool:
        """Written in the marker's ACCEPT or REJECT list (the sampled check runs them all)."""
        return self.written or self.kind in ("ACCEPT", "REJECT")


@dataclass
class Scope:
    """What a blank's function offers a wrong answer: its names with the roles they play there,
    its locals, its strings, its attribute names (by whether they are called and whether on a
    local), and the notebook's definitions (to find an enum's other members)."""

    roles: dict[str, set] = field(default_factory=dict)
    local: set = field(default_factory=set)
    strings: list = field(default_factory=list)
    attributes: dict = field(default_factory=dict)  # (called, on_local) -> [names]
    namespace: dict | None = None


def _children(node: ast.AST) -> Iterator[tuple[tuple, ast.AST]]:
    """((field, index), child) for each AST child; index None for a single child."""
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield (name, index), item
        elif isinstance(value, ast.AST):
            yield (name, None), value


def _walk(node: ast.AST, path: tuple = (), parent=None, step=None):
    """(path, node, parent, (field, index)) of node and of everything under it."""
    yield path, node, parent, step
    for child_step, child in _children(node):
        yield from _walk(child, path + (child_step,), node, child_step)


ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _role(parent, step) -> str:
    """The role of a name from where it stands; "value" says nothing about its kind."""
    name = step[0] if step else None
    if isinstance(parent, ast.Call) and name == "func":
        return "callable"
    if isinstance(parent, ast.Attribute):
        return "object"
    if isinstance(parent, ast.Subscript):
        return "container" if name == "value" else "number"
    if isinstance(parent, ast.For | ast.comprehension) and name == "iter":
        return "container"
    if isinstance(parent, ast.BinOp | ast.UnaryOp | ast.AugAssign | ast.Slice):
        return "number"
    if isinstance(parent, ast.Compare) and all(isinstance(op, ORDERINGS) for op in parent.ops):
        return "number"
    return "value"


def _same_kind(roles: set, other: set) -> bool:
    telling, other_telling = roles - {"value"}, other - {"value"}
    return bool(telling & other_telling) if telling else not other_telling


def _root_name(node: ast.AST) -> ast.Name | None:
    """The name a chain like `chunks[i].add_` or `dist.ReduceOp` starts from."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


def _on_local(base: ast.AST | None, local: set) -> bool:
    root = _root_name(base) if base is not None else None
    return root is None or root.id in local


def scope_of(function: ast.AST | None, namespace: dict | None = None) -> Scope:
    """The Scope of a function (or class) definition; an empty one for None."""
    scope = Scope(namespace=namespace)
    if function is None:
        return scope
    in_targets = {id(name) for node in ast.walk(function) if isinstance(node, ast.comprehension)
                  for name in ast.walk(node.target)}
    docstring = ast.get_docstring(function, clean=False) is not None and function.body[0].value
    bound, in_comprehensions, roles, attributes = set(), set(), {}, []
    for _, node, parent, step in _walk(function):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node is not function:
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            roles.setdefault(node.id, set()).add(_role(parent, step))
            if not isinstance(node.ctx, ast.Load):
                (in_comprehensions if id(node) in in_targets else bound).add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node is not docstring and not isinstance(parent, ast.JoinedStr) \
                    and node.value not in scope.strings:
                scope.strings.append(node.value)
        elif isinstance(node, ast.Attribute):
            attributes.append((node, isinstance(parent, ast.Call) and step[0] == "func"))
    for node, called in attributes:  # now that every local is known
        names = scope.attributes.setdefault((called, _on_local(node.value, bound)), [])
        if node.attr not in names:
            names.append(node.attr)
    scope.local = bound
    scope.roles = {name: kinds for name, kinds in roles.items()
                   if name in bound or name not in in_comprehensions}
    for name in bound - set(scope.roles):
        scope.roles[name] = {"value"}
    return scope


def _resolve(node: ast.AST, namespace: dict | None):
    """What a dotted name (`dist.ReduceOp`) is in the notebook, or None. Reads, never calls."""
    if namespace is None:
        return None
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, namespace)
        try:
            return None if base is None else getattr(base, node.attr)
        except Exception:  # noqa: BLE001 - a property that raises: not resolvable
            return None
    return None


CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type)


def _siblings(base, attr: str) -> list[str]:
    """Other public members of `base` of the type of base.attr: an enum's other values.
    Functions, classes and modules have far too many: none for them."""
    try:
        value = getattr(base, attr)
        if base is None or isinstance(value, CODE):
            return []
        found = []
        for name in dir(base):
            other = getattr(base, name, None)
            if not name.startswith("_") and name != attr and type(other) is type(value) \
                    and not (other is value or other == value):
                found.append(name)
        return found[:MAX_SIBLINGS]
    except Exception:  # noqa: BLE001 - an odd object: no siblings
        return []


# ---------------------------------------------------------------- mutations

OTHER_OPS = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,),
             ast.Div: (ast.Mult, ast.FloorDiv), ast.FloorDiv: (ast.Div, ast.Mod),
             ast.Mod: (ast.FloorDiv,)}
SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%"}
# `a + b` and `a * b` swapped are (for numbers) the same answer: not a mutant
ORDERED_OPS = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
               ast.MatMult)
OTHER_COMPARISONS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                     ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
                     ast.Is: ast.IsNot, ast.IsNot: ast.Is}
# calls whose arguments commute: swapping them is the same answer
SYMMETRIC_CALLS = {"min", "max", "minimum", "maximum", "fmin", "fmax", "gcd", "hypot", "add",
                   "mul", "multiply", "eq", "ne", "equal", "isclose", "allclose",
                   "logical_and", "logical_or", "logical_xor"}


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _twin(attr: str) -> str | None:
    """`add_` <-> `add`: PyTorch's in-place and out-of-place twins."""
    if attr.startswith("_") or attr.endswith("__"):
        return None
    return attr[:-1] if attr.endswith("_") else attr + "_"


def _swaps(items: list) -> Iterator[list]:
    for index in range(len(items) - 1):
        if ast.dump(items[index]) != ast.dump(items[index + 1]):
            swapped = list(items)
            swapped[index], swapped[index + 1] = swapped[index + 1], swapped[index]
            yield swapped


def _variants(node, parent, step, scope: Scope, is_root: bool):
    """(kind, replacement) for one node of an answer."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            yield "True/False", ast.Constant(not node.value)
        elif isinstance(node.value, int):
            yield "off by one", ast.Constant(node.value + 1)
            yield "off by one", ast.Constant(node.value - 1)
        elif isinstance(node.value, str):
            for text in scope.strings:
                if text != node.value:
                    yield "other string", ast.Constant(text)
    elif isinstance(node, ast.Name):
        where = _role(parent, step)
        kinds = scope.roles.get(node.id, {where})
        for name, other in scope.roles.items():
            if name != node.id and _same_kind(kinds, other):
                yield ("other call" if where == "callable" else "other name"), \
                    ast.Name(name, node.ctx)
        index = where == "number" and isinstance(parent, ast.Subscript | ast.Slice)
        if isinstance(node.ctx, ast.Load) and "number" in kinds and (is_root or index):
            for op in (ast.Add, ast.Sub):
                yield "off by one", ast.BinOp(node, op(), ast.Constant(1))
    elif isinstance(node, ast.BinOp):
        for op in OTHER_OPS.get(type(node.op), ()):
            one = isinstance(node.right, ast.Constant) and node.right.value == 1
            kind = ("other neighbour" if one and op in (ast.Add, ast.Sub) else
                    f"`{SYMBOLS[op]}` for `{SYMBOLS[type(node.op)]}`")
            yield kind, ast.BinOp(node.left, op(), node.right)
        if isinstance(node.op, ast.Mod):
            yield "dropped modulo", node.left
        else:
            yield "dropped term", node.left
            yield "dropped term", node.right
        if isinstance(node.op, ORDERED_OPS):
            yield "swapped operands", ast.BinOp(node.right, node.op, node.left)
    elif isinstance(node, ast.UnaryOp):
        yield ("negated condition" if isinstance(node.op, ast.Not) else "dropped sign"), \
            node.operand
    elif isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            if type(op) in OTHER_COMPARISONS:
                ops = list(node.ops)
                ops[index] = OTHER_COMPARISONS[type(op)]()
                kind = "boundary" if isinstance(op, ORDERINGS) else "negated comparison"
                yield kind, ast.Compare(node.left, ops, node.comparators)
        if len(node.ops) == 1 and isinstance(node.ops[0], ORDERINGS):
            yield "swapped operands", ast.Compare(node.comparators[0], node.ops, [node.left])
    elif isinstance(node, ast.BoolOp):
        yield "and/or", ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(),
                                   node.values)
        for index in range(len(node.values)):
            rest = node.values[:index] + node.values[index + 1:]
            yield "dropped condition", rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            yield "dropped method call", node.func.value
        for arg in node.args:
            if not isinstance(arg, ast.Starred):
                yield "dropped call", arg
        if _callee(node) not in SYMMETRIC_CALLS:
            for args in _swaps(node.args):
                yield "swapped arguments", ast.Call(node.func, args, node.keywords)
    elif isinstance(node, ast.Attribute):
        called = isinstance(parent, ast.Call) and step[0] == "func"
        yield from _attribute_variants(node.value, node.attr, called, scope,
                                       lambda attr: ast.Attribute(node.value, attr, node.ctx))
    elif isinstance(node, ast.Tuple | ast.List):
        for elts in _swaps(node.elts):
            yield "swapped elements", type(node)(elts, node.ctx)
    elif isinstance(node, ast.IfExp):
        yield "swapped branches", ast.IfExp(node.test, node.orelse, node.body)


def _attribute_variants(base: ast.AST | None, attr: str, called: bool, scope: Scope, make):
    """Another method the function calls on the same kind of object (a local's, or a
    module's), the in-place twin, or another member of the same enum."""
    on_local = _on_local(base, scope.local)
    if called or on_local:  # a module's or class's plain attribute: its siblings, below
        for other in scope.attributes.get((called, on_local), []):
            if other != attr:
                yield ("other method" if called else "other attribute"), make(other)
    if called and on_local and (twin := _twin(attr)):
        yield "in-place twin", make(twin)
    if not called and base is not None:
        for other in _siblings(_resolve(base, scope.namespace), attr):
            yield "other member", make(other)


# ---------------------------------------------------------------- answers as text

# an answer is an expression, a subscript (`lo:hi`, which alone is an annotation), a statement,
# or call arguments (`"gloo", rank=rank`)
WRAPPERS = (("", "", "eval"), ("x[", "]", "eval"), ("", "", "exec"), ("f(", ")", "eval"))


def _parse(text: str):
    """(tree, head, tail, paths of the answer's own nodes), or None if it does not parse."""
    for head, tail, mode in WRAPPERS:
        try:
            tree = ast.parse(head + text + tail, mode=mode)
        except SyntaxError:
            continue
        if mode == "exec":
            roots = [(("body", i),) for i in range(len(tree.body))]
        elif head == "f(":
            roots = [(("body", None), (name, i)) for name in ("args", "keywords")
                     for i in range(len(getattr(tree.body, name)))]
        elif head == "x[":
            roots = [(("body", None), ("slice", None))]
        else:
            roots = [(("body", None),)]
        return tree, head, tail, roots
    return None


def _text(tree, head: str, tail: str) -> str | None:
    text = ast.unparse(tree)
    if "\n" in text or not (text.startswith(head) and text.endswith(tail)):
        return None
    return text[len(head): len(text) - len(tail)]


def _at(tree, path: tuple):
    node = tree
    for name, index in path:
        node = getattr(node, name) if index is None else getattr(node, name)[index]
    return node


def _replace(tree, path: tuple, new):
    tree = copy.deepcopy(tree)
    name, index = path[-1]
    holder = _at(tree, path[:-1])
    if index is None:
        setattr(holder, name, new)
    else:
        getattr(holder, name)[index] = new
    return tree


def normalized(text: str) -> str:
    """An answer as ast.unparse writes it (spacing, quotes, redundant parentheses gone)."""
    parsed = _parse(text)
    return (_text(*parsed[:3]) if parsed else None) or text.strip()


def generate(answer: str, scope: Scope | None = None, before: str = "",
             after: str = "") -> list[Mutant]:
    """Plausible wrong answers to a blank whose answer is `answer`, deduplicated, never the
    answer itself. `before` and `after` are the code around the blank on its line: they tell
    a condition (`if _____:`) and an attribute's name (`dist._____()`)."""
    scope = scope or Scope()
    parsed = _parse(answer)
    if parsed is None:
        return []
    tree, head, tail, roots = parsed
    found: dict[str, Mutant] = {}

    def add(kind: str, text: str | None) -> None:
        if text and text not in (answer.strip(), normalized(answer)) and text not in found:
            found[text] = Mutant(text, kind)

    name = answer.strip()
    if name.isidentifier() and before.rstrip().endswith("."):  # `dist._____()`
        base = None
        if dotted := re.search(r"([A-Za-z_][\w.]*)\.\s*$", before):
            with contextlib.suppress(SyntaxError):
                base = ast.parse(dotted[1], mode="eval").body
        called = after.lstrip().startswith("(")
        for kind, other in _attribute_variants(base, name, called, scope, str):
            add(kind, other)
        return list(found.values())

    for root in roots:
        top = _at(tree, root)
        for path, node, parent, step in _walk(top, root):
            for kind, new in _variants(node, parent, step, scope, node is top):
                add(kind, _text(_replace(tree, path, new), head, tail))
    if not (before.strip() or after.strip()):  # the blank is the whole statement
        add("dropped statement", "pass")

    condition = re.search(r"(^|[\s(\[])(if|elif|while)\s*$", before) is not None
    if isinstance(tree, ast.Expression) and not head and (
            condition or isinstance(tree.body, ast.Compare | ast.BoolOp)):
        body = tree.body
        if condition and isinstance(body, ast.Name):  # any local can be tested for truth
            for other in sorted(scope.local - {body.id}):
                add("other name", other)
        if not (isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not)):
            add("negated condition", ast.unparse(ast.UnaryOp(ast.Not(), body)))
    return list(found.values())


def merge(made: list[Mutant], accepted=(), rejected=()) -> list[Mutant]:
    """Generated mutants, then hand-written REJECTs, then ACCEPTed answers. A generated mutant
    that is also written by hand keeps its kind and is marked `written` (and `accepted`, for an
    ACCEPT: it must pass): the sampled check runs every written one, as a drill verdict never
    settles it, so a planted answer is not dropped for having been generated too."""
    accepted_texts = {normalized(text) for text in accepted}
    written = accepted_texts | {normalized(text) for text in rejected}
    out: dict[str, Mutant] = {}
    for mutant in made:
        key = normalized(mutant.text)
        out.setdefault(key, Mutant(mutant.text, mutant.kind, key in accepted_texts,
                                   key in written))
    for text in rejected:
        out.setdefault(normalized(text), Mutant(text, "REJECT", written=True))
    for text in accepted:
        out.setdefault(normalized(text), Mutant(text, "ACCEPT", True, written=True))
    return list(out.values())
