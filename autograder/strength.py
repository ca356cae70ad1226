"""The blank-strength check: does every plausible wrong answer to a blank fail its hidden test?

    python -m autograder.strength                      # every assignment in solutions/
    python -m autograder.strength 01_collectives --jobs 2 [--seeds 3] [--verbose]
    python -m autograder.strength --sample             # one mutant of each kind per blank

For every blank of every solution cell, autograder.mutants makes wrong answers from the
reference answer. Each one goes into its blank alone (the other blanks keep their answers), the
cell's definitions run over the notebook's reference module (as grading builds a candidate) and
the function's hidden test runs on the result, with the seed of student "" (`--seeds K`: K
students' seeds, and a mutant must fail under each). Every mutant must fail; an answer the
solved line lists as `# ACCEPT` must pass; a blank with no mutant at all fails the check (list
wrong answers by hand: `# REJECT`; syntax in autograder/mutants.py). Each notebook's report
gives blanks, mutants, caught and accepted, then one line per failure with the blank's
file:line; the exit status is 1 on any failure. The give-away check (autograder/giveaway.py:
can a blank be filled by copying text shown before it?) runs first, on the same notebooks,
and fails the command too.

`--sample` (what `make test` runs) keeps, of each blank's generated mutants, one of each kind
(`other name`, `off by one`, ...: the one whose text hashes lowest, so the same one every run)
and every ACCEPT and REJECT: about a quarter of the mutants, every way of being wrong that a
blank has. Of those, a blank whose answer is a drill position (same function, line and column)
that the drill verdicts saw every generated mutant of fail (src/distlab/drills/verdicts.json,
kept current by tests/test_drills.py) counts its generated mutants as caught without running
them again (autograder/drill_verdicts.py; about a third of the sample). The exhaustive check
(no `--sample`: `make strength`, `make test-all`) runs every mutant, the other mutants of each
kind too: another name, another attribute of the same kind.

Mutants run in worker processes forked from this one once the references, the hidden tests and
torch are imported; each worker keeps its own rank launcher warm for the real-rank tests. A
mutant gets TIMEOUT_FACTOR times what its reference took (at least MIN_TIMEOUT_S); one that is
still running then (a deadlock, an endless loop) is stopped by an alarm and counts as caught,
and a worker that does not answer even then is killed and replaced.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import types
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path

from autograder import drill_verdicts, giveaway, solved
from autograder.mutants import (
    Mutant,
    answer_lists,
    generate,
    merge,
    scope_of,
)
from distlab.source import paths
from distlab.source.cells import percent_cells
from distlab.source.definitions import definitions
from distlab.source.markers import BLANK, Blank, MarkerError, blank_source, comment_start

MIN_TIMEOUT_S = 1.0  # a mutant gets at least this long before it counts as hung (caught) ...
TIMEOUT_FACTOR = 3.0  # ... or this many times what its reference took
ACCEPT_FACTOR = 3.0  # an accepted answer must pass: it gets this many times longer
REFERENCE_TIMEOUT_S = 120.0  # the reference itself (its first real-rank run starts a launcher)
# a sampled mutant of a blank the drill verdicts cover (autograder/drill_verdicts.py): not run
SETTLED = "failed its hidden test when the drill verdicts were computed"
WARM_S = 0.3  # a reference slower than this is timed again, its worker's launcher warm
KILL_GRACE_S = 15.0  # past its alarm, a worker that does not answer is killed
MEMORY_BYTES = 4 << 30  # a worker's heap, where no GPU is: a list grown forever fails a mutant


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


# ---------------------------------------------------------------- planning


def _tests() -> dict:
    """Every registered hidden test."""
    from autograder import exercises

    return exercises.all_tests()


def _first_lines(path: Path, nb) -> list[int]:
    """The line in the file of each cell's first source line."""
    text = path.read_text().split("\n")
    headers = [line for _, _, line in percent_cells("\n".join(text))]
    offset = len(headers) - len(nb.cells)  # a leading cell without `# %%`
    firsts = []
    for index, cell in enumerate(nb.cells):
        start = headers[index + offset] if index + offset >= 0 else 0
        head = cell.source.split("\n")[0]
        firsts.append(next((n for n in range(start + 1, len(text) + 1) if text[n - 1] == head),
                           start + 1))
    return firsts


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
    """Every ACCEPT and REJECT, and one generated mutant of each kind (the lowest crc32 of its
    text: stable across runs and machines), in their order."""
    chosen: dict[str, Mutant] = {}
    for mutant in mutants:
        if mutant.kind not in ("ACCEPT", "REJECT"):
            best = chosen.get(mutant.kind)
            if best is None or zlib.crc32(mutant.text.encode()) < zlib.crc32(best.text.encode()):
                chosen[mutant.kind] = mutant
    keep = {id(m) for m in chosen.values()}
    return [m for m in mutants if m.kind in ("ACCEPT", "REJECT") or id(m) in keep]


def plan(assignment: str, solutions: Path = paths.SOLUTIONS,
         sample: bool = False) -> list[BlankCase]:
    """Every blank of an assignment with its mutants and mutated cells; nothing run yet.
    `sample`: only `sampled(...)` of each blank's mutants."""
    path = paths.source_path(assignment, solutions)
    shown = path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path
    nb = solved.load(assignment, solutions)
    names, tests = namespace(assignment, solutions), _tests()
    firsts = _first_lines(path, nb)
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
    on_line = [b for b in blanks if b.line == blank.line]
    try:
        line = solved_cell.split("\n")[blank.line - 1]
        accepted, rejected = answer_lists(line, len(on_line), case.where)[on_line.index(blank)]
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


# ---------------------------------------------------------------- running, in workers


class _Alarm(BaseException):
    """A mutant's time is up (a deadlock, an endless loop): not an Exception, so no `except
    Exception` in the code under test swallows it."""


def _ring(signum, frame):
    raise _Alarm


def run_task(task: dict) -> Outcome:
    """One cell source under its hidden tests, for each seed, within task["timeout"]. A mutant
    stops at the first seed it passes (it survives); an accepted answer at the first it fails."""
    from autograder.exercises import test_for
    from autograder.grade_cell import _failure, seed_for

    signal.signal(signal.SIGALRM, _ring)
    signal.setitimer(signal.ITIMER_REAL, task["timeout"])
    try:
        defined = dict(namespace(task["assignment"], task["solutions"]))
        try:
            exec(compile(definitions(task["source"]), "<mutant>", "exec"), defined)
        except Exception as err:  # noqa: BLE001 - a mutant that breaks the definitions fails
            return Outcome(False, f"{type(err).__name__}: {err}".splitlines()[0])
        reason = None
        for student in task["students"]:
            failed = None
            for name in task["tests"]:
                failed = _failure(test_for(name), lambda _, name=name: defined[name], None,
                                  seed_for(name, student))
                if failed is not None and failed.startswith(_Alarm.__name__):
                    raise _Alarm  # _failure caught it: nothing may run on, unwatched
                if failed is not None:
                    break
            if (failed is None) != task["expect_pass"]:
                return Outcome(failed is None, failed)
            reason = reason or failed
        return Outcome(reason is None, reason)
    except _Alarm:
        return Outcome(False, f"still running after {task['timeout']:.1f} s", timed_out=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _serve(conn: Connection, folder: str) -> None:
    """A worker: run tasks until the parent hangs up. Its temporary files, the rank launcher's
    included, live in `folder`."""
    import distlab.launch

    # a launcher the parent had started is the parent's: this worker starts its own
    distlab.launch._pool = distlab.launch._log_dir = None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    os.makedirs(folder, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    if not os.path.exists("/dev/nvidiactl"):  # CUDA maps more than any heap limit allows
        with contextlib.suppress(ValueError, OSError):
            hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
            limit = MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_BYTES, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        started = time.monotonic()
        try:
            outcome = run_task(task)
        except BaseException as err:  # noqa: BLE001 - the worker answers whatever happens
            outcome = Outcome(False, f"{type(err).__name__}: {err}".splitlines()[0])
        outcome.seconds = time.monotonic() - started
        conn.send((task["id"], outcome))
    distlab.launch.shutdown()


class Workers:
    """Worker processes forked from this one (torch, the references and the hidden tests are
    imported already). A worker that dies or stops answering is killed and replaced."""

    def __init__(self, count: int):
        self.folder = tempfile.mkdtemp(prefix="distlab-strength-")
        self.spawned = 0
        self.slots: list[dict] = []
        for _ in range(max(1, count)):
            self.slots.append(self._spawn())

    def _spawn(self) -> dict:
        self.spawned += 1
        mine, theirs = Pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                mine.close()
                for slot in self.slots:
                    slot["conn"].close()
                _serve(theirs, os.path.join(self.folder, f"w{self.spawned}"))
            except BaseException:  # noqa: BLE001 - never return into the parent's code
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        return {"pid": pid, "conn": mine, "task": None}

    def _replace(self, index: int) -> None:
        slot = self.slots[index]
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot["pid"], signal.SIGKILL)  # its launcher and ranks die with it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(slot["pid"], 0)
        slot["conn"].close()
        self.slots[index] = self._spawn()

    def run(self, tasks: list[dict]) -> Iterator[tuple]:
        """(task id, Outcome) of each task, as they finish."""
        pending = list(reversed(tasks))
        while pending or any(slot["task"] for slot in self.slots):
            for slot in self.slots:
                if slot["task"] is None and pending:
                    slot["task"] = pending.pop()
                    slot["started"] = time.monotonic()
                    slot["deadline"] = slot["started"] + slot["task"]["timeout"] + KILL_GRACE_S
                    slot["conn"].send(slot["task"])
            busy = [slot for slot in self.slots if slot["task"]]
            left = min(slot["deadline"] for slot in busy) - time.monotonic()
            ready = wait([slot["conn"] for slot in busy], max(0.0, left))
            for index, slot in enumerate(self.slots):
                task = slot["task"]
                if task is None:
                    continue
                if slot["conn"] in ready:
                    try:
                        answer = slot["conn"].recv()
                    except (EOFError, OSError):
                        why = "its worker died (a crash, or out of memory)"
                    else:
                        slot["task"] = None
                        yield answer
                        continue
                elif time.monotonic() > slot["deadline"]:
                    why = "its worker stopped answering"
                else:
                    continue
                self._replace(index)
                yield task["id"], Outcome(False, why, True, time.monotonic() - slot["started"])

    def close(self) -> None:
        for slot in self.slots:
            slot["conn"].close()  # the worker sees EOF, stops its launcher and exits
        deadline = time.monotonic() + 10
        for slot in self.slots:
            while time.monotonic() < deadline and not os.waitpid(slot["pid"], os.WNOHANG)[0]:
                time.sleep(0.05)
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError, ChildProcessError):
                    os.kill(slot["pid"], signal.SIGKILL)
                    os.waitpid(slot["pid"], 0)
        for _ in range(3):  # a rank killed with its worker may still be writing there
            shutil.rmtree(self.folder, ignore_errors=True)
            if not os.path.exists(self.folder):
                break
            time.sleep(0.2)


# ---------------------------------------------------------------- the check


@dataclass
class Report:
    assignment: str
    cases: list[BlankCase]
    errors: list[str] = field(default_factory=list)  # e.g. a reference failing its own test
    sampled: bool = False  # one generated mutant of each kind per blank

    def counts(self, cases: list[BlankCase] | None = None) -> dict:
        pairs = [(m, case.outcomes.get(m.text)) for case in (cases or self.cases)
                 for m in case.mutants]
        caught = [o for m, o in pairs if o and not m.accepted and not o.passed]
        return {"blanks": len(cases or self.cases),
                "mutants": len(pairs), "caught": len(caught),
                "by timeout": sum(o.timed_out for o in caught),
                "accepted": sum(1 for m, o in pairs if o and m.accepted and o.passed),
                "settled": sum(1 for _, o in pairs if o and o.reason == SETTLED),
                "seconds": sum(o.seconds for _, o in pairs if o)}

    def failures(self) -> list[str]:
        lines = list(self.errors)
        for case in self.cases:
            lines += [f"{case.label()}: {problem}" for problem in case.problems]
            for mutant in case.mutants:
                outcome = case.outcomes.get(mutant.text)  # None: no test, or its reference failed
                if outcome is None:
                    continue
                if outcome.passed and not mutant.accepted:
                    lines.append(f"{case.label()}: SURVIVES `{mutant.text}` ({mutant.kind}): "
                                 "the hidden test passes")
                elif not outcome.passed and mutant.accepted:
                    lines.append(f"{case.label()}: ACCEPTED `{mutant.text}` fails the hidden "
                                 f"test: {outcome.reason}")
        return lines

    def text(self, verbose: bool = False) -> str:
        c = self.counts()
        mutants = "mutants (one of each kind per blank)" if self.sampled else "mutants"
        out = [f"{self.assignment}: {c['blanks']} blanks, {c['mutants']} {mutants}, "
               f"{c['caught']} caught ({c['by timeout']} by timeout, {c['settled']} by the drill "
               f"verdicts), {c['accepted']} accepted ({c['seconds']:.1f} s of mutant runs)"]
        for name in dict.fromkeys(case.function for case in self.cases):
            cases = [case for case in self.cases if case.function == name]
            f = self.counts(cases)
            out.append(f"  {name:<28} {f['blanks']:>2} blanks {f['mutants']:>4} mutants "
                       f"{f['caught']:>4} caught {f['accepted']:>2} accepted "
                       f"{f['seconds']:>6.1f} s")
            for case in cases if verbose else []:
                out.append(f"    [{case.blank.number}] {case.where} `{case.blank.answer}`")
                for mutant in case.mutants:
                    o = case.outcomes.get(mutant.text)
                    verdict = ("not run" if o is None else "passes" if o.passed else
                               "timed out" if o.timed_out else "fails")
                    out.append(f"        {verdict:<9} `{mutant.text}` ({mutant.kind})")
        out += [f"  FAIL {line}" for line in self.failures()]
        return "\n".join(out)


def check(ids: list[str] | None = None, jobs: int | None = None, seeds: int = 1,
          timeout: float | None = None, solutions: Path = paths.SOLUTIONS,
          sample: bool = False) -> list[Report]:
    """The check on assignments `ids` (default: all), one Report each. `seeds`: students'
    seeds per hidden test; `timeout`: seconds per mutant (default: from its reference);
    `sample`: one mutant of each kind per blank (see the module's docstring)."""
    import torch  # noqa: F401 - imported here, once, before the workers fork

    import autograder.grade_cell  # noqa: F401
    import distlab  # noqa: F401

    ids = ids or paths.assignment_ids(solutions)
    reports = [Report(assignment, plan(assignment, solutions, sample), sampled=sample)
               for assignment in ids]
    students = [""] + [f"strength-{k}" for k in range(1, seeds)]
    workers = Workers(jobs or len(os.sched_getaffinity(0)))
    try:
        _run(reports, workers, students, timeout, str(solutions))
    finally:
        workers.close()
    return reports


def _run(reports: list[Report], workers: Workers, students: list[str], timeout, solutions):
    """Time each cell's reference (which must pass), then run every mutant, slow ones first."""
    by_cell: dict[tuple, list[BlankCase]] = {}
    for report in reports:
        for case in report.cases:
            by_cell.setdefault((report.assignment, case.cell), []).append(case)
    references = [
        {"id": key, "assignment": key[0], "solutions": solutions, "students": students,
         "source": cases[0].solved, "tests": cases[0].tests,
         "expect_pass": True, "timeout": REFERENCE_TIMEOUT_S}
        for key, cases in by_cell.items() if cases[0].tests]
    took, errors = {}, {report.assignment: report.errors for report in reports}
    for key, outcome in workers.run(references):
        if outcome.passed:
            took[key] = outcome.seconds / len(students)
        else:  # its mutants would prove nothing: they are not run
            errors[key[0]].append(f"{by_cell[key][0].where}: the reference "
                                  f"{by_cell[key][0].function} fails its own hidden test: "
                                  f"{outcome.reason}")
    # a first real-rank run waits for its worker's launcher to start: time those again, warm
    again = [task for task in references if took.get(task["id"], 0) > WARM_S]
    for key, outcome in workers.run(again):
        took[key] = min(took[key], outcome.seconds / len(students))
    tasks = []
    for key, cases in by_cell.items():
        if key not in took:
            continue
        limit = timeout or max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * took[key])
        for case in cases:
            for mutant in case.mutants:
                if case.settled and students == [""] and mutant.kind not in ("ACCEPT", "REJECT"):
                    case.outcomes[mutant.text] = Outcome(False, SETTLED)
                    continue
                tasks.append({"id": (key, case.blank.number, mutant.text), "assignment": key[0],
                              "solutions": solutions, "students": students,
                              "source": case.sources[mutant.text], "tests": case.tests,
                              "expect_pass": mutant.accepted, "cost": took[key],
                              "timeout": limit * len(students) *
                              (ACCEPT_FACTOR if mutant.accepted else 1)})
    tasks.sort(key=lambda task: -task["cost"])  # slow ones first: the workers finish together
    numbered = {(key, case.blank.number): case for key, cases in by_cell.items()
                for case in cases}
    for (key, number, text), outcome in workers.run(tasks):
        numbered[key, number].outcomes[text] = outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.strength",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per core)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="students' seeds per hidden test (default 1)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per mutant (default: from its reference's time)")
    parser.add_argument("--sample", action="store_true",
                        help="one mutant of each kind per blank, and every ACCEPT and REJECT")
    parser.add_argument("--verbose", "-v", action="store_true", help="every mutant's verdict")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        # the give-away check first: it reads the sources only, and answers in seconds
        given = giveaway.check(args.ids or None)
        reports = check(args.ids, args.jobs, args.seeds, args.timeout, sample=args.sample)
    except MarkerError as err:
        print(f"blank strength: {err}")
        return 1
    for report in given:
        print(report.text())
    for report in reports:
        print(report.text(args.verbose))
    gave = sum(len(report.failures()) for report in given)
    failed = sum(len(report.failures()) for report in reports)
    print(f"give-away: {'FAILED, ' + str(gave) + ' failure(s)' if gave else 'ok'}")
    print(f"blank strength: {'FAILED, ' + str(failed) + ' failure(s)' if failed else 'ok'} "
          f"in {time.monotonic() - started:.1f} s")
    return 1 if failed or gave else 0


if __name__ == "__main__":
    sys.exit(main())
