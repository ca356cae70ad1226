"""Do solved sources become nbgrader notebooks, and are bad ones refused?"""

import pytest

from autograder import solved
from distlab.source import cells, paths
from distlab.source.markers import MarkerError

TOY = '''# %% [markdown]
# # Toy

# %%
from distlab import _____

# %% solution="add_one"
def add_one(x):
    y = x + 1  # BLANK add one
    return y

# %%
assert add_one(1) == 2

# %% tests="add_one_tests" points=1
### BEGIN HIDDEN TESTS
assert add_one(5) == 6
### END HIDDEN TESTS
'''


def write(tmp_path, text, name="00_toy"):
    (tmp_path / name).mkdir()
    (tmp_path / name / f"{name}.py").write_text(text)
    return tmp_path


def test_cells_get_nbgrader_metadata_kernelspec_and_stable_ids(tmp_path):
    """Does each kind of cell get the nbgrader metadata it needs, and a stable id?"""
    nb = solved.load("00_toy", write(tmp_path, TOY))
    kinds = [(c.cell_type, c.metadata.get("nbgrader", {}).get("grade_id")) for c in nb.cells]
    assert kinds == [("markdown", None), ("code", "locked_00"), ("code", "add_one"),
                     ("code", "locked_01"), ("code", "add_one_tests")]
    assert nb.cells[2].metadata["nbgrader"]["solution"] is True
    assert nb.cells[4].metadata["nbgrader"] == {
        "grade": True, "grade_id": "add_one_tests", "locked": True, "points": 1,
        "schema_version": 3, "solution": False, "task": False}
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert [c.id for c in nb.cells] == [f"00_toy-{i:03d}" for i in range(5)]


def test_marker_outside_a_solution_cell_names_file_and_line(tmp_path):
    """Is a BLANK in a locked cell refused with the file and the cell's line?"""
    bad = TOY.replace("assert add_one(1) == 2", "assert add_one(1) == 2  # BLANK")
    with pytest.raises(MarkerError, match=r"00_toy\.py:13: BLANK markers belong in a solution"):
        solved.load("00_toy", write(tmp_path, bad))


def test_bad_span_names_the_line_in_the_solution_file(tmp_path):
    """Does a span that matches nothing point at its line in the .py file?"""
    bad = TOY.replace("# BLANK add one", "# BLANK `x + 2`")
    with pytest.raises(MarkerError, match=r"00_toy\.py:9: BLANK `x \+ 2` matches nothing"):
        solved.load("00_toy", write(tmp_path, bad))


def test_assignments_are_found_by_folder_name(tmp_path):
    """Is every solutions/<id>/<id>.py an assignment, and nothing else?"""
    write(tmp_path, TOY)
    write(tmp_path, TOY, "01_other")
    (tmp_path / "01_other" / "helper.py").write_text("")
    assert paths.assignment_ids(tmp_path) == ["00_toy", "01_other"]


@pytest.mark.parametrize("assignment", paths.assignment_ids())
def test_solution_sources_read_without_jupytext_equal_the_loaded_cells(assignment):
    """The kernel's quick reader (no jupytext) gives each solution cell as load() does."""
    loaded = {cell.metadata["nbgrader"]["grade_id"]: cell.source
              for cell, _ in solved.solution_cells(assignment)}
    assert cells.solution_sources(assignment) == loaded


def test_solution_sources_read_header_attributes_and_trim_blank_lines(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy.py").write_text(
        '# %% [markdown]\n# prose\n\n# %% solution="f" drill\n\ndef f():\n    return 1\n\n\n'
        '# %% tests="f_tests" points=1\nassert f() == 1\n')
    assert cells.solution_sources("toy", tmp_path) == {"f": "def f():\n    return 1"}


def test_the_judge_reads_each_notebook_once_and_grades_past_a_broken_one(tmp_path, monkeypatch):
    """reference.locate finds a function past a notebook whose markers are broken, names that
    notebook when the function is nowhere, and reads each notebook once per process, however
    many functions it looks up."""
    from autograder import reference

    write(tmp_path, TOY.replace("# BLANK add one", "# BLANK `zzz` add one"), "00_broken")
    write(tmp_path, TOY)
    original, reads = solved.solution_cells, []

    def solution_cells(assignment):
        reads.append(assignment)
        return original(assignment, tmp_path)

    monkeypatch.setattr(solved, "solution_cells", solution_cells)
    monkeypatch.setattr(paths, "assignment_ids", lambda: ["00_broken", "00_toy"])
    reference.locate.cache_clear()
    reference._solution_cells.cache_clear()
    try:
        assert reference.locate("add_one")[0] == "00_toy"
        with pytest.raises(KeyError, match=r"'sub_one' \(not read: .*00_broken"):
            reference.locate("sub_one")
        assert reads.count("00_toy") == 1  # a broken notebook is read again: it may be fixed
    finally:
        reference.locate.cache_clear()
        reference._solution_cells.cache_clear()
