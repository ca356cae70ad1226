"""FeedbackExporter: nbgrader's feedback page (its template "feedback"), offline.

That template's header loads MathJax from a CDN; this exporter finds the course's
templates/feedback/ first, whose mathjax.html.j2 loads nothing (MathToMathML writes the maths
as MathML). A subclass, not HTMLExporter's config: the formgrader renders its own pages with
HTMLExporter, and nbgrader's API sets HTMLExporter.template_name = "feedback" before feedback.
"""

import os

from nbconvert.exporters import HTMLExporter
from traitlets import default

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "feedback")


class FeedbackExporter(HTMLExporter):
    @default("template_paths")
    def _template_paths(self, prune=True, root_dirs=None):
        return [TEMPLATES, *super()._template_paths(prune, root_dirs)]
