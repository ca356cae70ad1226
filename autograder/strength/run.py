"""The blank-strength check on assignments: plan each, time each cell's reference in the workers,
then run every mutant with a timeout drawn from its reference's time."""

from __future__ import annotations

import os
from pathlib import Path

from autograder.strength.plan import BlankCase, Outcome, plan
from autograder.strength.report import SETTLED, Report
from autograder.strength.workers import Workers
from distlab.source import paths

MIN_TIMEOUT_S = 1.0  # a mutant gets at least this long before it counts as hung (caught) ...
TIMEOUT_FACTOR = 3.0  # ... or this many times what its reference took
ACCEPT_FACTOR = 3.0  # an accepted answer must pass: it gets this many times longer
REFERENCE_TIMEOUT_S = 120.0  # the reference itself (its first real-rank run starts a launcher)
WARM_S = 0.3  # a reference slower than this is timed again, its worker's launcher warm


def check(ids: list[str] | None = None, jobs: int | None = None, seeds: int = 1,
          timeout: float | None = None, solutions: Path = paths.SOLUTIONS,
          sample: bool = False) -> list[Report]:
    """The check on assignments `ids` (default: all), one Report each. `seeds`: students'
    seeds per hidden test; `timeout`: seconds per mutant (default: from its reference);
    `sample`: one generated mutant per blank (see autograder.strength's docstring)."""
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
                if case.settled and students == [""] and not mutant.by_hand:
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
