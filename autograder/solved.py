"""Solved sources: `solutions/<id>/<id>.py` (jupytext percent format) to nbgrader notebooks.

Cell headers carry a short form of nbgrader's metadata:

    # %% solution="ring_allreduce"          the learner's cell: BLANK markers or a
                                            ### BEGIN/END SOLUTION region
    # %% solution="ring_allreduce" drill    also a core snippet of the drills
                                            (distlab/drills/snippets.py; not released)
    # %% tests="ring_allreduce_tests" points=5
                                            a graded cell (hidden tests go between
                                            ### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS)
    # %%                                    any other code cell: locked (restored at grading)

    # %% [markdown] why="ring_allreduce"  an explanation the check reveals once it passes
                                            (distlab/whys.py; not in the learner's notebook)

Other markdown cells are left as they are. Every notebook gets a Python 3 kernelspec and stable
cell ids, so regenerating an unchanged source gives byte-identical files.

Where the sources are (ROOT, SOLUTIONS, GRADING), their cells read without jupytext and
their markers live in distlab.source, which the learner's side reads them with too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from distlab.source.cells import percent_cells
from distlab.source.markers import MarkerError, blank_source, check_released, has_marker
from distlab.source.paths import ROOT, SOLUTIONS, source_path

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# what ipykernel reports (but its version): a notebook opened unchanged is not "modified"
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3"}

if TYPE_CHECKING:
    import nbformat


def _nbgrader(cell, locked_count: int) -> dict | None:
    meta = cell.metadata
    if "solution" in meta:
        return {"grade": False, "grade_id": meta.pop("solution"), "locked": False,
                "schema_version": 3, "solution": True, "task": False}
    if "tests" in meta:
        return {"grade": True, "grade_id": meta.pop("tests"), "locked": True,
                "points": meta.pop("points"), "schema_version": 3, "solution": False,
                "task": False}
    if cell.cell_type == "code":
        return {"grade": False, "grade_id": f"locked_{locked_count:02d}", "locked": True,
                "schema_version": 3, "solution": False, "task": False}
    return None


def load(assignment: str, solutions: Path = SOLUTIONS) -> nbformat.NotebookNode:
    """The solved notebook of one assignment, with nbgrader metadata, validated."""
    import jupytext  # here: with nbformat it takes 2 s to import, and the paths above do not

    path = source_path(assignment, solutions)
    text = path.read_text()
    nb = jupytext.reads(text, fmt="py:percent")
    starts = [line + 1 for _, _, line in percent_cells(text)]  # each cell's first line
    offset = len(starts) - len(nb.cells)  # a leading cell without `# %%` shifts the count
    locked = 0
    for index, cell in enumerate(nb.cells):
        cell.id = f"{assignment}-{index:03d}"
        first = starts[index + offset] if 0 <= index + offset < len(starts) else 1
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
        meta = _nbgrader(cell, locked)
        why = cell.metadata.get("why") if cell.cell_type == "markdown" else None
        cell.metadata = ({"nbgrader": meta} if meta is not None
                         else {"distlab": {"why": why}} if why else {})
        if meta is not None:
            locked += meta["grade_id"].startswith("locked_")
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        if has_marker(cell.source):
            if not (meta and meta["solution"]):
                raise MarkerError(f"{where}:{first}: BLANK markers belong in a solution cell; "
                                  'mark the cell with  # %% solution="<name>"')
            released, _ = blank_source(cell.source, where, first)
            check_released(released, f"{where}:{first}")
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO)}
    return nb


def first_lines(path: Path, nb) -> list[int]:
    """The line in the solved source `path` of each cell's first source line, for `nb` as
    load() makes it (the give-away and strength checks' file:line)."""
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


def solution_cells(assignment: str, solutions: Path = SOLUTIONS):
    """(cell, blanks) for each solution cell of an assignment, blanks parsed from its markers."""
    nb = load(assignment, solutions)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            yield cell, blank_source(cell.source)[1]

