"""nbgrader preprocessors of this course, one per file, composed in nbgrader_config.py."""

from autograder.preprocessors.capped_execute import CappedExecute
from autograder.preprocessors.clear_blanks import ClearBlanks
from autograder.preprocessors.clear_whys import ClearWhys
from autograder.preprocessors.drop_duplicate_ids import DropDuplicateIds
from autograder.preprocessors.hide_tests import HideTests
from autograder.preprocessors.judge_grades import JudgeGrades
from autograder.preprocessors.learner_tracebacks import LearnerTracebacks
from autograder.preprocessors.math_to_mathml import MathToMathML
from autograder.preprocessors.restore_cells import RestoreCells
from autograder.preprocessors.static_widgets import StaticWidgets

__all__ = ["CappedExecute", "ClearBlanks", "ClearWhys", "DropDuplicateIds", "HideTests",
           "JudgeGrades", "LearnerTracebacks", "MathToMathML", "RestoreCells", "StaticWidgets"]
