"""How long the learner's Validate button takes, on each notebook untouched and solved.

    python -m bench.bench_validate

Validate runs the whole notebook in a fresh kernel (nbgrader's Validator, `validate_all`), then
the course's summary reads the outputs. The baseline is nbgrader's own Validator on the same
untouched notebook in the same run: the ratio is what the summary adds. The solved notebook is
the released one with each learner cell as in the solved source (its graded cells still hold no
tests, as a learner's do).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import nbformat
import zmq
from nbgrader.validator import Validator
from traitlets.config import Config

from autograder import solved
from autograder.validator import CourseValidator
from bench import pick, table
from distlab.source import paths


def _config() -> Config:
    """As nbgrader_config.py sets Validate up (the learner's kernels encrypt their traffic)."""
    config = Config()
    config.Validator.validate_all = True
    if zmq.has("curve"):
        config.KernelManager.transport_encryption = "auto"
    return config


def wall_time(validator_class, path: Path) -> tuple[float, dict]:
    validator = validator_class(config=_config())
    start = time.perf_counter()
    results = validator.validate(str(path))
    return time.perf_counter() - start, results


def solved_learner_notebook(assignment: str) -> nbformat.NotebookNode:
    released = nbformat.read(str(paths.ROOT / "notebooks" / assignment / f"{assignment}.ipynb"),
                             as_version=4)
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source
               for cell in solved.load(assignment).cells
               if cell.metadata.get("nbgrader", {}).get("solution")}
    for cell in released.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in answers:
            cell.source = answers[grade_id]
    return released


def main() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for assignment in pick(paths.assignment_ids(), paths.assignment_ids()[:1]):
            untouched = paths.ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
            done = Path(tmp) / assignment / f"{assignment}.ipynb"
            done.parent.mkdir()
            nbformat.write(solved_learner_notebook(assignment), str(done))
            baseline, _ = wall_time(Validator, untouched)
            course, results = wall_time(CourseValidator, untouched)
            first = results.get("failed", [{}])[0].get("source", "").split("\n")[0]
            finished, solved_results = wall_time(CourseValidator, done)
            if solved_results:
                raise SystemExit(f"{assignment}: Validate on the solved notebook is not clean: "
                                 f"{solved_results}")
            rows.append({"notebook": assignment,
                         "nbgrader Validator, untouched (baseline) s": f"{baseline:.1f}",
                         "course Validate, untouched s": f"{course:.1f}",
                         "ratio": f"{course / baseline:.2f}x",
                         "says": first,
                         "course Validate, solved s": f"{finished:.1f}"})
    table("Validate button: wall time (the summary against nbgrader's listing)", rows)
    return rows


if __name__ == "__main__":
    main()
