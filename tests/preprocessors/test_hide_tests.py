"""Does HideTests keep hidden tests out of feedback?"""

from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.preprocessors import HideTests


def graded(source, outputs):
    c = new_code_cell(source, outputs=outputs)
    c.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "t", "points": 1,
                              "locked": True, "schema_version": 3, "task": False}
    return c


def test_hidden_source_and_traceback_are_removed():
    """Are the hidden lines and the traceback (which quotes them) gone, the message kept?"""
    error = new_output("error", ename="AssertionError", evalue="wrong sum",
                       traceback=["Traceback", "assert secret_oracle(x)"])
    printed = new_output("stream", name="stdout", text="✗ f\n")
    source = "# visible\n### BEGIN HIDDEN TESTS\nassert secret_oracle(x)\n### END HIDDEN TESTS"
    nb = new_notebook(cells=[graded(source, [printed, error])])
    nb, _ = HideTests().preprocess(nb, {})
    out = nb.cells[0]
    assert "secret_oracle" not in out.source
    assert out.outputs[1]["traceback"] == ["AssertionError: wrong sum"]
    assert out.outputs[0]["text"] == "✗ f\n"


def test_an_ordinary_cell_that_held_hidden_tests_keeps_only_the_message():
    """A graded cell copied as an ordinary one (no grade metadata) raises in the grading kernel,
    which cannot import the grading side: is its traceback, which quotes the region, cut too,
    and an ordinary cell's traceback left whole?"""
    source = "### BEGIN HIDDEN TESTS\nfrom autograder.grade_cell import grade\n### END HIDDEN TESTS"
    error = new_output("error", ename="ModuleNotFoundError", evalue="No module named 'autograder'",
                       traceback=["Traceback", "### BEGIN HIDDEN TESTS", "from autograder..."])
    plain = new_output("error", ename="ValueError", evalue="mine", traceback=["Traceback", "x"])
    nb = new_notebook(cells=[new_code_cell(source, outputs=[error]),
                             new_code_cell("raise ValueError('mine')", outputs=[plain])])
    nb, _ = HideTests().preprocess(nb, {})
    assert nb.cells[0].outputs[0]["traceback"] == [
        "ModuleNotFoundError: No module named 'autograder'"]
    assert nb.cells[1].outputs[0]["traceback"] == ["Traceback", "x"]
