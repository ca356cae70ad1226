"""Blank markers: how a solved line says which part of it the learner fills.

A marker is a comment, so the solved source still runs:

    send_idx = (rank - step) % N        # BLANK which chunk did this rank finish last?
    dist.init_process_group(backend="gloo")   # BLANK `"gloo"` the CPU backend
    if 0 <= mb < M:                     # BLANK is this a real micro-batch?
    sampler.set_epoch(epoch)            # BLANK

`# BLANK` alone blanks the natural part of the line: the value of an assignment, a keyword
argument or a `return`, the condition of an `if`/`elif`/`while`, or else the whole statement.
`` # BLANK `span` `` blanks exactly that span (several spans may follow one marker). Whatever
text follows is the hint; it stays as a comment, numbered so feedback can name the blank:

    send_idx = _____  # [1] which chunk did this rank finish last?

After the hint, `# ACCEPT` lists other correct answers and `# REJECT` hand-written wrong ones,
each in backticks; on a line with several blanks a number says which (1 = leftmost). They are
for the blank-strength check (autograder/strength/) and never reach the learner:

    dst = (r + k) % N  # BLANK k places to the right # ACCEPT `(k + r) % N` # REJECT `r + k`
    x = f(a) + g(b)    # BLANK `f(a)` `g(b)` both # ACCEPT 2 `g(b=b)` # REJECT 1 `f(b)`

`# API` (no answers; a number for one blank of several) marks a blank that asks API recall
the seeds ask for by name (the backend, `DDP(...)`, `set_epoch`): the give-away check reports
it apart and never fails it (autograder/giveaway.py, ../shared/BLANKS.md):

    sampler.set_epoch(epoch)  # BLANK so each epoch shuffles differently # API
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass

BLANK = "_____"
MARKER = re.compile(r"#\s*BLANK\b(?P<rest>.*)$")
SPAN = re.compile(r"\s*`([^`]+)`")
COMPOUND = re.compile(r"^(?P<head>\s*(?:if|elif|while)\s+)(?P<cond>.+?)(?P<tail>\s*:\s*)$")
RETURN = re.compile(r"^(?P<head>\s*return\s+)(?P<value>.+?)(?P<tail>\s*)$")
# the first `=` or augmented `+=`-style operator that is not part of ==, <=, >=, != or :=
ASSIGN = re.compile(
    r"^(?P<head>[^=#]*?[^=!<>:+\-*/%&|^@](?:\+|-|\*\*|\*|//|/|%|&|\||\^|@|>>|<<)?=(?!=)\s*)"
    r"(?P<value>.+?)(?P<tail>,?\s*)$"
)


class MarkerError(ValueError):
    """A blank marker that cannot be applied: the message names the file and line."""


@dataclass(frozen=True)
class Blank:
    number: int  # 1-based, in order of appearance within its cell
    line: int  # 1-based line within the cell
    answer: str  # the text the learner must write
    hint: str  # the comment that stays in the release ("" if none)


SOLUTION_FENCE = re.compile(r"^\s*### (?:BEGIN|END) SOLUTION\s*$")
CLAUSE_START = re.compile(r"#\s*(?:ACCEPT|REJECT|SHAPE|API)\b")
CLAUSE = re.compile(r"\s*#\s*(?P<kind>ACCEPT|REJECT|SHAPE|API)\b(?:\s+(?P<which>\d+))?"
                    r"(?P<items>(?:\s*`[^`]+`)*)\s*")
ITEM = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Clause:
    kind: str  # "ACCEPT", "REJECT", "SHAPE" (a reason for the give-away check) or "API"
    which: int | None  # which blank of the line (1 = leftmost); None: the line's only blank
    answers: tuple[str, ...]


def split_clauses(rest: str, where: str = "<cell>") -> tuple[str, list[Clause]]:
    """(hint, clauses) of what follows a marker's spans: the hint is what the learner sees;
    the `# ACCEPT` / `# REJECT` clauses after it are for the strength check only."""
    start = CLAUSE_START.search(rest)
    if start is None:
        return rest.strip(), []
    hint, tail, clauses = rest[: start.start()].strip(), rest[start.start():], []
    while tail.strip():
        match = CLAUSE.match(tail)
        if match is None:
            raise MarkerError(f"{where}: ACCEPT and REJECT take answers in backticks, "
                              f"`like this`; cannot read: {tail.strip()}")
        which = int(match["which"]) if match["which"] else None
        answers = tuple(ITEM.findall(match["items"]))
        if match["kind"] == "API" and answers:
            raise MarkerError(f"{where}: # API takes no answers: {tail.strip()}")
        if match["kind"] != "API" and not answers:
            raise MarkerError(f"{where}: ACCEPT and REJECT take answers in backticks, "
                              f"`like this`; cannot read: {tail.strip()}")
        clauses.append(Clause(match["kind"], which, answers))
        tail = tail[match.end():]
    return hint, clauses


def line_clauses(line: str, where: str = "<cell>") -> list[Clause]:
    """The clauses (`# ACCEPT`, `# REJECT`, `# SHAPE`, `# API`) of a solved line's marker,
    after its spans and hint; [] for a line without one."""
    column = comment_start(line)
    marker = MARKER.match(line[column:]) if column is not None else None
    rest = marker["rest"] if marker else ""
    while (span := SPAN.match(rest)) is not None:
        rest = rest[span.end():]
    return split_clauses(rest, where)[1]


def comment_start(line: str) -> int | None:
    """Column of the line's comment, found with the tokenizer so `#` in strings is ignored."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return tok.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        # a line of a multi-line statement does not tokenize alone: fall back to the marker
        match = re.search(r"#\s*BLANK\b", line)
        return match.start() if match else None
    return None


def _unbalanced_tail(text: str) -> int:
    """How many closing brackets at the end of `text` have no opening bracket in it."""
    depth = 0
    for char in text:
        depth += (char in "([{") - (char in ")]}")
    count = 0
    while depth < 0 and text and text[-1] in ")]}":
        text, depth, count = text[:-1].rstrip(), depth + 1, count + 1
    return count


def _default_span(code: str) -> tuple[int, int]:
    """Start and end of what a bare `# BLANK` blanks on this line of code."""
    for pattern, group in ((COMPOUND, "cond"), (RETURN, "value"), (ASSIGN, "value")):
        match = pattern.match(code)
        if match:
            start, end = match.start(group), match.end(group)
            # a keyword argument that closes the call on its line: `f(x, op=SUM)` blanks `SUM`
            for _ in range(_unbalanced_tail(code[start:end])):
                end = code.rindex(code[start:end].rstrip()[-1], start, end)
                end = len(code[:end].rstrip())
            return start, end
    stripped = code.strip()
    start = code.index(stripped)
    return start, start + len(stripped)


def blank_line(line: str, first_number: int, where: str) -> tuple[str, list[tuple[str, str]]]:
    """Blank one line. Return the released line and its (answer, hint) pairs, in order."""
    column = comment_start(line)
    marker = MARKER.match(line[column:]) if column is not None else None
    if marker is None:
        return line, []
    code = line[:column].rstrip()
    rest = marker.group("rest")
    spans = []
    while (span := SPAN.match(rest)) is not None:
        spans.append(span.group(1))
        rest = rest[span.end() :]
    hint, _ = split_clauses(rest, where)  # ACCEPT/REJECT lists are for the strength check
    if not code.strip():
        raise MarkerError(f"{where}: a BLANK marker needs code before it on the same line")

    if spans:
        positions = []
        for span in spans:
            count = code.count(span)
            if count != 1:
                found = "matches nothing" if count == 0 else f"matches {count} places"
                raise MarkerError(f"{where}: BLANK `{span}` {found} in: {code.strip()}")
            positions.append((code.index(span), code.index(span) + len(span)))
        positions.sort()
        for (_, end), (start, _) in zip(positions, positions[1:], strict=False):
            if start < end:
                raise MarkerError(f"{where}: BLANK spans overlap in: {code.strip()}")
    else:
        positions = [_default_span(code)]

    released, answers, cursor = "", [], 0
    for start, end in positions:
        released += code[cursor:start] + BLANK
        answers.append(code[start:end])
        cursor = end
    released += code[cursor:]
    numbers = ", ".join(f"[{first_number + k}]" for k in range(len(answers)))
    released += f"  # {numbers} {hint}".rstrip() if hint or len(answers) else ""
    return released, [(answer, hint) for answer in answers]


def blank_source(source: str, where: str = "<cell>",
                 first_line: int = 1) -> tuple[str, list[Blank]]:
    """Blank every marked line of a cell's source. Return the release text and its blanks.

    `where` and `first_line` place the cell in its file, so an error reads `file.py:42: ...`.
    """
    out, blanks = [], []
    for row, line in enumerate(source.split("\n"), start=1):
        released, pairs = blank_line(line, len(blanks) + 1, f"{where}:{first_line + row - 1}")
        out.append(released)
        for answer, hint in pairs:
            blanks.append(Blank(len(blanks) + 1, row, answer, hint))
    return "\n".join(out), blanks


def has_marker(source: str) -> bool:
    return any(
        (column := comment_start(line)) is not None and MARKER.match(line[column:])
        for line in source.split("\n")
    )


def check_released(released: str, where: str) -> None:
    """A released cell must still parse, `_____` and all (else a marker cut a line badly), and
    never assign to `_____` (Python would make it a local name: UnboundLocalError, not the
    clear "blank not filled")."""
    try:
        tree = ast.parse(released, where)
    except SyntaxError as err:
        line = released.split("\n")[(err.lineno or 1) - 1].strip()
        raise MarkerError(
            f"{where}: after blanking, line {err.lineno} no longer parses: {line}\n"
            "Give the marker an explicit span: # BLANK `the part to blank`"
        ) from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == BLANK and isinstance(node.ctx, ast.Store):
            line = released.split("\n")[node.lineno - 1].strip()
            raise MarkerError(f"{where}: line {node.lineno} assigns to the blank: {line}\n"
                              "Blank a part of the target (an index) or the value instead")


def strip_markers(source: str) -> str:
    """The solved code without its marker comments (`# BLANK hint`, `# ACCEPT ...`) and
    without nbgrader's `### BEGIN/END SOLUTION` lines: the code a drill shows."""
    lines = [line for line in source.split("\n") if not SOLUTION_FENCE.match(line)]
    cuts = {}
    for token in tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline):
        if token.type == tokenize.COMMENT and MARKER.match(token.string):
            cuts[token.start[0] - 1] = token.start[1]
    return "\n".join(line[:cuts[row]].rstrip() if row in cuts else line
                     for row, line in enumerate(lines))
