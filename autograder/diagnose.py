"""Which blank is most likely wrong: put the reference answer into the learner's code, one
blank (then two, ...) at a time, and see which replacement makes the hidden test pass.

The learner's function is read back from its source; each line that held a `_____` in the
released template is found again (in order, ignoring comments and spacing) and its fills are
read off. A learner who rewrote a line beyond recognition is graded on the tests alone.
"""

from __future__ import annotations

import inspect
import itertools
import re
import textwrap
from dataclasses import dataclass, field

from distlab.blanks import source_lines
from distlab.source.markers import BLANK, Blank, comment_start


def _uncommented(line: str) -> str:
    """line without its comment, its indentation kept."""
    column = comment_start(line)
    return (line if column is None else line[:column]).rstrip()


def _code(line: str) -> str:
    return _uncommented(line).strip()


def _pattern(template_code: str) -> re.Pattern:
    """A regex for one template line whose `_____`s capture what the learner wrote there."""
    pieces = [re.sub(r"(\\ )+", r"\\s*", re.escape(piece)) for piece in template_code.split(BLANK)]
    return re.compile(r"\s*" + r"(.+?)".join(pieces) + r"\s*$")


@dataclass
class Filled:
    """The learner's function, read back against the template it was released as."""

    lines: list[str]  # the learner's function source, dedented
    where: list[int | None]  # per template blank line: the learner line that matches it
    fills: dict[int, str]  # blank number -> what the learner wrote there
    template_lines: list[tuple[str, list[Blank]]]  # (template code, its blanks)
    last: dict[int, int] = field(default_factory=dict)  # a fill over several lines: its last

    def unfilled(self) -> set[int]:
        return {n for n, text in self.fills.items() if text.strip() == BLANK}

    def aligned(self) -> bool:
        return all(index is not None for index in self.where)

    def on_template(self, template: str) -> str:
        """The released `template` (the cell) with the learner's fills in its blanks: what is
        graded when the learner changed code outside the blanks."""
        rows = template.split("\n")
        for code, blanks in self.template_lines:
            row = blanks[0].line - 1
            indent = re.match(r"\s*", rows[row]).group(0)
            parts = code.split(BLANK)
            text = parts[0]
            for blank, tail in zip(blanks, parts[1:], strict=True):
                text += self.fills.get(blank.number, BLANK) + tail
            rows[row] = indent + text.replace("\n", "\n" + indent)
        return "\n".join(rows)

    def with_answers(self, numbers: set[int], answers: dict[int, str]) -> str:
        """The learner's source with the blanks in `numbers` replaced by `answers`."""
        lines = list(self.lines)
        # from the bottom up: a fill over several lines becomes one line of the answer
        for index, (code, blanks) in reversed(list(zip(self.where, self.template_lines,
                                                       strict=True))):
            if index is None or not any(b.number in numbers for b in blanks):
                continue
            indent = re.match(r"\s*", lines[index]).group(0)
            parts = code.split(BLANK)
            text = parts[0]
            for blank, tail in zip(blanks, parts[1:], strict=True):
                chosen = answers if blank.number in numbers else self.fills
                text += chosen[blank.number] + tail
            lines[index:self.last.get(index, index) + 1] = [
                indent + text.replace("\n", "\n" + indent)]
        return "\n".join(lines)


def source_of(fn) -> str:
    """The learner's function (or class) as they wrote it ("" when its source is not found)."""
    try:
        return textwrap.dedent("".join(source_lines(fn)[0]))
    except (OSError, TypeError):
        return ""


def _squash(code: str) -> str:
    return re.sub(r"\s+", "", code)


def read_fills(learner_source: str, template: str, blanks: list[Blank]) -> Filled:
    """Align the learner's function source with the released `template` source of its cell.

    Template lines are walked in order. A line without a blank anchors where it is found again
    (spacing ignored); a line with blanks is matched by its fixed parts. A line that is a blank
    and nothing else has no fixed parts, so it is looked for only between its neighbours'
    anchors: the statement the learner wrote there.
    """
    lines = learner_source.split("\n")
    codes = [_code(line) for line in lines]
    by_line: dict[int, list[Blank]] = {}
    for blank in blanks:
        by_line.setdefault(blank.line, []).append(blank)
    rows = [_code(row) for row in template.split("\n")]
    template_lines = [(rows[row - 1], by_line[row]) for row in sorted(by_line)]

    def anchor(row: str, start: int) -> int | None:
        return next((j for j in range(start, len(codes)) if _squash(codes[j]) == _squash(row)),
                    None)

    where: list[int | None] = []
    fills: dict[int, str] = {}
    last: dict[int, int] = {}
    cursor = 0
    for number, row in enumerate(rows, start=1):
        if number not in by_line:
            found = anchor(row, cursor) if row else None
            cursor = cursor if found is None else found + 1
            continue
        if row == BLANK:  # a whole statement: the learner's lines before the next anchor
            following = next((r for r in rows[number:] if r and BLANK not in r), None)
            stop = anchor(following, cursor) if following else None
            window = [j for j in range(cursor, stop if stop is not None else len(codes))
                      if codes[j]]
            after = next((r for r in rows[number:] if r), "")
            if BLANK in after or (following and stop is None):  # a blank next, or the next
                window = window[:1]  # line not found again: the one line
            found = window[0] if window else None
            texts = []
            if found is not None:  # the statements written there, as one block of code
                last[found] = window[-1]
                block = [lines[j] for j in range(found, window[-1] + 1)]
                base = len(block[0]) - len(block[0].lstrip())
                texts = ["\n".join(_uncommented(line[:base].lstrip() + line[base:])
                                   for line in block).strip()]
        else:
            match = next(((j, m) for j in range(cursor, len(codes))
                          if (m := _pattern(row).match(codes[j]))), None)
            found, texts = (match[0], match[1].groups()) if match else (None, [])
        if found is not None:
            cursor = last.get(found, found) + 1
            for blank, text in zip(by_line[number], texts, strict=True):
                fills[blank.number] = text.strip()
        where.append(found)
    return Filled(lines, where, fills, template_lines, last)


def _globals_of(fn) -> dict:
    """The globals a function, or the methods of a class, see."""
    if inspect.isclass(fn):
        for member in vars(fn).values():
            code_owner = getattr(member, "__func__", member)
            if hasattr(code_owner, "__globals__"):
                return code_owner.__globals__
        return {}
    return fn.__globals__


def rebuild(fn, source: str):
    """Define `source` (one function or class) in a copy of fn's globals; return the new one."""
    namespace = dict(_globals_of(fn))
    exec(compile(source, "<candidate>", "exec"), namespace)
    return namespace[fn.__name__]


def wrong_blanks(filled: Filled, blanks: list[Blank], passes, max_trials: int = 40):
    """The smallest set of blanks whose reference answers make `passes(fn)` true, or None.

    Unfilled blanks are always in the set. Sets are tried from small to large, so one wrong
    blank is found in at most as many trials as there are blanks.
    """
    answers = {b.number: b.answer for b in blanks}
    must = filled.unfilled()
    others = sorted(set(answers) - must)
    trials = 0
    for size in range(len(others) + 1):
        for extra in itertools.combinations(others, size):
            numbers = must | set(extra)
            if not numbers:
                continue
            trials += 1
            if trials > max_trials:
                return None
            if passes(filled.with_answers(numbers, answers)):
                return numbers
    return None
