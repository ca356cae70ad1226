"""ClearWhys: the learner's notebook without its "Why" cells (distlab/whys.py says why).

A markdown cell the solved source marks `# %% [markdown] why="<name>"` explains what the
exercise above it asks; its check reveals the text once it passes (`reveal("<name>")`), from
the store `python -m autograder.release` writes. Here the cell leaves the released notebook.
"""

from nbgrader.preprocessors import NbGraderPreprocessor


def why_of(cell) -> str | None:
    """The name of a "Why" cell, None for any other cell."""
    return cell.metadata.get("distlab", {}).get("why") if cell.cell_type == "markdown" else None


class ClearWhys(NbGraderPreprocessor):  # enabled, as nbgrader's own are
    def preprocess(self, nb, resources):
        nb.cells = [cell for cell in nb.cells if why_of(cell) is None]
        return nb, resources
