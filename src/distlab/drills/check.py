"""Checking a drill's answers: by text first, else by running the snippet's hidden test.

An answer equal to the original once spacing and quotes are normalised is right at once. One
written differently is put into the snippet and the function goes through its hidden test,
the property test grading uses, in the judge's runner (sandboxed where the machine allows it,
as grading is): `(1 + i) % N` passes where `(i + 1) % N` stood, a wrong index does not.
distlab holds no hidden test: it asks the course's judge (`Judge`, found by `find_judge()`
through the entry point group "distlab.drill_judges"; see distlab/judges.py), which the
grading side registers (autograder/drill_judge.py). Each such answer is tried alone in the
reference, so each blank gets its own verdict; all of them together first, so answers right
only as a set count too.

One runner per notebook stays warm for the whole drill session (`Checker`): `warm` starts it
and runs the reference through the hidden test once, and a candidate then gets three times the
reference's time (at least MIN_SECONDS), so an answer that deadlocks fails in seconds. Without a
judge (a learner's image without the grading side), answers are checked by text only, and the
checker says why (`text_only`).
"""

from __future__ import annotations

import ast
import io
import sys
import threading
import time
import tokenize
import weakref
from dataclasses import dataclass

from distlab.drills.positions import Position
from distlab.drills.snippets import Snippet
from distlab.judges import DrillRunner, Judge, find_judge, why_no_judge

__all__ = ["Checker", "DrillRunner", "Judge", "Verdict", "fill", "find_judge", "normalise"]

CALL_SECONDS = 30.0  # one call of the snippet's function in the runner
SLOWER, MIN_SECONDS = 3.0, 1.5  # a candidate gets 3x the reference's time, at least 1.5 s
RIGHT, WRONG, EMPTY, INVALID, DIFFERS = "right", "wrong", "empty", "invalid", "differs"


@dataclass(frozen=True)
class Verdict:
    answer: str
    status: str  # RIGHT, WRONG, EMPTY, INVALID or DIFFERS (text only, and not the same)
    why: str  # for the learner: "as the reference", "ran the hidden test: passes", ...

    @property
    def right(self) -> bool:
        return self.status == RIGHT


def normalise(code: str) -> str | None:
    """The code's tokens without spacing, string literals quoted one way; None when it does
    not even tokenize."""
    parts = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code.strip()).readline):
            if token.type == tokenize.STRING:
                try:
                    parts.append(repr(ast.literal_eval(token.string)))
                    continue
                except (ValueError, SyntaxError):
                    pass
            if token.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT):
                parts.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return " ".join(parts)


def fill(source: str, answers: dict[Position, str]) -> str:
    """`source` with each answer in place of its position's span (they must not overlap)."""
    out, cursor = [], 0
    for position in sorted(answers):
        out.append(source[cursor:position.start])
        out.append(answers[position])
        cursor = position.end
    out.append(source[cursor:])
    return "".join(out)


class Checker:
    """Checks answers; keeps one warm runner per notebook for as long as it lives."""

    def __init__(self, judge: Judge | None = None):
        self.judge = judge or find_judge()
        self.text_only = "" if self.judge is not None else why_no_judge()  # why, or ""
        self._runners: dict[str, tuple[tuple[str, ...], DrillRunner]] = {}
        self._lock = threading.Lock()  # one check (or warm-up) at a time per session
        self._took: dict[str, float] = {}  # snippet -> seconds its reference took, warm
        # a kernel that shuts down with the drill open ends its runners too
        weakref.finalize(self, _close, self._runners)

    def _runner(self, snippet: Snippet) -> DrillRunner:
        cells, runner = self._runners.get(snippet.assignment, (None, None))
        if cells != snippet.cells:  # new, or its solved source changed
            if runner is not None:
                runner.close()
            runner = self.judge.runner(snippet.cells, CALL_SECONDS)
            self._runners[snippet.assignment] = (snippet.cells, runner)
        return runner

    def warm(self, snippet: Snippet) -> threading.Thread | None:
        """Start the snippet's runner, load its hidden test and run the reference through it
        once, in the background: the first check is then as quick as the next ones, and the
        reference's time bounds a candidate's (a deadlock fails in a few seconds)."""
        if self.text_only:
            return None

        def start():
            with self._lock:
                try:
                    self.judge.load_test(snippet.name)
                    self._runner(snippet).start()
                    if snippet.name not in self._took:
                        begun = time.monotonic()
                        if self._failure(snippet, snippet.source, limit=None) is None:
                            self._took[snippet.name] = time.monotonic() - begun
                except Exception:  # noqa: BLE001 - the learner's check starts it again and says
                    pass  # what went wrong; a traceback from a background thread says nothing

        thread = threading.Thread(target=start, daemon=True, name="drill warm-up")
        thread.start()
        return thread

    def limit(self, snippet: Snippet) -> float | None:
        """Seconds a candidate gets: a few times what the reference took (None: not timed)."""
        took = self._took.get(snippet.name)
        return None if took is None else max(MIN_SECONDS, SLOWER * took + 0.5)

    def failure(self, snippet: Snippet, candidate: str) -> str | None:
        """None if `candidate` (the snippet's function, filled in) passes its hidden test,
        else the test's reason, in one line."""
        with self._lock:
            return self._failure(snippet, candidate, self.limit(snippet))

    def _failure(self, snippet: Snippet, candidate: str, limit: float | None) -> str | None:
        try:
            self._runner(snippet).test(snippet.name, candidate, limit)
        except AssertionError as err:
            return str(err).splitlines()[0] if str(err) else "a hidden test failed"
        except TimeoutError:
            if limit is None:
                return "the hidden test did not finish"
            return (f"still running after {limit:.1f} s, where the reference takes "
                    f"{self._took[snippet.name]:.1f} s: a deadlock, or a loop that never ends?")
        except Exception as err:  # noqa: BLE001 - whatever the filled code raised
            return f"{type(err).__name__}: {err}".splitlines()[0]
        return None

    def check(self, snippet: Snippet, chosen: list[Position], answers: list[str]) -> list[Verdict]:
        """A verdict per blank, in the order of `chosen` and `answers`."""
        verdicts: list[Verdict | None] = [None] * len(chosen)
        to_run = {}
        for index, (position, answer) in enumerate(zip(chosen, answers, strict=True)):
            answer = answer.strip()
            if not answer:
                verdicts[index] = Verdict(answer, EMPTY, "not filled")
            elif normalise(answer) == normalise(position.text):
                verdicts[index] = Verdict(answer, RIGHT, "as the reference")
            elif (error := _syntax_error(fill(snippet.source, {position: answer}))):
                verdicts[index] = Verdict(answer, INVALID, f"not valid Python here: {error}")
            elif self.text_only:
                verdicts[index] = Verdict(answer, DIFFERS, f"not the reference's text, and "
                                          f"{self.text_only}: checked by text only")
            else:
                to_run[index] = answer
        if to_run and not self.text_only and snippet.name not in self._took:
            self.warm(snippet).join()  # times the reference: a deadlock then fails quickly
        if len(to_run) > 1:  # all together first: answers that are right only as a set
            together = {chosen[index]: answer for index, answer in to_run.items()}
            if self.failure(snippet, fill(snippet.source, together)) is None:
                for index, answer in to_run.items():
                    verdicts[index] = Verdict(answer, RIGHT, "ran the hidden test: passes")
                to_run = {}
        alone = {index: self.failure(snippet, fill(snippet.source, {chosen[index]: answer}))
                 for index, answer in to_run.items()}
        for index, answer in to_run.items():
            if alone[index] is not None:
                verdicts[index] = Verdict(answer, WRONG, f"ran the hidden test: {alone[index]}")
            elif len(to_run) > 1 and all(reason is None for reason in alone.values()):
                verdicts[index] = Verdict(answer, WRONG, "passes alone, but not together with "
                                                         "the other answers that differ")
            else:
                verdicts[index] = Verdict(answer, RIGHT, "ran the hidden test: passes")
        return verdicts

    def close(self) -> None:
        # At interpreter exit a warm-up thread can hold the lock for ever (a daemon thread
        # stops when it next needs the GIL): waiting for it would hang the kernel's shutdown.
        locked = self._lock.acquire(blocking=not sys.is_finalizing())
        try:
            _close(self._runners)
        finally:
            if locked:
                self._lock.release()


def _close(runners: dict) -> None:
    for _, runner in runners.values():
        runner.close()
    runners.clear()


def _syntax_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as err:
        return err.msg
    return None

