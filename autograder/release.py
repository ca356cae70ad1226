"""Regenerate the learner notebooks from the solved sources (`make release`).

    python -m autograder.release            # every assignment in solutions/
    python -m autograder.release 01_collectives
    python -m autograder.release --check    # fail if notebooks/ is stale

Each `solutions/<id>/<id>.py` becomes an nbgrader source notebook under grading/source/, and
nbgrader's generate_assignment (with the course's ClearBlanks and ClearWhys) writes
notebooks/<id>/<id>.ipynb. The "Why" cells it leaves out go to distlab/whys.z, from which each
check reveals its own once it passes (distlab/whys.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import solved
from autograder.nbgrader_cli import nbgrader
from autograder.preprocessors.clear_whys import why_of
from distlab import whys as store
from distlab.source import paths
from distlab.source.markers import MarkerError

RELEASE = paths.ROOT / "notebooks"
SOURCE = paths.GRADING / "source"


def write_sources(ids: list[str], into: Path = SOURCE, solutions: Path = paths.SOLUTIONS):
    for assignment in ids:
        path = into / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solved.load(assignment, solutions), path)


def whys_of(assignment: str, solutions: Path = paths.SOLUTIONS) -> dict:
    """{name: {"notebook", "text"}} of the solved source's "Why" cells, each revealed by one
    `reveal("<name>")` in a code cell of the same notebook (else MarkerError)."""
    nb = solved.load(assignment, solutions)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    found = {}
    for cell in nb.cells:
        name = why_of(cell)
        if name is None:
            continue
        if name in found:
            raise MarkerError(f"{assignment}: two Why cells are named {name!r}")
        if code.count(f'reveal("{name}")') != 1:
            raise MarkerError(f'{assignment}: the Why cell {name!r} needs exactly one '
                              f'`reveal("{name}")`, at the end of the check that earns it')
        found[name] = {"notebook": assignment, "text": cell.source}
    return found


def fresh_whys(ids: list[str], solutions: Path = paths.SOLUTIONS) -> dict:
    """The store with the entries of `ids` read anew from their solved sources."""
    whys = {name: why for name, why in store.load().items() if why["notebook"] not in ids}
    for assignment in ids:
        for name, why in whys_of(assignment, solutions).items():
            if name in whys:
                raise MarkerError(f"{assignment}: the Why {name!r} is also "
                                  f"{whys[name]['notebook']}'s: names are course-wide")
            whys[name] = why
    return whys


def release(ids: list[str], release_dir: Path = RELEASE, source_dir: Path = SOURCE,
            db: Path | None = None, solutions: Path = paths.SOLUTIONS,
            whys_store: Path | None = None) -> None:
    """Write the solved sources, then let nbgrader blank them into `release_dir`, and the
    Why cells it leaves out into `whys_store` (None, as for a grading folder: not written)."""
    if whys_store is not None:
        whys_store.write_bytes(store.encode(fresh_whys(ids, solutions)))
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
    """Assignments whose committed learner notebook, or Why cells in distlab/whys.z, differ
    from a fresh release."""
    fresh, kept = fresh_whys(ids), store.load()
    old_whys = [assignment for assignment in ids
                if {n: w for n, w in fresh.items() if w["notebook"] == assignment}
                != {n: w for n, w in kept.items() if w["notebook"] == assignment}]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        release(ids, tmp / "release", tmp / "source", tmp / "gradebook.db")
        return old_whys + [
            assignment for assignment in ids if assignment not in old_whys
            and not (RELEASE / assignment / f"{assignment}.ipynb").exists()
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
    release(ids, whys_store=store.STORE)
    for assignment in ids:
        print(f"released notebooks/{assignment}/{assignment}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
