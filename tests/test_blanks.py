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
    assert "line 4: idx = _____  # [1] which chunk?" in str(err.value)
    assert "line 5: b = _____" in str(err.value)


def test_using_a_blank_at_top_level_still_says_what_to_do():
    """Outside a function, is the message still about filling the blank?"""
    with pytest.raises(BlankNotFilled, match="not filled yet"):
        define("from distlab import _____\nx = _____ + 1\n", "<cell-top>")


def test_require_filled_lists_lines_before_anything_runs():
    """Does require_filled name every empty line without running the function?"""
    with pytest.raises(BlankNotFilled, match="line 4: idx = _____"):
        require_filled(define(CELL, "<cell-req>")["step"])


def test_a_filled_function_passes_require_filled():
    """Is a function without blanks (a `_____` in a comment only) accepted?"""
    require_filled(define("def ok():\n    return 1  # not _____ here\n", "<cell-ok>")["ok"])


def test_blank_repr_is_harmless():
    """Can a learner print a structure holding an unfilled blank without a crash?"""
    assert repr([_____]) == "[_____]"
