"""Are the learner notebooks generated from solutions/, fresh, and free of answers?"""

import json
import re

import pytest

from autograder import release, solved
from distlab.source import paths
from distlab.source.definitions import functions
from distlab.source.markers import blank_source

IDS = paths.assignment_ids()
RELEASED = {a: (paths.ROOT / "notebooks" / a / f"{a}.ipynb") for a in IDS}
GRADE_CALL = re.compile(r"^grade\((\w+)(?:, points=([\d.]+))?\)$", re.M)


def released_text(assignment):
    nb = json.loads(RELEASED[assignment].read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"])


def test_there_is_a_course():
    """Is there at least the collectives notebook?"""
    assert "01_collectives" in IDS


def test_learner_notebooks_are_not_stale():
    """Does regenerating notebooks/ from solutions/ change nothing? (else: `make release`)"""
    assert release.stale(IDS) == []


def released_cells(assignment):
    nb = json.loads(RELEASED[assignment].read_text())
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
            for c in nb["cells"]}


@pytest.mark.parametrize("assignment", IDS)
def test_no_answer_or_hidden_test_is_released(assignment):
    """Is each learner cell exactly its solved cell with the answers blanked, and is no
    hidden-test line anywhere in the learner notebook?"""
    text, released = released_text(assignment), released_cells(assignment)
    for cell in solved.load(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            template, blanks = blank_source(cell.source)
            assert released[meta["grade_id"]] == template
            for blank in blanks:
                line = template.split("\n")[blank.line - 1]
                assert "_____" in line and blank.answer not in line.split("#")[0]
        if meta.get("grade") and "BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            for line in filter(None, (h.strip() for h in hidden.split("\n"))):
                assert line not in text, f"hidden test released: {line}"
    assert "HIDDEN TESTS" not in text


@pytest.mark.parametrize("assignment", IDS)
def test_every_learner_cell_has_blanks_and_a_kernel(assignment):
    """Does the learner notebook have a kernelspec and `_____` where answers were?"""
    nb = json.loads(RELEASED[assignment].read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    solution_cells = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution")]
    assert solution_cells and all("_____" in "".join(c["source"]) or "YOUR CODE HERE" in
                                  "".join(c["source"]) for c in solution_cells)


@pytest.mark.parametrize("assignment", IDS)
def test_points_match_the_blanks_they_grade(assignment):
    """Is each graded cell worth as many points as the blanks it grades (one per blank)?"""
    blanks = {}
    for cell, cell_blanks in solved.solution_cells(assignment):
        for name in functions(cell.source):
            blanks[name] = len(cell_blanks)
    for cell in solved.load(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        for name, points in GRADE_CALL.findall(cell.source) if meta.get("grade") else []:
            expected = float(points) if points else blanks[name]
            assert meta["points"] == expected, f"{meta['grade_id']}: points != blanks of {name}"


def test_learner_function_names_are_unique_across_the_course():
    """Can the grader find each function's solution cell by name alone: is no graded name
    defined twice, nor in any other notebook's code cells?"""
    names = {a: [name for cell, _ in solved.solution_cells(a) for name in functions(cell.source)]
             for a in IDS}
    mine = [name for a in IDS for name in names[a]]
    assert len(mine) == len(set(mine))
    for assignment in IDS:
        others = {name for a in IDS if a != assignment for name in names[a]}
        for cell in solved.load(assignment).cells:
            if cell.cell_type == "code":
                assert not set(functions(cell.source)) & others, assignment


def test_blanked_solution_cells_parse():
    """Does every released solution cell still parse as Python?"""
    for assignment in IDS:
        for cell, _ in solved.solution_cells(assignment):
            compile(blank_source(cell.source)[0], assignment, "exec")


@pytest.mark.parametrize("assignment", IDS)
def test_every_solved_function_is_its_template_outside_the_blanks(assignment):
    """Is each solved function (or class) its released template with answers in the blanks
    only, so that grading it as "the template with the learner's fills" changes nothing?"""
    from distlab.source.changes import changed_line

    for cell, _ in solved.solution_cells(assignment):
        template, _ = blank_source(cell.source)
        for name, code in functions(cell.source).items():
            line = changed_line(code, functions(template)[name])
            assert line is None, f"{name}: line {line} differs from its template"


@pytest.mark.parametrize("assignment", IDS)
def test_locked_cells_hold_no_blank(assignment):
    """Does every `_____` a learner sees sit in a cell that is theirs (a solution cell), never
    in a locked one (importing distlab makes `_____` known to every cell)?"""
    nb = json.loads(RELEASED[assignment].read_text())
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] == "code" and not meta.get("solution"):
            assert "_____" not in "".join(cell["source"]), meta.get("grade_id")
