"""DropDuplicateIds: nbgrader's DeduplicateIds, leaving a copied cell an ordinary cell.

A learner who copies a locked, graded or solution cell in JupyterLab copies its nbgrader
metadata, grade_id included. nbgrader keeps the last cell of each grade_id and empties the
others' metadata to `{}`, which its own metadata check then takes for an old format
(SchemaTooOldError): the whole submission would go ungraded. Here the copies lose the key.
"""

from nbgrader.preprocessors import DeduplicateIds


class DropDuplicateIds(DeduplicateIds):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader", None) == {}:
            del cell.metadata["nbgrader"]
        return cell, resources
