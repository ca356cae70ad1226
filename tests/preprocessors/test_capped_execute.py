"""Does CappedExecute keep a flood of output out of the grader's memory and the feedback?"""

from nbformat.v4 import new_code_cell, new_notebook

from autograder.preprocessors import CappedExecute
from distlab.source import paths

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def execute(*sources, **caps):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources], metadata=KERNEL)
    CappedExecute(timeout=20, kernel_name="python3", **caps).preprocess(
        nb, {"metadata": {"path": "."}})
    return ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            for c in nb.cells]


def test_each_cell_keeps_its_cap_and_says_it_was_cut():
    """Is a cell's output cut at its cap (with a note), and the next cell's output intact?"""
    big, after = execute("for _ in range(50):\n    print('x' * 1000)", "print('after')",
                         cell_chars=10_000)
    assert 10_000 <= len(big) < 12_000 and "output cut here" in big
    assert after == "after\n"


def test_the_notebook_cap_holds_over_many_cells():
    """Past the notebook's cap, do later cells keep (almost) nothing?"""
    outs = execute(*["print('y' * 5000)"] * 6, cell_chars=100_000, notebook_chars=12_000)
    assert sum(map(len, outs)) < 12_000 + 6 * 200
    assert outs[0] == "y" * 5000 + "\n" and "output cut here" in outs[2]


def test_a_huge_single_message_is_cut_without_failing():
    """One 3 MB line: is it cut to the cap, the notebook still executed?"""
    big, after = execute("print('z' * 3_000_000)", "print('after')")
    assert len(big) < (1 << 20) + 200 and "output cut here" in big
    assert after == "after\n"


def test_an_output_widget_keeps_its_outputs_for_feedback_without_echoing_them_to_the_kernel():
    """Does an Output widget's output reach the notebook's widget state (the feedback page's
    picture) while the kernel's widget hears nothing back? (nbclient echoes every output to the
    kernel on the shell channel; after such echoes the next cell sometimes waited for the
    widget cell's time limit.)"""
    nb = new_notebook(cells=[
        new_code_cell("import ipywidgets\nout = ipywidgets.Output()\ndisplay(out)\n"
                      "with out:\n    print('drawn')"),
        new_code_cell("print(len(out.outputs))")], metadata=KERNEL)
    CappedExecute(timeout=20, kernel_name="python3").preprocess(nb, {"metadata": {"path": "."}})
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    kept = [model["state"]["outputs"] for model in state.values()
            if model["model_name"] == "OutputModel"]
    assert kept and kept[0][0]["text"] == "drawn\n", state
    assert nb.cells[1].outputs[0]["text"] == "0\n"  # the kernel's widget heard no echo


def test_cells_the_judge_decides_are_not_run_in_the_kernel_when_asked():
    """With skip_judged (as nbgrader_config.py sets it), is a graded `grade(fn)` cell left
    unrun (the judge decides it outside the kernel), while an ungraded one beside it runs?
    Without it, does it run as any cell?"""
    def notebook():
        graded = new_code_cell("ran = True\nprint('hidden tests ran')\ngrade(f)")
        graded.metadata["nbgrader"] = {"grade": True, "grade_id": "f_tests", "points": 1,
                                       "solution": False, "locked": True}
        lookalike = new_code_cell("def grade(fn):\n    return 'ungraded'\n\ngrade(f)")
        return new_notebook(cells=[new_code_cell("ran, f = False, print"), lookalike, graded,
                                   new_code_cell("print('ran' if ran else 'skipped')")],
                            metadata=KERNEL)

    for skip, last in ((True, "skipped\n"), (False, "ran\n")):
        nb = notebook()
        CappedExecute(timeout=20, kernel_name="python3", skip_judged=skip).preprocess(
            nb, {"metadata": {"path": "."}})
        assert nb.cells[3].outputs[0]["text"] == last
        assert bool(nb.cells[2].outputs) is not skip
        assert nb.cells[1].outputs[0]["data"]["text/plain"] == "'ungraded'"
    assert "skip_judged = True" in (paths.ROOT / "nbgrader_config.py").read_text()
