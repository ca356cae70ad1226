"""Does the sampled strength check take as caught only what the drill verdicts really settled:
a blank on a drill position whose every mutant failed the current hidden test?"""

import json

import pytest

from autograder import drill_verdicts, strength
from distlab.drills import positions, snippets


@pytest.fixture(scope="module")
def cases():
    return {(c.function, c.blank.answer): c for c in strength.plan("01_collectives", sample=True)}


def verdict_place(function, answer):
    """The verdicts.json place of the drill position of `function` whose text is `answer`."""
    source = snippets.get(function).source
    found = positions.candidates(source)
    return next(place for p, place in zip(found, positions.places(source, found), strict=True)
                if p.text == answer)


def test_a_drilled_blank_whose_mutants_all_failed_is_settled(cases):
    assert cases["ring_allreduce", "(i + 1) % N"].settled
    assert not any(case.settled for (function, _), case in cases.items()
                   if function not in snippets.load(every=True))


def test_a_stale_or_other_verdict_settles_nothing(cases, monkeypatch):
    """Another mutant count, another column, a survivor, another hidden test: not settled."""
    case = cases["ring_allreduce", "(i + 1) % N"]
    function, answer = case.function, case.blank.answer
    line = case.solved.split("\n")[case.blank.line - 1]
    column = line.index(answer)
    place = verdict_place(function, answer)
    count = positions.stored()["snippets"][function]["positions"][place][0]
    assert drill_verdicts.settled(function, line, column, answer, count)
    assert not drill_verdicts.settled(function, line, column, answer, count + 1)
    assert not drill_verdicts.settled(function, line, column + 1, answer, count)
    data = json.loads(json.dumps(positions.stored()))
    data["snippets"][function]["positions"][place] = [count, "off by one"]
    monkeypatch.setattr(positions, "stored", lambda: data)
    assert not drill_verdicts.settled(function, line, column, answer, count)
    data["snippets"][function]["positions"][place] = [count, None]
    assert drill_verdicts.settled(function, line, column, answer, count)
    monkeypatch.setattr(drill_verdicts, "test_digest", lambda name: "another test")
    assert not drill_verdicts.settled(function, line, column, answer, count)


def test_only_the_sampled_check_of_the_course_reuses_them(cases):
    """The exhaustive check, and solved sources kept elsewhere, run every mutant."""
    assert not any(c.settled for c in strength.plan("01_collectives", sample=False))
