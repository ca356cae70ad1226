"""Planning the blank-strength check: every blank of a solved source, its mutants (wrong answers
from autograder.mutants, or the `# ACCEPT` / `# REJECT` lists) and the cell each one makes;
nothing runs here."""

from __future__ import annotations

import ast
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from autograder import drill_verdicts, solved
from autograder.mutants import (
    Mutant,
    blank_answers,
    generate,
    merge,
    scope_of,
)
from distlab.source import paths
from distlab.source.definitions import definitions
from distlab.source.markers import BLANK, Blank, MarkerError, blank_source, comment_start


@dataclass
class Outcome:
    passed: bool  # every hidden test passed (for every seed)
    reason: str | None  # the first failure, as a learner would read it
    timed_out: bool = False
    seconds: float = 0.0


@dataclass
class BlankCase:
    """One blank, its mutants, and what came of each."""

    where: str  # file:line of the blank in the solved source
    function: str  # the top-level definition holding it
    blank: Blank
    tests: list[str]  # the hidden tests that must catch its mutants
    cell: int  # index of its cell in the notebook
    solved: str = ""  # the solved source of that cell
    mutants: list[Mutant] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # mutant text -> the mutated cell
    problems: list[str] = field(default_factory=list)  # found before running anything
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # mutant text -> outcome
    settled: bool = False  # its generated mutants all failed when the drill verdicts were made

    def label(self) -> str:
        return f"{self.where}: {self.function} [{self.blank.number}] `{self.blank.answer}`"


def _tests() -> dict:
    """Every registered hidden test."""
    from autograder import exercises

    return exercises.all_tests()


def _fill(template: str, blanks: list[Blank], answers: dict[int, str]) -> str:
    """The released cell with each blank replaced by answers[its number]."""
    lines = template.split("\n")
    for row in sorted({blank.line for blank in blanks}):
        on_line = [blank for blank in blanks if blank.line == row]
        parts = lines[row - 1].split(BLANK)
        if len(parts) != len(on_line) + 1:
            raise MarkerError(f"cell line {row}: {len(parts) - 1} `{BLANK}` for "
                              f"{len(on_line)} blank(s): a hint that holds `{BLANK}`?")
        lines[row - 1] = parts[0] + "".join(answers[blank.number] + tail
                                            for blank, tail in zip(on_line, parts[1:],
                                                                   strict=True))
    return "\n".join(lines)


def _around(template: str, blanks: list[Blank], blank: Blank) -> tuple[str, str]:
    """The code before and after `blank` on its line, the line's other blanks filled in."""
    line = template.split("\n")[blank.line - 1]
    column = comment_start(line)
    parts = (line if column is None else line[:column]).split(BLANK)
    on_line = [b for b in blanks if b.line == blank.line]
    k = on_line.index(blank)
    join = lambda first, last: "".join(on_line[j].answer + parts[j + 1]  # noqa: E731
                                       for j in range(first, last))
    return parts[0] + join(0, k), parts[k + 1] + join(k + 1, len(on_line))


def _holder(tree: ast.Module | None, row: int) -> ast.AST | None:
    """The top-level function or class whose lines hold cell line `row`."""
    for node in tree.body if tree else []:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if first <= row <= node.end_lineno:
                return node
    return None


_modules: dict = {}


def namespace(assignment: str, solutions: Path = paths.SOLUTIONS) -> dict:
    """The notebook's definitions: autograder.reference.module, also for solved sources kept
    elsewhere (tests)."""
    from autograder import reference

    if Path(solutions) == paths.SOLUTIONS:
        return reference.module(assignment).__dict__
    key = assignment, str(solutions)
    if key not in _modules:  # reference.module's recipe
        module = types.ModuleType(f"solutions_{assignment}")
        for cell in solved.load(assignment, Path(solutions)).cells:
            if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
                exec(compile(definitions(cell.source), f"<{assignment}>", "exec"),
                     module.__dict__)
        _modules[key] = module.__dict__
    return _modules[key]


def sampled(mutants: list[Mutant]) -> list[Mutant]:
    """Every ACCEPT and REJECT, and one generated mutant (the lowest crc32 of its text: stable
    across runs and machines), in their order."""
    generated = [m for m in mutants if m.kind not in ("ACCEPT", "REJECT")]
    chosen = min(generated, key=lambda m: zlib.crc32(m.text.encode()), default=None)
    return [m for m in mutants if m.by_hand or m is chosen]


def plan(assignment: str, solutions: Path = paths.SOLUTIONS,
         sample: bool = False) -> list[BlankCase]:
    """Every blank of an assignment with its mutants and mutated cells; nothing run yet.
    `sample`: only `sampled(...)` of each blank's mutants."""
    path = paths.source_path(assignment, solutions)
    shown = path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path
    nb = solved.load(assignment, solutions)
    names, tests = namespace(assignment, solutions), _tests()
    firsts = solved.first_lines(path, nb)
    cases = []
    for index, cell in enumerate(nb.cells):
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        template, blanks = blank_source(cell.source)
        tree = definitions(cell.source)
        solved_dump = ast.dump(tree) if tree else None
        tested = [node.name for node in (tree.body if tree else [])
                  if getattr(node, "name", None) in tests]
        for blank in blanks:
            holder = _holder(tree, blank.line)
            name = holder.name if holder else "<cell>"
            case = BlankCase(f"{shown}:{firsts[index] + blank.line - 1}", name, blank,
                             [name] if name in tests else tested, index, cell.source)
            cases.append(case)
            _mutate(case, cell.source, template, blanks, holder, names, solved_dump)
            if sample:
                generated = sum(m.kind not in ("ACCEPT", "REJECT") for m in case.mutants)
                case.mutants = sampled(case.mutants)
                case.settled = Path(solutions) == paths.SOLUTIONS and drill_verdicts.settled(
                    name, cell.source.split("\n")[blank.line - 1],
                    len(_around(template, blanks, blank)[0]), blank.answer, generated)
    return cases


def _mutate(case: BlankCase, solved_cell: str, template: str, blanks: list[Blank], holder,
            names: dict, solved_dump: str | None) -> None:
    """Fill case.mutants and case.sources (and case.problems)."""
    blank = case.blank
    if not case.tests:
        case.problems.append(f"no hidden test covers {case.function}")
    try:
        accepted, rejected = blank_answers(solved_cell, blanks, blank, case.where)
    except MarkerError as err:
        case.problems.append(str(err))
        accepted, rejected = (), ()
    before, after = _around(template, blanks, blank)
    answers = {b.number: b.answer for b in blanks}
    for mutant in merge(generate(blank.answer, scope_of(holder, names), before, after),
                        accepted, rejected):
        mutated = _fill(template, blanks, {**answers, blank.number: mutant.text})
        try:
            tree = definitions(mutated)
            compile(tree, "<mutant>", "exec")
        except (SyntaxError, TypeError, ValueError):
            tree = None
        if tree is not None and ast.dump(tree) != solved_dump:
            case.mutants.append(mutant)
            case.sources[mutant.text] = mutated
        elif mutant.kind in ("ACCEPT", "REJECT"):  # a generated one is simply skipped
            case.problems.append(f"{mutant.kind} `{mutant.text}` does not parse there, or is "
                                 "the answer itself")
    if not case.mutants:
        case.problems.append("no wrong answer could be made for this blank: write some after "
                             "its hint, # REJECT `...`")
