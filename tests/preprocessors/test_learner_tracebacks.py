"""Do feedback tracebacks show the learner's frames, and not distlab's or a library's?"""

import re

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.preprocessors import LearnerTracebacks

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BLANK = "from distlab import _____\ndef f(x):\n    y = _____ + 1\n    return y\nf(1)"
INSIDE_DISTLAB = ("from distlab.collectives import show_tree\n"
                  "def mine(g):\n    return show_tree(g)\nmine(\"x\")")
INSIDE_NUMPY = "import numpy as np\ndef split(v):\n    return np.array_split(v, 0)\nsplit([1.0])"


@pytest.fixture(scope="module")
def errors():
    """The error outputs of real cells, executed as autograding executes them (nbclient)."""
    from nbclient import NotebookClient

    nb = new_notebook(cells=[new_code_cell(s) for s in (BLANK, INSIDE_DISTLAB, INSIDE_NUMPY)],
                      metadata=KERNEL)
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True).execute()
    nb, _ = LearnerTracebacks().preprocess(nb, {})
    return [next(o for o in c.outputs if o.output_type == "error") for c in nb.cells]


def plain(error):
    return ANSI.sub("", "\n".join(error.traceback))


def test_a_blank_keeps_its_message(errors):
    """Is the unfilled blank's one-line message (distlab's own) kept as it was?"""
    text = plain(errors[0])
    assert text.startswith("BlankNotFilled: f still has 1 blank line(s) to fill")
    assert "blanks.py" not in text


@pytest.mark.parametrize("which, inside", [(1, "src/distlab/"), (2, "site-packages")])
def test_internal_frames_go_and_the_learners_stay(errors, which, inside):
    """Are the frames in distlab or numpy gone, the learner's cells and the message kept?"""
    text = plain(errors[which])
    assert inside not in text and "File " not in text
    assert "Cell In[" in text and ("in mine" in text or "in split" in text)
    assert "frame(s) inside distlab and the libraries it uses" in text
    assert text.endswith(f"{errors[which].ename}: {errors[which].evalue}")


def test_a_run_of_hidden_frames_becomes_one_line_and_later_frames_stay():
    """A learner's callback called from distlab: is it kept after the hidden frames' line?"""
    def frame(where, func):  # as IPython 9 writes one
        return f"\x1b[36mFile \x1b[39m\x1b[32m{where}\x1b[39m, in \x1b[36m{func}\x1b[39m\n"

    def cell(n, line, func=""):
        return (f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[{n}]\x1b[39m"
                f"\x1b[32m, line {line}\x1b[39m{func}\n")

    tb = ["\x1b[31m-----\x1b[39m", "\x1b[31mValueError\x1b[39m   Traceback (most recent call last)",
          cell(3, 4), frame("/x/src/distlab/cost_models.py:188", "f"),
          frame("/x/lib/site-packages/numpy/a.py:7", "g"), cell(2, 3, ", in costs_of"),
          "\x1b[31mValueError\x1b[39m: bad"]
    nb = new_notebook(cells=[new_code_cell("x", outputs=[new_output(
        "error", ename="ValueError", evalue="bad", traceback=tb)])])
    nb, _ = LearnerTracebacks(hidden_folders=["/x/src/distlab"]).preprocess(nb, {})
    kept = nb.cells[0].outputs[0].traceback
    assert kept == tb[:3] + ["... 2 frame(s) inside distlab and the libraries it uses"] + tb[5:]


def test_other_outputs_are_untouched():
    """Does a printed line that looks like a frame stay (only error outputs are changed)?"""
    printed = new_output("stream", name="stdout", text="File /x/site-packages/a.py:1, in f\n")
    nb = new_notebook(cells=[new_code_cell("x", outputs=[printed])])
    nb, _ = LearnerTracebacks().preprocess(nb, {})
    assert nb.cells[0].outputs[0].text == printed.text
