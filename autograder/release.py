"""Regenerate the learner notebooks from the solved sources (`make release`).

    python -m autograder.release            # every assignment in solutions/
    python -m autograder.release 01_collectives
    python -m autograder.release --check    # fail if notebooks/ is stale

Each `solutions/<id>/<id>.py` becomes an nbgrader source notebook under grading/source/, and
nbgrader's generate_assignment (with the course's ClearBlanks) writes notebooks/<id>/<id>.ipynb.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import solved
from autograder.nbgrader_cli import nbgrader
from distlab.source import paths

RELEASE = paths.ROOT / "notebooks"
SOURCE = paths.GRADING / "source"


def write_sources(ids: list[str], into: Path = SOURCE, solutions: Path = paths.SOLUTIONS):
    for assignment in ids:
        path = into / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solved.load(assignment, solutions), path)


def release(ids: list[str], release_dir: Path = RELEASE, source_dir: Path = SOURCE,
            db: Path | None = None, solutions: Path = paths.SOLUTIONS) -> None:
    """Write the solved sources, then let nbgrader blank them into `release_dir`."""
    write_sources(ids, source_dir, solutions)
    overrides = {"source_directory": str(source_dir), "release_directory": str(release_dir)}
    if db is not None:
        overrides["db_url"] = f"sqlite:///{db}"
    if len(ids) > 1 and {p.name for p in source_dir.iterdir() if p.is_dir()} == set(ids):
        # the source folder holds just these: one nbgrader for all (starting one costs seconds)
        nbgrader("generate_assignment", "*", "--force", **overrides)
        return
    for assignment in ids:
        nbgrader("generate_assignment", assignment, "--force", **overrides)


def stale(ids: list[str]) -> list[str]:
    """Assignments whose committed learner notebook differs from a fresh release."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        release(ids, tmp / "release", tmp / "source", tmp / "gradebook.db")
        return [
            assignment for assignment in ids
            if not (RELEASE / assignment / f"{assignment}.ipynb").exists()
            or (RELEASE / assignment / f"{assignment}.ipynb").read_bytes()
            != (tmp / "release" / assignment / f"{assignment}.ipynb").read_bytes()
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--check", action="store_true", help="only report stale notebooks")
    args = parser.parse_args(argv)
    ids = args.ids or paths.assignment_ids()
    if args.check:
        old = stale(ids)
        for assignment in old:
            print(f"notebooks/{assignment} is stale: run `make release`")
        return 1 if old else 0
    release(ids)
    for assignment in ids:
        print(f"released notebooks/{assignment}/{assignment}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
