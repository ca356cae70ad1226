"""Does a copied cell (same nbgrader grade_id) become an ordinary cell, not a broken notebook?"""

from nbformat.v4 import new_code_cell, new_notebook

from autograder.preprocessors import DropDuplicateIds


def locked(source, grade_id):
    c = new_code_cell(source)
    c.metadata["nbgrader"] = {"solution": False, "grade": False, "grade_id": grade_id,
                              "locked": True, "schema_version": 3, "task": False}
    return c


def test_the_last_cell_of_a_grade_id_keeps_it_the_copies_lose_their_metadata():
    nb = new_notebook(cells=[locked("a = 1", "x"), locked("a = 1", "x"), locked("b", "y")])
    nb, _ = DropDuplicateIds().preprocess(nb, {})
    assert "nbgrader" not in nb.cells[0].metadata  # not {}: nbgrader would call that old
    assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "x"
    assert nb.cells[2].metadata["nbgrader"]["grade_id"] == "y"
