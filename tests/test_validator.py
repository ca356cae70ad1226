"""The Validate summary (autograder/validator.py) read off executed notebooks: a count first,
a line or two per failing check, the exercise it checks, and lines changed outside blanks."""

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.validator import summary


def _meta(cell, **flags):
    cell.metadata["nbgrader"] = {"solution": False, "grade": False, "locked": False,
                                 "grade_id": f"c{id(cell)}", "schema_version": 3, **flags}
    return cell


def _exercise(source):
    return _meta(new_code_cell(source), solution=True)


def _check(source, *outputs):
    cell = _meta(new_code_cell(source), locked=True)
    cell.outputs = list(outputs)
    return cell


def _error(ename, evalue):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _notebook(*cells):
    nb = new_notebook()
    nb.cells = list(cells)
    return nbformat.from_dict(nb)


def test_counts_checks_and_names_the_exercise_of_each_failure():
    nb = _notebook(
        _check("import numpy as np"),
        _exercise("def double(x):\n    return 2 * x\n"),
        _check("assert double(2) == 4"),
        _exercise("def halve(x):\n    return _____\n"),
        _check("assert halve(4) == 2\nprint(double(1))",
               _error("BlankNotFilled", "halve still has 1 blank line(s) to fill: blank [1] "
                                        "(line 2).\nReplace each `_____` with your code, ...")),
        _check("show_something()", _error("NameError", "name 'show_something' is not defined")),
    )
    lines, wrong = summary(nb)
    assert wrong
    assert lines[0] == "1 of 2 checks pass."
    assert lines[1] == ("✗ check of halve: BlankNotFilled: halve still has 1 blank line(s) to "
                        "fill: blank [1] (line 2).")
    assert lines[2].startswith("✗ cell 6 (show_something()): NameError")
    assert "Replace each" not in "\n".join(lines)  # one line per reason


def test_a_rank_error_keeps_the_learner_line_and_drops_the_rest():
    evalue = ("rank 0 raised IndexError: list index out of range\n"
              "  in ring_p2p, line 13: outgoing = chunks[step]\n  (ranks 1, 2 failed too)")
    nb = _notebook(_exercise("def ring_p2p(rank, world_size):\n    pass\n"),
                   _check("assert run(ring_p2p, world_size=3)", _error("RankError", evalue)))
    lines, _ = summary(nb)
    assert lines == ["0 of 1 checks pass.",
                     "✗ check of ring_p2p: RankError: rank 0 raised IndexError: list index out "
                     "of range",
                     "  in ring_p2p, line 13: outgoing = chunks[step]",
                     "Start with the first ✗: a later check often uses an earlier function."]


def test_all_checks_passing_is_not_wrong():
    nb = _notebook(_exercise("def double(x):\n    return 2 * x\n"), _check("assert double(1) == 2"))
    lines, wrong = summary(nb)
    assert lines == ["1 of 1 checks pass."] and not wrong


def test_a_picture_that_uses_an_exercise_is_no_check():
    """A cell that draws with a learner function but asserts nothing (it may even draw
    without it) is not counted: an untouched notebook passes 0 checks."""
    nb = _notebook(_exercise("def ring_time(n):\n    return _____\n"),
                   _check("show_costs({'ring': ring_time})"),
                   _check("assert ring_time(2) == 1",
                          _error("BlankNotFilled", "ring_time still has 1 blank line(s) to fill")))
    lines, _ = summary(nb)
    assert lines[0] == "0 of 1 checks pass."


def test_an_exercise_changed_outside_its_blanks_is_reported_even_when_checks_pass():
    from autograder import reference
    from distlab.source.markers import blank_source

    _, cell, _ = reference.locate("chunk_bounds")
    released, _ = blank_source(cell.source)
    edited = released.replace("bounds, start = [], 0", "bounds, start = [], 1")
    assert edited != released
    nb = _notebook(_exercise(edited), _check("assert chunk_bounds(4, 2)"))
    lines, wrong = summary(nb)
    assert wrong and lines[0] == "1 of 1 checks pass."
    assert lines[1].startswith("⚠ chunk_bounds: line 4 was changed outside the blanks "
                               "(bounds, start = [], 1)"), lines


def test_an_exercise_cell_that_did_not_run_is_named():
    nb = _notebook(_exercise("def f(x)\n    return x\n"),
                   _check("f(1)"))
    nb.cells[0].outputs = [_error("SyntaxError", "expected ':' (1234.py, line 1)")]
    lines, wrong = summary(nb)
    assert wrong and lines[1].startswith("✗ f (your cell): SyntaxError")


def test_validate_runs_output_widgets_without_echoing_them_to_the_kernel():
    """Does Validate's run keep an Output widget's output while the kernel's widget hears
    nothing back? (After nbclient's echoes the next cell sometimes waited for the 30 s cell
    limit: 5 times in 30 widget cells.)"""
    from autograder.validator import CourseValidator

    nb = new_notebook(cells=[
        new_code_cell("import ipywidgets\nout = ipywidgets.Output()\ndisplay(out)\n"
                      "with out:\n    print('drawn')"),
        new_code_cell("print(len(out.outputs))")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}})
    executed = CourseValidator()._preprocess(nb)
    state = executed.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    assert any(model["state"].get("outputs") == [
        {"name": "stdout", "output_type": "stream", "text": "drawn\n"}]
        for model in state.values() if model["model_name"] == "OutputModel"), state
    assert executed.cells[1].outputs[0]["text"] == "0\n"
