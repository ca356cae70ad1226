"""Does a learner's feedback page work offline: no script or address to fetch, maths as MathML?

The page is rendered as `nbgrader generate_feedback` renders it (the course's nbgrader_config.py:
its exporter and preprocessors), for the released notebook 01 with made-up scores; GetGrades,
which reads the scores from the gradebook, is left out.
"""

import os
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from nbgrader.converters import GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import GetGrades
from traitlets.config.loader import PyFileConfigLoader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "01_collectives", "01_collectives.ipynb")
MARKDOWN = re.compile(r'<div class="text_cell_render[^"]*">(.*?)</div>', re.DOTALL)
CODE = re.compile(r"<(code|pre)\b.*?</\1>", re.DOTALL)
STYLE = re.compile(r"<style\b.*?</style>", re.DOTALL)
CSS_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


def feedback_html(nb):
    config = PyFileConfigLoader("nbgrader_config.py", path=ROOT).load_config()
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    for preprocessor in converter.preprocessors:
        if preprocessor is not GetGrades:
            exporter.register_preprocessor(preprocessor)
    for cell in nb.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata.nbgrader["score"] = cell.metadata.nbgrader.get("points", 0)
    resources = {"nbgrader": {"notebook": "01_collectives", "score": 1, "max_score": 1,
                              "late_penalty": 0}}
    html, _ = exporter.from_notebook_node(nb, resources=resources)
    return html


@pytest.fixture(scope="module", autouse=True)
def grading_folder(tmp_path_factory):
    """Loading the course's config makes its grading folders: here, temporary ones."""
    old = os.environ.get("DISTLAB_GRADING_DIR")
    os.environ["DISTLAB_GRADING_DIR"] = str(tmp_path_factory.mktemp("grading"))
    yield
    if old is None:
        del os.environ["DISTLAB_GRADING_DIR"]
    else:
        os.environ["DISTLAB_GRADING_DIR"] = old


@pytest.fixture(scope="module")
def page():
    return feedback_html(nbformat.read(NOTEBOOK, as_version=4))


def test_the_page_loads_nothing_from_the_network(page):
    """No script to fetch, and no address outside the inlined CSS's comments (its licences)?"""
    assert "<script src=" not in page
    without_css_comments = STYLE.sub(lambda m: CSS_COMMENT.sub("", m.group()), page)
    assert re.findall(r"https?://[^\s\"'<>)]+", without_css_comments) == []


def test_the_maths_is_mathml(page):
    """Are there <math> elements, and no $ or \\( left in the markdown (outside code)?"""
    assert page.count("<math") > 50
    texts = [CODE.sub("", m) for m in MARKDOWN.findall(page)]
    assert texts and not [t for t in texts if "$" in t or "\\(" in t or "\\[" in t]


def test_a_widgets_outputs_are_trimmed_like_any_other():
    """An interact whose figure failed: is its traceback, brought out of the widget, shown
    without distlab's frames?"""
    frame = "\x1b[36mFile \x1b[39m\x1b[32m/x/site-packages/ipywidgets/interaction.py:243\x1b[39m"
    error = {"output_type": "error", "ename": "BlankNotFilled", "evalue": "fill blank [1]",
             "traceback": ["Traceback (most recent call last)", frame,
                           "\x1b[31mBlankNotFilled\x1b[39m: fill blank [1]"]}
    view = new_output("display_data", data={
        "text/plain": "interactive(children=(IntSlider(value=8, description='n'), Output()))",
        "application/vnd.jupyter.widget-view+json": {"model_id": "box"}})
    nb = new_notebook(cells=[new_code_cell("explore()", outputs=[view])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {
        "box": {"state": {"children": ["IPY_MODEL_out"]}},
        "out": {"state": {"outputs": [error]}}}}}
    html = feedback_html(nb)
    assert "fill blank [1]" in html and "interaction.py" not in html
    assert "interactive(children" not in html
