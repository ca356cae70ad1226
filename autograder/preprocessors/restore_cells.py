"""RestoreCells: nbgrader's OverwriteCells, warning about real edits only.

A graded cell is released with its hidden tests removed, so its source in every honest
submission differs from the one in the gradebook, and OverwriteCells logs "Attribute
'checksum' for cell ... has changed!" for each: a log where every student looks like a
tamperer. Here a locked cell that is exactly what was released (the stored source without its
hidden tests) is restored quietly; any other change is still reported, and restored.
"""

from nbformat.v4 import new_code_cell
from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, OverwriteCells


def _released(source: str, cell_type: str) -> str:
    """What a cell with this stored source looked like in the learner's notebook."""
    cell = new_code_cell(source) if cell_type == "code" else None
    if cell is None:
        return source
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


class RestoreCells(OverwriteCells):
    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                stored = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                         self.assignment_id)
            except MissingEntry:
                stored = None
            if (stored is not None and stored.locked and cell.cell_type == stored.cell_type
                    and cell.source.strip() == _released(stored.source,
                                                         stored.cell_type).strip()):
                cell.source = stored.source  # as released: nothing to report
        return super().preprocess_cell(cell, resources, cell_index)
