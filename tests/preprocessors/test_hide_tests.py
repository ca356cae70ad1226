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
