"""The course's judge for distlab (`distlab.judges.Judge`), registered in pyproject.toml as
the entry point `course` of the group "distlab.drill_judges": distlab finds it at run time and
never imports autograder.

A drill's answer runs through the snippet's hidden test (autograder.exercises) in the judge's
runner (autograder.judge, sandboxed where the machine allows it, as grading is), seeded as
grading is for no student. The notices' released code comes from the solved sources
(autograder.reference). Everything heavy is imported when first asked for: loading the entry
point, in every learner's kernel, costs nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence


class DrillRunner:
    """One `autograder.judge.Runner` for a notebook's cells, kept warm between tests."""

    def __init__(self, cells: Sequence[str], call_seconds: float):
        from autograder.judge import Runner

        self._runner = Runner(list(cells), call_seconds=call_seconds)

    def start(self) -> None:
        self._runner.start()

    def test(self, name: str, candidate: str, seconds: float | None) -> None:
        import numpy as np

        from autograder.exercises import test_for
        from autograder.grade_cell import quiet, seed_for
        from autograder.judge import Remote

        runner = self._runner
        runner.fork(candidate)
        fn = Remote(runner, name)
        runner.deadline = math.inf if seconds is None else time.monotonic() + seconds
        try:
            with quiet():
                test_for(name)(fn, np.random.default_rng(seed_for(name, "")))
        finally:
            runner.deadline = math.inf
            try:
                fn.close()
            except Exception:  # noqa: BLE001 - a runner stopped at its deadline: start anew
                runner.close()

    def close(self) -> None:
        self._runner.close()


class CourseJudge:
    def load_test(self, name: str) -> None:
        from autograder.exercises import test_for

        test_for(name)

    def runner(self, cells: Sequence[str], call_seconds: float) -> DrillRunner:
        return DrillRunner(cells, call_seconds)

    def released_template(self, name: str) -> str | None:
        from autograder.reference import released_templates

        return released_templates().get(name)


JUDGE = CourseJudge()
