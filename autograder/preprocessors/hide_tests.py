"""HideTests: feedback shows what each graded cell printed, never the hidden tests behind it."""

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests


class HideTests(ClearHiddenTests):
    """Remove hidden-test source from graded cells and reduce their errors to one line.

    A traceback from a graded cell would quote the hidden test's lines, so an error output
    keeps only its type and message.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.cell_type == "code" and utils.is_grade(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
        return cell, resources
