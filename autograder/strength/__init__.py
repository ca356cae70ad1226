"""The blank-strength check: does every plausible wrong answer to a blank fail its hidden test?

    python -m autograder.strength                      # every assignment in solutions/
    python -m autograder.strength 01_collectives --jobs 2 [--seeds 3] [--verbose]
    python -m autograder.strength --sample             # one generated mutant per blank

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

`--sample` (what `make test` runs) keeps, of each blank's generated mutants, one (the one whose
text hashes lowest, so the same one every run) and every ACCEPT and REJECT (a generated mutant
written by hand too is one of these): 524 of the course's 3404 mutants now, every blank with a
wrong answer of its own. Of those, a blank whose answer is a drill position (same function,
line and column) that the drill verdicts saw every generated mutant of fail
(src/distlab/drills/verdicts.json, kept current by tests/test_drills.py) counts its generated
mutants as caught without running them again (autograder/drill_verdicts.py; 36 of the 524).
The exhaustive check (no `--sample`: `make strength`, `make test-all`) runs every mutant: every
kind of wrong answer (`other name`, `off by one`, `swapped operands`, ...) of every blank.

Mutants run in worker processes forked from this one once the references, the hidden tests and
torch are imported; each worker keeps its own rank launcher warm for the real-rank tests. A
mutant gets TIMEOUT_FACTOR times what its reference took (at least MIN_TIMEOUT_S); one that is
still running then (a deadlock, an endless loop) is stopped by an alarm and counts as caught,
and a worker that does not answer even then is killed and replaced.

The package, by concern: plan.py (blanks, mutants and mutated cells; nothing run), workers.py
(the forked worker pool that runs them), report.py (counts and failures per notebook), run.py
(check(): references timed, then every mutant), cli.py (`python -m autograder.strength`).
"""

from autograder import giveaway
from autograder.strength.cli import main
from autograder.strength.plan import (
    BlankCase,
    Outcome,
    namespace,
    plan,
    sampled,
)
from autograder.strength.report import SETTLED, Report
from autograder.strength.run import (
    ACCEPT_FACTOR,
    MIN_TIMEOUT_S,
    REFERENCE_TIMEOUT_S,
    TIMEOUT_FACTOR,
    WARM_S,
    check,
)
from autograder.strength.workers import KILL_GRACE_S, MEMORY_BYTES, Workers, run_task

__all__ = ["ACCEPT_FACTOR", "KILL_GRACE_S", "MEMORY_BYTES", "MIN_TIMEOUT_S", "REFERENCE_TIMEOUT_S",
           "SETTLED", "TIMEOUT_FACTOR", "WARM_S", "BlankCase", "Outcome", "Report", "Workers",
           "check", "giveaway", "main", "namespace", "plan", "run_task", "sampled"]
