"""Does ClearBlanks blank markers, keep nbgrader's regions, and refuse misplaced markers?"""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.preprocessors import ClearBlanks
from distlab.source.markers import MarkerError

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def cell(source, solution=True, grade=False):
    c = new_code_cell(source)
    c.metadata["nbgrader"] = {"solution": solution, "grade": grade, "grade_id": "c",
                              "locked": not solution, "schema_version": 3, "task": False}
    return c


def run(*cells):
    nb = new_notebook(cells=list(cells), metadata=KERNEL)
    nb, _ = ClearBlanks().preprocess(nb, {})
    return [c.source for c in nb.cells]


def test_markers_become_numbered_blanks_and_the_rest_stays():
    """Does a solution cell with markers keep its other lines (no stub)?"""
    out = run(cell("def f(x):\n    y = x + 1  # BLANK add one\n    return y"))
    assert out == ["def f(x):\n    y = _____  # [1] add one\n    return y"]


def test_solution_regions_still_become_the_stub():
    """Do nbgrader's BEGIN/END SOLUTION regions still work next to markers?"""
    source = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
    assert run(cell(source)) == ["def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"]


def test_marker_in_a_locked_cell_is_refused():
    """Is a marker in a cell that is not a solution cell an error?"""
    with pytest.raises(MarkerError, match="only allowed in solution cells"):
        run(cell("x = 1  # BLANK", solution=False))


def test_a_marker_that_breaks_the_line_is_refused():
    """Does a blank that leaves unparsable code stop the release?"""
    with pytest.raises(MarkerError, match="no longer parses"):
        run(cell("x = f(1,  # BLANK\n      2)"))


def test_notebook_round_trips_through_nbformat():
    """Is the result still a valid notebook?"""
    nb = new_notebook(cells=[cell("y = 2  # BLANK")], metadata=KERNEL)
    nb, _ = ClearBlanks().preprocess(nb, {})
    nbformat.validate(nb)
