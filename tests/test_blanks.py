"""Does an unfilled `_____` say clearly which blank to fill?"""

import linecache

import pytest

from distlab import BlankNotFilled, _____, require_filled  # noqa: F401 (the cells use _____)

CELL = '''from distlab import _____
def step(N):
    a = 1
    idx = _____  # [1] which chunk?
    b = _____
    return idx % N
'''


def define(source, name="<cell-blanks>"):
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace


def test_using_a_blank_names_the_function_and_its_empty_lines():
    """Does using `_____` inside a function list that function's unfilled lines?"""
    with pytest.raises(BlankNotFilled, match=r"step still has 2 blank line\(s\)") as err:
        define(CELL)["step"](3)
    assert "blank [1] (lines 4, 5)" in str(err.value)
    assert len(str(err.value).splitlines()) == 2  # short: what to fill, and what to do


def test_a_blank_used_in_a_comprehension_names_the_learners_function():
    """Is a `_____` used inside a list comprehension reported for the function, not for
    Python's `<listcomp>` frame?"""
    cell = ("from distlab import _____\ndef gather(n):\n"
            "    return [_____ + k for k in range(n)]  # [3] what each rank holds\n")
    with pytest.raises(BlankNotFilled, match=r"^gather still has 1 blank line\(s\) to fill: "
                                             r"blank \[3\] \(line 3\)"):
        define(cell, "<cell-comp>")["gather"](2)


def test_using_a_blank_at_top_level_still_says_what_to_do():
    """Outside a function, is the message still about filling the blank?"""
    with pytest.raises(BlankNotFilled, match="not filled yet"):
        define("from distlab import _____\nx = _____ + 1\n", "<cell-top>")


def test_require_filled_lists_lines_before_anything_runs():
    """Does require_filled name every empty line without running the function?"""
    with pytest.raises(BlankNotFilled, match=r"blank \[1\] \(lines 4, 5\)"):
        require_filled(define(CELL, "<cell-req>")["step"])


def test_a_filled_function_passes_require_filled():
    """Is a function without blanks (a `_____` in a comment only) accepted?"""
    require_filled(define("def ok():\n    return 1  # not _____ here\n", "<cell-ok>")["ok"])


def test_blank_repr_is_harmless():
    """Can a learner print a structure holding an unfilled blank without a crash?"""
    assert repr([_____]) == "[_____]"


def test_in_a_notebook_an_unfilled_blank_shows_its_message_alone():
    """In a real kernel, is an unfilled blank shown as its short message, without the 30-line
    traceback through the check cell and distlab's own frames?"""
    import nbformat
    from nbclient import NotebookClient

    cells = ["from distlab import _____\ndef f(x):\n    return _____ + x  # [1] a hint\n",
             "f(1)",
             # a blank that is a whole statement is a bare name Python would step over
             "def g(x):\n    y = [x]\n    _____  # [2] send it\n    return y\n",
             "g(1)",
             # and one that is a whole value: a rank would go on with the blank as its request
             "def h(x):\n    request = _____  # [3] start it\n    return x\n",
             "h(1)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    [error] = nb.cells[1].outputs
    shown = "\n".join(error["traceback"])
    assert error["ename"] == "BlankNotFilled" and "blank [1] (line 3)" in shown
    assert len(shown.splitlines()) <= 3 and "distlab" not in shown and "File" not in shown
    [error] = nb.cells[3].outputs
    assert error["ename"] == "BlankNotFilled", error
    assert "blank [2] (line 3)" in "\n".join(error["traceback"])
    [error] = nb.cells[5].outputs
    assert error["ename"] == "BlankNotFilled", error
    assert "blank [3] (line 2)" in "\n".join(error["traceback"])
