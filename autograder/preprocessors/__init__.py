"""nbgrader preprocessors of this course, one per file, composed in nbgrader_config.py."""

from autograder.preprocessors.clear_blanks import ClearBlanks
from autograder.preprocessors.hide_tests import HideTests
from autograder.preprocessors.judge_grades import JudgeGrades

__all__ = ["ClearBlanks", "HideTests", "JudgeGrades"]
