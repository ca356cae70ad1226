"""Does every shortcut of the suite (tests/shortcuts/) fail its hidden test, naming the idea it
skips, and lose points under grade()? Does every honest equivalent keep full marks?"""

import pytest
from notebook_testing import Notebook, fails, stop_ranks  # noqa: F401 (fixture)
from shortcuts import suite

SHORTCUTS, HONEST = suite("SHORTCUTS"), suite("HONEST")


@pytest.mark.parametrize("assignment,shortcut", SHORTCUTS,
                         ids=[f"{a}: {s.id}" for a, s in SHORTCUTS])
def test_a_shortcut_fails_and_says_why(assignment, shortcut):
    """Does the hidden test reject the shortcut, with a complaint that names the idea?"""
    variant = Notebook(assignment).variant_of(shortcut.function, shortcut.answers)
    complaint = fails(shortcut.function, variant, ignore_warnings=True)
    assert complaint, f"{shortcut.id}: the hidden test passes"
    assert shortcut.says.lower() in complaint.lower(), complaint
    assert "HIDDEN" not in complaint and "def " not in complaint, complaint


@pytest.mark.parametrize("assignment,honest", HONEST, ids=[f"{a}: {s.id}" for a, s in HONEST])
def test_an_honest_equivalent_passes(assignment, honest):
    """Does a correct answer written otherwise pass the hidden test?"""
    variant = Notebook(assignment).variant_of(honest.function, honest.answers)
    assert fails(honest.function, variant) == ""
