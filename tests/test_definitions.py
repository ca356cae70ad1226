"""definitions.functions: the functions a cell defines, as the judge and the references find
them in a submission or a solved source."""

from autograder.grade_cell import function_source
from distlab.source.definitions import functions


def test_functions_and_classes_are_found_with_their_decorators_and_nothing_else():
    """Are top-level functions and classes (both can be graded) found, and nothing else?"""
    code = ("import functools\n\n@functools.cache\ndef a(x):\n    return x\n\n"
            "class B:\n    def inner(self):\n        pass\n\nprint(a(1))\n")
    assert functions(code) == {"a": "@functools.cache\ndef a(x):\n    return x",
                               "B": "class B:\n    def inner(self):\n        pass"}


def test_a_name_defined_twice_is_the_later_definition_as_in_a_kernel():
    assert functions("def f():\n    return 1\ndef f():\n    return 2\n") == {
        "f": "def f():\n    return 2"}
    cells = ["def f():\n    return 1\n", "x = 1\n", "def f():\n    return 3\n", "y = 2\n"]
    assert function_source(cells, "f") == "def f():\n    return 3"
    assert function_source(cells, "g") == ""


def test_a_cell_with_magics_is_read_as_a_kernel_would_and_a_broken_one_defines_nothing():
    assert "f" in functions("%matplotlib inline\ndef f():\n    return 1\n")
    assert functions("def f(:\n") == {}
