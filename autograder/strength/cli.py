"""`python -m autograder.strength`: the give-away check, then the blank-strength check, a report
per notebook and exit status 1 on any failure (autograder/strength/__init__.py says more)."""

from __future__ import annotations

import argparse
import time

from autograder import giveaway
from autograder.strength.run import check
from distlab.source.markers import MarkerError

DESCRIPTION = ("The blank-strength check: does every plausible wrong answer to a blank fail its "
               "hidden test? (The give-away check runs first.)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.strength", description=DESCRIPTION)
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per core)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="students' seeds per hidden test (default 1)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per mutant (default: from its reference's time)")
    parser.add_argument("--sample", action="store_true",
                        help="one generated mutant per blank, and every ACCEPT and REJECT")
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
