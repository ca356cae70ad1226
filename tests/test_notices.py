"""distlab.notices in a real kernel: a check that would use a definition whose cell failed says
so first, and an exercise changed outside its blanks says which line, there and in its checks."""

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import reference
from distlab.source.markers import blank_source


@pytest.fixture(scope="module")
def outputs():
    _, cell, _ = reference.locate("chunk_bounds")
    released, _ = blank_source(cell.source)
    broken = released.replace("def chunk_bounds(length, n):", "def chunk_bounds(length, n)")
    changed = released.replace("bounds, start = [], 0", "bounds, start = [], 1")
    assert broken != released != changed
    sources = ["import distlab", released, "chunk_bounds(4, 2)", broken, "chunk_bounds(4, 2)",
               changed, "chunk_bounds(4, 2)", released, "chunk_bounds(4, 2)"]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    NotebookClient(nb, allow_errors=True, timeout=120).execute()
    return ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            for c in nb.cells]


def test_a_check_after_a_failed_definition_says_it_uses_the_old_one(outputs):
    assert "⚠" not in outputs[2]  # the released definition ran: nothing to say
    assert outputs[4].startswith("⚠ chunk_bounds: its cell did not run (SyntaxError on line 1:"), \
        outputs[4]
    assert "uses the chunk_bounds defined before" in outputs[4]


def test_a_line_changed_outside_the_blanks_is_named_in_the_cell_and_its_checks(outputs):
    expected = "⚠ line 4 of chunk_bounds was changed outside the blanks (bounds, start = [], 1)"
    assert outputs[5].startswith(expected), outputs[5]
    assert outputs[6].startswith(expected), outputs[6]
    assert "its cell did not run" not in outputs[6]  # redefined since: no longer stale


def test_running_the_released_code_again_clears_every_notice(outputs):
    assert "⚠" not in outputs[7] + outputs[8], outputs[7:]
