"""The notebooks not yet rewritten to ../shared/BLANKS.md, and the issue that rewrites each.

The give-away check (autograder/giveaway.py) reads the whole screen a learner reads, and these
notebooks fail it as they read before their rewrite: their tests are expected failures that
name the issue, and strict, so a test fails the day its notebook passes and the mark must go.
"""

import pytest

REWRITTEN_BY = {}


def until_rewritten(assignment: str):
    """`assignment` as a pytest parameter, an expected failure until its rewrite lands."""
    issue = REWRITTEN_BY.get(assignment)
    marks = [pytest.mark.xfail(strict=True, reason=f"issue {issue} rewrites {assignment} to "
                               "BLANKS.md")] if issue else []
    return pytest.param(assignment, marks=marks)
