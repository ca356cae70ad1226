"""Does MathToMathML turn markdown maths into MathML, and leave everything else alone?"""

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.preprocessors import MathToMathML


def converted(source):
    nb = new_notebook(cells=[new_markdown_cell(source)])
    nb, _ = MathToMathML().preprocess(nb, {})
    return nb.cells[0].source


def test_each_delimiter_becomes_mathml():
    """Are $...$, \\(...\\), $$...$$ and \\[...\\] all MathML, inline or block, with no TeX left?"""
    out = converted("ring: $2\\,\\frac{N-1}{N}\\,S$ and \\(N\\)\n\n$$\\sum_q x_q$$\n\n\\[a+b\\]")
    assert out.count('<math display="inline">') == 2
    assert out.count('<math display="block">') == 2
    assert "<mfrac>" in out and "$" not in out and "\\(" not in out and "\\[" not in out


def test_no_namespace_url_and_one_line_per_formula():
    """Is each formula one line without the xmlns URL (the page names no http address)?"""
    out = converted("$$\na\n+ b\n$$")
    assert "http" not in out and "\n" not in out


def test_code_spans_fenced_code_and_escaped_dollars_are_untouched():
    """Do `$x$`, a fenced block's $y$ and an escaped \\$5 keep their dollars?"""
    source = "Use `$x$` in code, costs \\$5, and:\n\n```python\nprint('$y$')\n```\n"
    assert converted(source) == source


def test_dollar_amounts_are_not_maths():
    """Is "$5 and $10" left as text (a closing $ is not preceded by a space)?"""
    assert converted("from $5 and $10 on") == "from $5 and $10 on"


def test_a_formula_latex2mathml_cannot_convert_stays_tex():
    """Is a broken formula kept as it was, and the next one still converted (no crash)?"""
    out = converted("broken $x^$ and $\\nosuchcommand y$ then $z$")
    assert out.startswith("broken $x^$ and $\\nosuchcommand y$ then <math")


def test_markdown_characters_inside_maths_are_references():
    """Would markdown see `*` or `_` in a formula's text? (They become character references.)"""
    out = converted("$\\text{a*b_c}$")
    assert "a&#42;b&#95;c" in out


def test_code_cells_are_untouched():
    """Is a code cell's `$` left alone?"""
    nb = new_notebook(cells=[new_code_cell("s = '$x$'")])
    nb, _ = MathToMathML().preprocess(nb, {})
    assert nb.cells[0].source == "s = '$x$'"
