"""`make report`: the command line (see autograder/report/__init__.py)."""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from autograder.records import db_path, db_url
from autograder.report import collect, page, tally
from distlab.source import paths


def label_key(reports: Path) -> bytes:
    """The key of the anonymous labels, made once per grading folder (so a student keeps a
    label from one report to the next)."""
    path = reports / ".label-key"
    if not path.exists():
        reports.mkdir(parents=True, exist_ok=True)
        path.write_bytes(secrets.token_bytes(32))
        path.chmod(0o600)
    return path.read_bytes()


def report(assignment: str, url: str, grading: Path, out: Path, names: bool,
           worst: int) -> list[str]:
    """Write the assignment's page; return the summary's lines ([] when nothing is graded)."""
    graded = collect.read_class(assignment, url, grading)
    lines = []
    if graded.without_verdicts:
        lines.append(f"  {len(graded.without_verdicts)} submission(s) graded before make grade "
                     "kept per-blank verdicts are left out: run make grade again")
    if not graded.submissions:
        if graded.not_graded:
            lines.append(f"  {len(graded.not_graded)} submission(s) could not be graded (see "
                         f"grading/grades/{assignment}.csv)")
        return [f"{assignment}: nothing graded", *lines] if lines else []
    key = label_key(out)
    name = (lambda student: student) if names else (lambda s: tally.anonymous(s, key))
    tallies = tally.blank_tallies(graded, collect.exercise_blanks(assignment))
    full = tally.full_marks(graded)
    flags = tally.flags(graded, name)
    path = out / f"{assignment}.html"
    path.write_text(page.render(assignment, len(graded.submissions), len(graded.not_graded),
                                tallies, full, flags, worst))
    every = sum(all(s >= m for s, m in sub.cells.values()) for sub in graded.submissions)
    lines.insert(0, f"{assignment}: {len(graded.submissions)} graded"
                 + (f", {len(graded.not_graded)} not graded" if graded.not_graded else "")
                 + f"; {every} with full marks")
    lost = [t for t in tallies if t.lost][:3]
    if lost:
        lines.append("  most lost: " + "; ".join(
            f"{t.label}" + (f" ({t.blank.hint})" if t.blank.hint else "")
            + f" {page.percent(t.share)}" for t in lost))
    kinds = [f"{sum(f.kind == kind for f in flags)} {kind}"
             for kind in (tally.CHANGED, tally.FAILED_FILLED)]
    lines += [f"  flags: {', '.join(kinds)}", f"  page: {path}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autograder.report",
        description="After make grade: per notebook, which blanks the class missed "
                    "(grading/reports/<id>.html) and a summary.")
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--names", action="store_true",
                        help="show student ids (default: anonymous labels)")
    parser.add_argument("--worst", type=int, default=5,
                        help="blanks whose wrong answers are listed (default 5)")
    args = parser.parse_args(argv)
    ids = args.ids or paths.assignment_ids()
    if unknown := sorted(set(ids) - set(paths.assignment_ids())):
        parser.error(f"no solved source for {', '.join(unknown)} (assignments: "
                     f"{', '.join(paths.assignment_ids())})")
    grading = paths.GRADING
    url = db_url()
    if db_path(url) and not Path(db_path(url)).exists():
        sys.exit(f"make report: no gradebook at {db_path(url)}: run make grade first")
    out = grading / "reports"
    out.mkdir(parents=True, exist_ok=True)
    lines = [line for assignment in ids
             for line in report(assignment, url, grading, out, args.names, args.worst)]
    print("\n".join(lines) if lines else "make report: nothing graded yet: run make grade first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
