"""The give-away check: can a blank be filled by copying what the learner has already read?

    python -m autograder.giveaway [IDS ...]        # also part of `make strength`

For every blank, the text shown before it is every earlier cell as released (markdown, and code
with its blanks and hints, hidden tests removed) and, in its own cell, the lines above it and
its hint. Four findings, each with the file:line of the blank (and of the text that gives it):

- GIVEN AWAY: the answer, whitespace removed, stands in that text. Short answers are exempt:
  a single token (a name, a number, a string) or fewer than MIN_CHARS characters without
  spaces, since `rank` or `0` stand everywhere and copying them teaches nothing either way.
- SAME SHAPE: the answer with its variable names renamed stands in code shown before it
  (`dist.all_reduce(t, op=...)` shown, `dist.all_reduce(grad, op=...)` asked). Names of
  modules, builtins, attributes and keyword arguments keep their spelling: they are the API.
  Answers of fewer than MIN_SHAPE_TOKENS tokens are exempt. Such a blank is rewritten, or
  carries its reason in the marker, `` # SHAPE `the general form is shown once, in the box` ``,
  and a notebook may hold at most MAX_SHAPES of them.
- HINT: the hint states the answer (any answer that is not a lone name).
- REPEATED: one answer shape (names renamed, numbers too) asked more than MAX_REPEATS times in
  a notebook: `(i - step) % N`, `(r - step) % N` and `(rank - k) % N` are one idea.

Any finding but a SAME SHAPE with its reason fails the check.
"""

from __future__ import annotations

import argparse
import builtins
import io
import keyword
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from autograder import solved
from distlab.source import paths
from distlab.source.markers import (
    BLANK,
    MARKER,
    SPAN,
    Blank,
    MarkerError,
    blank_source,
    comment_start,
    split_clauses,
)

MIN_CHARS = 8  # a shorter answer (whitespace removed) is too short to be "given away"
MIN_SHAPE_TOKENS = 5  # an answer of fewer tokens has too little shape to be a copy
MAX_SHAPES = 2  # same-shape blanks, each with its reason, a notebook may keep
MAX_REPEATS = 2  # times one answer shape may be asked in a notebook
HIDDEN = re.compile(r"^\s*### BEGIN HIDDEN TESTS.*?^\s*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
SOLUTION = re.compile(r"^(\s*)### BEGIN SOLUTION.*?^\s*### END SOLUTION[^\n]*", re.M | re.S)
CODE_IN_TEXT = re.compile(r"```[a-z]*\n(.*?)```|``(.+?)``|`([^`\n]+)`", re.S)
NAME = "ID"  # what every renamed variable becomes


@dataclass
class Finding:
    kind: str  # GIVEN AWAY, SAME SHAPE, HINT, REPEATED
    where: str  # file:line of the blank
    answer: str
    detail: str  # where the text stands, or the reason
    reason: str = ""  # a SAME SHAPE blank's reason from its marker

    @property
    def fails(self) -> bool:
        return not (self.kind == "SAME SHAPE" and self.reason)

    def line(self) -> str:
        why = f" (reason: {self.reason})" if self.reason else ""
        return f"{self.kind}: {self.where} `{self.answer}`: {self.detail}{why}"


@dataclass
class Report:
    assignment: str
    blanks: int = 0
    findings: list[Finding] = field(default_factory=list)

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def failures(self) -> list[str]:
        lines = [f.line() for f in self.findings if f.fails]
        shapes = self.of("SAME SHAPE")
        if len(shapes) > MAX_SHAPES:
            lines.append(f"SAME SHAPE: {len(shapes)} blanks of {self.assignment} have the shape "
                         f"of code shown before them; at most {MAX_SHAPES} may (rewrite some)")
        return lines

    def text(self) -> str:
        counts = ", ".join(f"{len(self.of(kind))} {kind.lower()}" for kind in
                           ("GIVEN AWAY", "SAME SHAPE", "HINT", "REPEATED"))
        out = [f"{self.assignment}: {self.blanks} blanks, {counts}"]
        out += [f"  {f.line()}" for f in self.findings if not f.fails]
        out += [f"  FAIL {line}" for line in self.failures()]
        return "\n".join(out)


# ---------------------------------------------------------------- what the learner sees


@dataclass
class Shown:
    """One line of text a learner reads before a blank, and where it is."""

    where: str
    text: str
    code: bool  # a code line (else markdown, or a hint)


def released_cell(cell) -> tuple[str, list[Blank]]:
    """A cell's source as the learner gets it, and its blanks."""
    if cell.cell_type != "code":
        return cell.source, []
    meta = cell.metadata.get("nbgrader", {})
    source = HIDDEN.sub("", cell.source)
    source = SOLUTION.sub(lambda m: f"{m.group(1)}# YOUR CODE HERE", source)
    return blank_source(source) if meta.get("solution") else (source, [])


def _code_pieces(shown: list[Shown]) -> list[tuple[str, str]]:
    """(where, code) for every piece of code among the lines: code lines (comments dropped,
    backticked code inside comments kept) and backticked code in markdown and hints."""
    pieces = []
    for item in shown:
        text = item.text
        if item.code:
            column = comment_start(text)
            comment = text[column:] if column is not None else ""
            pieces.append((item.where, text[:column] if column is not None else text))
            text = comment
        for match in CODE_IN_TEXT.finditer(text):
            pieces.append((item.where, next(g for g in match.groups() if g is not None)))
    return pieces


# ---------------------------------------------------------------- shapes


def tokens(code: str) -> list[str]:
    """The code's tokens, comments and line breaks left out ([] where it does not tokenize)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.findall(r"\w+|\S", code)
    return out


def shape(toks: list[str], kept: set[str]) -> list[str]:
    """The tokens with each variable renamed to NAME: an identifier that is not a keyword, a
    builtin, a kept name (modules), an attribute (after `.`) or a keyword argument (before `=`)."""
    out = []
    for k, tok in enumerate(toks):
        variable = (tok.isidentifier() and not keyword.iskeyword(tok) and tok not in kept
                    and not (k and toks[k - 1] == ".")
                    and not (k + 1 < len(toks) and toks[k + 1] == "="
                             and k and toks[k - 1] in ("(", ",")))
        out.append(NAME if variable else tok)
    return out


def _contains(haystack: list[str], needle: list[str]) -> bool:
    sep = "\x00"
    return f"{sep}{sep.join(needle)}{sep}" in f"{sep}{sep.join(haystack)}{sep}"


def _kept_names(nb) -> set[str]:
    """Builtins and every name a code cell of the notebook imports (dist, torch, np, F, ...)."""
    kept = set(dir(builtins))
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for match in re.finditer(r"^\s*(?:from\s+\S+\s+)?import\s+(.+)$", cell.source, re.M):
            for part in match.group(1).split(","):
                kept.add(part.split(" as ")[-1].strip().split(".")[0].strip("() "))
    return kept


def _short(answer: str) -> bool:
    return len(tokens(answer)) <= 1 or len(re.sub(r"\s", "", answer)) < MIN_CHARS


def _reasons(line: str, count: int) -> list[str]:
    """The `# SHAPE` reason of each blank of a solved line ("" where none)."""
    column = comment_start(line)
    marker = MARKER.match(line[column:]) if column is not None else None
    rest = marker["rest"] if marker else ""
    while (span := SPAN.match(rest)) is not None:
        rest = rest[span.end():]
    reasons = [""] * count
    for clause in split_clauses(rest)[1]:
        if clause.kind == "SHAPE":
            index = (clause.which or 1) - 1
            if 0 <= index < count:
                reasons[index] = " ".join(clause.answers)
    return reasons


# ---------------------------------------------------------------- the check


def check_assignment(assignment: str, solutions: Path = paths.SOLUTIONS) -> Report:
    path = paths.source_path(assignment, solutions)
    shown_path = path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path
    nb = solved.load(assignment, solutions)
    firsts = _first_lines(path, nb)
    kept = _kept_names(nb)
    report = Report(assignment)
    seen: list[Shown] = []  # every line of the cells before the current one
    asked: dict[tuple, list[str]] = {}  # answer shape -> where it is asked
    for index, cell in enumerate(nb.cells):
        text, blanks = released_cell(cell)
        lines = text.split("\n")
        solved_lines = cell.source.split("\n")
        here = lambda row, first=firsts[index]: f"{shown_path}:{first + row - 1}"  # noqa: E731
        for blank in blanks:
            report.blanks += 1
            where = here(blank.line)
            on_line = [b for b in blanks if b.line == blank.line]
            reason = _reasons(solved_lines[blank.line - 1], len(on_line))[on_line.index(blank)]
            above = [Shown(here(row), lines[row - 1], cell.cell_type == "code")
                     for row in range(1, blank.line)]
            hint = [Shown(where, f"# {blank.hint}", False)] if blank.hint else []
            before = seen + above + hint
            _one_blank(report, blank, where, reason, before, hint, kept, asked)
        seen += [Shown(here(row), line, cell.cell_type == "code")
                 for row, line in enumerate(lines, start=1)]
    for places in asked.values():
        if len(places) > MAX_REPEATS:
            report.findings.append(Finding(
                "REPEATED", places[0][0], places[0][1],
                f"the same answer shape is asked {len(places)} times (at most {MAX_REPEATS}): "
                + ", ".join(where for where, _ in places)))
    return report


def _one_blank(report: Report, blank: Blank, where: str, reason: str, before: list[Shown],
               hint: list[Shown], kept: set[str], asked: dict) -> None:
    answer = blank.answer
    flat = re.sub(r"\s", "", answer)
    answer_tokens = tokens(answer)
    if answer_tokens and not (len(answer_tokens) == 1 and answer_tokens[0].isidentifier()):
        hint_tokens = [t for item in hint for t in tokens(item.text.lstrip("# "))]
        if hint_tokens and _contains(hint_tokens, answer_tokens):
            report.findings.append(Finding("HINT", where, answer, f"its hint says it: "
                                           f"{blank.hint}"))
            return
    if not _short(answer):
        for item in before:
            if flat in re.sub(r"\s", "", item.text).replace(BLANK, "\x01"):
                report.findings.append(Finding("GIVEN AWAY", where, answer,
                                               f"it stands at {item.where}: "
                                               f"{item.text.strip()[:90]}"))
                return
    answer_shape = shape(answer_tokens, kept)
    if len(answer_tokens) >= MIN_SHAPE_TOKENS:
        idea = tuple("0" if re.fullmatch(r"\d+(\.\d*)?", t) else t for t in answer_shape)
        asked.setdefault(idea, []).append((where, answer))
        for piece_where, piece in _code_pieces(before):
            if _contains(shape(tokens(piece), kept), answer_shape):
                report.findings.append(Finding("SAME SHAPE", where, answer,
                                               f"its shape stands at {piece_where}: "
                                               f"{piece.strip()[:90]}", reason))
                return


def _first_lines(path: Path, nb) -> list[int]:
    """The line in the file of each cell's first source line."""
    from autograder.strength.plan import _first_lines as first_lines

    return first_lines(path, nb)


def check(ids: list[str] | None = None,
          solutions: Path = paths.SOLUTIONS) -> list[Report]:
    return [check_assignment(a, solutions) for a in ids or paths.assignment_ids(solutions)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.giveaway",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    args = parser.parse_args(argv)
    try:
        reports = check(args.ids)
    except MarkerError as err:
        print(f"give-away: {err}")
        return 1
    for report in reports:
        print(report.text())
    failed = sum(len(report.failures()) for report in reports)
    print(f"give-away: {'FAILED, ' + str(failed) + ' failure(s)' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
