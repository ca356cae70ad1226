"""nbgrader preprocessors of this course, one per file, composed in nbgrader_config.py."""

from autograder.preprocessors.clear_blanks import ClearBlanks
from autograder.preprocessors.hide_tests import HideTests

__all__ = ["ClearBlanks", "HideTests"]
