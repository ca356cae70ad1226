"""The give-away check: can a blank be filled by copying what is on the learner's screen?

    python -m autograder.giveaway [IDS ...]        # also part of `make strength`

A floor under the review of ../shared/BLANKS.md, never the standard. The screen is everything a
learner reads (BLANKS.md, "the cover test"): every cell of the released notebook, before and
after the blank (markdown, code with its blanks and hints, the visible part of graded cells);
what each cell prints when the solved notebook runs, where an executed copy is given
(`executed=`: the autograded solved notebook that make test's grading leaves); and the source
of every distlab helper the notebook imports (a module imported from, whole, with the captions
its figures draw; a name imported from `distlab` itself, its definition). Findings, each with
the file:line of the blank and where on the screen the answer stands:

- GIVEN AWAY: the answer, whitespace removed, stands on the screen. Answers of fewer than
  MIN_TOKENS tokens are exempt (`rank` or `0` stand everywhere).
- SAME SHAPE: the answer with its variable names renamed stands in code on the screen
  (`dist.all_reduce(t, op=...)` shown, `dist.all_reduce(grad, op=...)` asked). Names of
  modules, builtins, attributes and keyword arguments keep their spelling: they are the API.
  Answers of fewer than MIN_SHAPE_TOKENS tokens are exempt. Such a blank is rewritten, or
  carries its reason in the marker, `` # SHAPE `the general form is shown once, in the box` ``,
  and a notebook may hold at most MAX_SHAPES of them.
- HINT: the hint states the answer (any answer that is not a lone name).
- REPEATED: one idea asked more than MAX_REPEATS times in a notebook: answers that match once
  names and integer constants are abstracted and a trailing `± constant` is dropped, so
  `(i - step) % N`, `(r - step + 1) % N` and `(rank - k) % N` are one idea.
- API: a blank marked `# API` (recall of an API the seeds ask for by name): reported apart,
  never checked further, never a failure.

Any finding but an API or a SAME SHAPE with its reason fails the check.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import io
import keyword
import re
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograder import solved
from distlab.source import paths
from distlab.source.definitions import functions
from distlab.source.markers import (
    BLANK,
    Blank,
    MarkerError,
    blank_source,
    comment_start,
    line_clauses,
)

MIN_TOKENS = 3  # an answer of fewer tokens is too short to be "given away"
MIN_SHAPE_TOKENS = 5  # an answer of fewer tokens has too little shape to be a copy
MAX_SHAPES = 2  # same-shape blanks, each with its reason, a notebook may keep
MAX_REPEATS = 2  # times one answer shape may be asked in a notebook
HIDDEN = re.compile(r"^\s*### BEGIN HIDDEN TESTS.*?^\s*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
SOLUTION = re.compile(r"^(\s*)### BEGIN SOLUTION.*?^\s*### END SOLUTION[^\n]*", re.M | re.S)
CODE_IN_TEXT = re.compile(r"```[a-z]*\n(.*?)```|``(.+?)``|`([^`\n]+)`", re.S)
NAME = "ID"  # what every renamed variable becomes


@dataclass
class Finding:
    kind: str  # GIVEN AWAY, SAME SHAPE, HINT, REPEATED, API
    where: str  # file:line of the blank
    answer: str
    detail: str  # where the text stands, or the reason
    reason: str = ""  # a SAME SHAPE blank's reason from its marker
    place: str = ""  # what on the screen gives it: markdown, code, graded cell, output, ...

    @property
    def fails(self) -> bool:
        return not (self.kind == "API" or (self.kind == "SAME SHAPE" and self.reason))

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
                           ("GIVEN AWAY", "SAME SHAPE", "HINT", "REPEATED", "API"))
        places = Counter(f.place for f in self.findings if f.place)
        if places:
            counts += " (the answer stands in: " + ", ".join(
                f"{place} {n}" for place, n in places.most_common()) + ")"
        out = [f"{self.assignment}: {self.blanks} blanks, {counts}"]
        out += [f"  {f.line()}" for f in self.findings if not f.fails]
        out += [f"  FAIL {line}" for line in self.failures()]
        return "\n".join(out)


# ---------------------------------------------------------------- what the learner sees


@dataclass
class Shown:
    """One line of text on the learner's screen, and where it is."""

    where: str
    text: str
    code: bool  # a code line (else markdown, an output, or a hint)
    place: str = "code"  # markdown, code, graded cell, output, distlab, hint


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
    return len(tokens(answer)) < MIN_TOKENS


def _clauses(line: str, count: int) -> list[dict[str, str]]:
    """For each blank of a solved line, its give-away clauses: {"SHAPE": reason, "API": ""}."""
    found: list[dict[str, str]] = [{} for _ in range(count)]
    for clause in line_clauses(line):
        if clause.kind in ("SHAPE", "API"):
            index = (clause.which or 1) - 1
            if 0 <= index < count:
                found[index][clause.kind] = " ".join(clause.answers)
    return found


def idea(answer_shape: list[str]) -> tuple[str, ...]:
    """An answer's idea: its shape with integer constants abstracted and every `± constant`
    that ends an expression (before `)`, `]`, `,`, `:` or the end) dropped."""
    out = ["0" if re.fullmatch(r"\d+", t) else t for t in answer_shape]
    k = 0
    while k + 1 < len(out):
        if out[k] in "+-" and out[k + 1] == "0" and (k + 2 == len(out)
                                                      or out[k + 2] in (")", "]", ",", ":")):
            del out[k:k + 2]
        else:
            k += 1
    return tuple(out)


# ---------------------------------------------------------------- the screen


def _outputs(nb, executed, here) -> list[Shown]:
    """What each cell of `executed` (the solved notebook, run) printed, as lines of the
    screen, placed at the cell of `nb` with the same grade_id."""
    if executed is None:
        return []
    printed = {}
    for cell in executed.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        texts = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out.get("text", ""))
            elif "data" in out:
                texts.append(out["data"].get("text/plain", ""))
        if grade_id:
            printed[grade_id] = "".join(texts)
    shown = []
    for index, cell in enumerate(nb.cells):
        text = printed.get(cell.metadata.get("nbgrader", {}).get("grade_id"), "")
        shown += [Shown(f"output of {here(index, 1)}", line, False, "output")
                  for line in text.split("\n") if line.strip()]
    return shown


DISTLAB = Path(paths.__file__).resolve().parents[1]  # src/distlab


def _module_file(module: str) -> Path | None:
    parts = module.split(".")[1:]
    for candidate in (DISTLAB.joinpath(*parts).with_suffix(".py"),
                      DISTLAB.joinpath(*parts, "__init__.py")):
        if parts and candidate.is_file():
            return candidate
    return None


def _definition(path: Path, name: str) -> str | None:
    """The source of top-level `name` in the module at path, following the module's own
    `from distlab.x import name` (how distlab/__init__.py re-exports)."""
    text = path.read_text()
    if (found := functions(text).get(name)) is not None:
        return found
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("distlab") \
                and any(alias.name == name for alias in node.names):
            target = _module_file(node.module)
            return _definition(target, name) if target else None
    return None


def _distlab_screen(nb) -> list[Shown]:
    """The source a learner is one `??` away from: each distlab module the notebook imports
    from, whole (its helpers and the captions its figures draw), and each name it imports from
    `distlab` itself (the launcher and the blanks: plumbing), its definition only."""
    shown, seen = [], set()
    root = DISTLAB.parents[1]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(HIDDEN.sub("", cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("distlab")):
                continue
            path = (DISTLAB / "__init__.py" if node.module == "distlab"
                    else _module_file(node.module))
            if path is None:
                continue
            where = path.relative_to(root) if path.is_relative_to(root) else path
            if node.module != "distlab":
                if path not in seen:
                    seen.add(path)
                    shown += [Shown(f"{where}:{row}", line, True, "distlab")
                              for row, line in enumerate(path.read_text().split("\n"), 1)]
                continue
            for alias in node.names:
                found = _definition(path, alias.name)
                if found and (path, alias.name) not in seen:
                    seen.add((path, alias.name))
                    shown += [Shown(f"distlab.{alias.name}, {where}", line, True, "distlab")
                              for line in found.split("\n")]
    return shown


# ---------------------------------------------------------------- the check


def check_assignment(assignment: str, solutions: Path = paths.SOLUTIONS,
                     executed=None) -> Report:
    """The findings of one notebook. executed: the solved notebook with its outputs (as nbgrader
    autogrades it), whose printed lines are on the screen too; None: they are not read."""
    path = paths.source_path(assignment, solutions)
    shown_path = path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path
    nb = solved.load(assignment, solutions)
    firsts = solved.first_lines(path, nb)
    kept = _kept_names(nb)

    def here(index: int, row: int) -> str:
        return f"{shown_path}:{firsts[index] + row - 1}"

    screen: list[Shown] = []
    released = []
    for index, cell in enumerate(nb.cells):
        text, blanks = released_cell(cell)
        released.append((text, blanks))
        place = ("markdown" if cell.cell_type != "code" else "graded cell"
                 if cell.metadata.get("nbgrader", {}).get("grade") else "code")
        screen += [Shown(here(index, row), line, cell.cell_type == "code", place)
                   for row, line in enumerate(text.split("\n"), start=1)]
    screen += _outputs(nb, executed, here) + _distlab_screen(nb)
    # what every blank is compared with, computed once: each line without its whitespace
    # (blanks masked), and each piece of code with its shape
    flat = [(item, re.sub(r"\s", "", item.text).replace(BLANK, "\x01")) for item in screen]
    places = {item.where: item.place for item in screen}
    pieces = [(where, places[where], piece, shape(tokens(piece), kept))
              for where, piece in _code_pieces(screen)]
    report = Report(assignment)
    asked: dict[tuple, list[tuple[str, str]]] = {}  # idea -> where it is asked
    for index, (cell, (_, blanks)) in enumerate(zip(nb.cells, released, strict=True)):
        solved_lines = cell.source.split("\n")
        for blank in blanks:
            report.blanks += 1
            where = here(index, blank.line)
            on_line = [b for b in blanks if b.line == blank.line]
            clauses = _clauses(solved_lines[blank.line - 1], len(on_line))[on_line.index(blank)]
            if "API" in clauses:
                report.findings.append(Finding("API", where, blank.answer, "API recall, "
                                               "marked # API: not checked"))
                continue
            hint = [Shown(where, f"# {blank.hint}", False, "hint")] if blank.hint else []
            _one_blank(report, blank, where, clauses.get("SHAPE", ""), flat, pieces, hint,
                       kept, asked)
    for places in asked.values():
        if len(places) > MAX_REPEATS:
            report.findings.append(Finding(
                "REPEATED", places[0][0], places[0][1],
                f"one idea is asked {len(places)} times (at most {MAX_REPEATS}): "
                + ", ".join(f"{where} `{answer}`" for where, answer in places)))
    return report


def _one_blank(report: Report, blank: Blank, where: str, reason: str,
               flat_screen: list[tuple[Shown, str]], pieces: list[tuple[str, str, str, list]],
               hint: list[Shown], kept: set[str], asked: dict) -> None:
    answer = blank.answer
    flat = re.sub(r"\s", "", answer)
    answer_tokens = tokens(answer)
    answer_shape = shape(answer_tokens, kept)
    if len(answer_tokens) >= MIN_SHAPE_TOKENS:
        asked.setdefault(idea(answer_shape), []).append((where, answer))
    if answer_tokens and not (len(answer_tokens) == 1 and answer_tokens[0].isidentifier()):
        hint_tokens = [t for item in hint for t in tokens(item.text.lstrip("# "))]
        if hint_tokens and _contains(hint_tokens, answer_tokens):
            report.findings.append(Finding("HINT", where, answer, f"its hint says it: "
                                           f"{blank.hint}", place="hint"))
            return
    if not _short(answer):
        for item, text in flat_screen:
            if flat in text:
                report.findings.append(Finding("GIVEN AWAY", where, answer,
                                               f"it stands in {item.place} at {item.where}: "
                                               f"{item.text.strip()[:90]}", place=item.place))
                return
    if len(answer_tokens) >= MIN_SHAPE_TOKENS:
        for piece_where, place, piece, piece_shape in pieces:
            if _contains(piece_shape, answer_shape):
                report.findings.append(Finding("SAME SHAPE", where, answer,
                                               f"its shape stands in {place} at "
                                               f"{piece_where}: {piece.strip()[:90]}", reason,
                                               place=place))
                return


def check(ids: list[str] | None = None,
          solutions: Path = paths.SOLUTIONS) -> list[Report]:
    """Every notebook's findings (without outputs: the CLI runs no notebook)."""
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
