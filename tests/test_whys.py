"""A "Why" cell (`# %% [markdown] why="<name>"`) leaves the learner's notebook and comes back
as the output of the check that ends with `reveal("<name>")`, once that check passes: is it
gone from every released notebook, is each revealed by exactly one check, and does a source
that forgets the reveal fail to release?"""

import json

import pytest

from autograder.release import fresh_whys, whys_of
from distlab import whys
from distlab.source.markers import MarkerError
from distlab.source.paths import ROOT, assignment_ids

IDS = assignment_ids()


@pytest.mark.parametrize("assignment", IDS)
def test_is_no_why_in_the_learners_notebook_and_every_reveal_known(assignment):
    nb = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
    stored = {name: why for name, why in whys.load().items() if why["notebook"] == assignment}
    text = "\n".join("".join(cell["source"]) for cell in nb["cells"])
    for name, why in stored.items():
        assert why["text"] not in text, f"{assignment}: the Why {name!r} is in the notebook"
        assert f'reveal("{name}")' in text, f"{assignment}: nothing reveals {name!r}"
    assert stored == whys_of(assignment), f"{assignment}: run python -m autograder.release"


def test_are_the_names_course_wide_and_the_store_complete():
    assert fresh_whys(IDS) == whys.load()


def solved(tmp_path, body: str):
    folder = tmp_path / "99_tiny"
    folder.mkdir()
    (folder / "99_tiny.py").write_text(body)
    return tmp_path


CHECK = '# %%\nx = 1\nassert x == 1\nprint("✓ x")\n{reveal}\n\n'
WHY = '# %% [markdown] why="x"\n# **Why.** Because.\n'


def test_is_a_why_without_its_reveal_refused(tmp_path):
    with pytest.raises(MarkerError, match='needs exactly one `reveal\\("x"\\)`'):
        whys_of("99_tiny", solved(tmp_path, CHECK.format(reveal="") + WHY))


def test_is_a_why_with_its_reveal_stored(tmp_path):
    source = solved(tmp_path, CHECK.format(reveal='reveal("x")') + WHY)
    assert whys_of("99_tiny", source) == {"x": {"notebook": "99_tiny",
                                               "text": "**Why.** Because."}}


def test_does_reveal_print_outside_a_notebook_and_name_an_unknown_why(capsys):
    name, why = next(iter(whys.load().items()))
    whys.reveal(name)
    assert capsys.readouterr().out.strip() == why["text"].strip()
    with pytest.raises(KeyError, match="python -m autograder.release"):
        whys.reveal("no such why")
