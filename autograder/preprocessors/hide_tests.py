"""HideTests: feedback shows what each graded cell printed, never the hidden tests behind it."""

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import Bool, List


class HideTests(ClearHiddenTests):
    """Remove hidden-test source from graded cells and reduce their errors to one line.

    A traceback from a graded cell would quote the hidden test's lines, so an error output
    keeps only its type and message. A learner's own cell may hold the markers too (a copied
    graded cell, or on purpose): its region is cut like any other, a BEGIN without its END cuts
    the rest of the cell, where nbgrader would stop and leave the learner no feedback, and its
    error keeps only its type and message as well (a copied graded cell raises in the grading
    kernel, which cannot import the grading side, and its traceback quotes the region).
    """

    enforce_metadata = Bool(False, help="Fail on hidden tests outside graded cells"
                            ).tag(config=True)
    # The HTML exporter configures this for every preprocessor; configurable here as in
    # GetGrades, or feedback logs "Config option `display_data_priority` not recognized".
    display_data_priority = List(GetGrades.display_data_priority.default_value).tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        held_tests = self.begin_test_delimeter in cell.source
        try:
            cell, resources = super().preprocess_cell(cell, resources, cell_index)
        except RuntimeError:  # unbalanced markers
            lines = cell.source.split("\n")
            start = next((i for i, line in enumerate(lines)
                          if self.begin_test_delimeter in line), len(lines))
            cell.source = "\n".join(lines[:start])
        if cell.cell_type == "code" and (utils.is_grade(cell) or held_tests):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
        return cell, resources
