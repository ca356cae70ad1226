"""ClearBlanks: nbgrader's ClearSolutions, plus inline `# BLANK` markers turned into `_____`."""

from nbgrader import utils
from nbgrader.preprocessors import ClearSolutions

from distlab.source.markers import MarkerError, blank_source, check_released, has_marker


class ClearBlanks(ClearSolutions):
    """Blank every `# BLANK` marker of a solution cell, then clear whole solution regions.

    A cell with markers keeps its other lines (it is not replaced by the stub); a marker
    outside a solution cell is an error, as a solution region there is for ClearSolutions.
    """

    def _replace_solution_region(self, cell, language):
        blanked = False
        if cell.cell_type == "code" and has_marker(cell.source):
            where = f"cell {cell.metadata.get('nbgrader', {}).get('grade_id', cell.get('id'))}"
            if not utils.is_solution(cell):
                raise MarkerError(f"{where}: BLANK markers are only allowed in solution cells")
            cell.source, _ = blank_source(cell.source, where)
            check_released(cell.source, where)
            blanked = True
        return super()._replace_solution_region(cell, language) or blanked
