"""How do `# BLANK` markers turn solved lines into learner blanks?"""

import pytest

from distlab.source.markers import (
    MarkerError,
    blank_line,
    blank_source,
    check_released,
    split_clauses,
)


def released(line):
    return blank_line(line, 1, "f.py:1")[0]


def answers(line):
    return [answer for answer, _ in blank_line(line, 1, "f.py:1")[1]]


@pytest.mark.parametrize(
    ("solved", "learner", "answer"),
    [
        ("    idx = (i - step) % N  # BLANK", "    idx = _____  # [1]", "(i - step) % N"),
        ("    backend=\"gloo\",  # BLANK", "    backend=_____,  # [1]", '"gloo"'),
        ("    if 0 <= mb < M:  # BLANK", "    if _____:  # [1]", "0 <= mb < M"),
        ("    while x != y:  # BLANK", "    while _____:  # [1]", "x != y"),
        ("    return x + 1  # BLANK", "    return _____  # [1]", "x + 1"),
        ("    total += x * 2  # BLANK", "    total += _____  # [1]", "x * 2"),
        ("    sampler.set_epoch(epoch)  # BLANK", "    _____  # [1]", "sampler.set_epoch(epoch)"),
        ("    ok = a == b  # BLANK", "    ok = _____  # [1]", "a == b"),
        ("dist.all_reduce(t, op=SUM)  # BLANK", "dist.all_reduce(t, op=_____)  # [1]", "SUM"),
        ("f(x=g(1))  # BLANK", "f(x=_____)  # [1]", "g(1)"),
    ],
)
def test_bare_marker_blanks_the_natural_part(solved, learner, answer):
    """Does a bare marker blank a value, a condition, or else the whole statement?"""
    assert released(solved) == learner
    assert answers(solved) == [answer]


def test_span_blanks_the_middle_of_an_expression():
    """Can a marker blank a span in the middle of an expression, leaving the rest?"""
    line = "    new[dst][idx] = list(chunks[i][idx])  # BLANK `chunks[i]` copy from the sender"
    assert released(line) == "    new[dst][idx] = list(_____[idx])  # [1] copy from the sender"
    assert answers(line) == ["chunks[i]"]


def test_several_spans_are_numbered_in_order():
    """Are two spans on one line two blanks, numbered left to right?"""
    text, blanks = blank_source("x = f(a) + g(b)  # BLANK `g(b)` `f(a)` both calls")
    assert text == "x = _____ + _____  # [1], [2] both calls"
    assert [(b.number, b.answer) for b in blanks] == [(1, "f(a)"), (2, "g(b)")]


def test_hint_stays_as_a_numbered_comment_and_numbers_run_through_the_cell():
    """Do hints survive, numbered across the whole cell?"""
    text, blanks = blank_source("a = 1  # BLANK one\nb = 2\nc = 3  # BLANK three")
    assert text.split("\n") == ["a = _____  # [1] one", "b = 2", "c = _____  # [2] three"]
    assert [(b.number, b.line, b.hint) for b in blanks] == [(1, 1, "one"), (2, 3, "three")]


def test_hash_inside_a_string_is_not_a_marker():
    """Is `# BLANK` inside a string left alone?"""
    assert blank_source('s = "# BLANK"')[1] == []


def test_lines_without_markers_are_unchanged():
    """Are unmarked lines, comments included, left as they are?"""
    source = "x = 1  # a comment\n# BLANKET statement\ny = 2"
    assert blank_source(source) == (source, [])


def test_span_that_matches_nothing_fails_with_file_and_line():
    """Does a span that is not in the line fail the build, naming file and line?"""
    with pytest.raises(MarkerError, match=r"f\.py:7: BLANK `zzz` matches nothing"):
        blank_source("a = 1\nb = x + y  # BLANK `zzz`", "f.py", first_line=6)


def test_span_that_matches_twice_fails():
    """Is an ambiguous span (two places on the line) an error?"""
    with pytest.raises(MarkerError, match="matches 2 places"):
        blank_source("y = x + x  # BLANK `x`")


def test_overlapping_spans_fail():
    """Are overlapping spans an error rather than a garbled line?"""
    with pytest.raises(MarkerError, match="overlap"):
        blank_source("y = abc + d  # BLANK `abc` `bc + d`")


def test_marker_without_code_fails():
    """Is a marker on a comment-only line an error?"""
    with pytest.raises(MarkerError, match="needs code before it"):
        blank_source("    # BLANK")


def test_release_that_no_longer_parses_fails_with_advice():
    """Does a bare marker that cuts a two-line call in half get caught, with the fix
    suggested?"""
    text, _ = blank_source("x = f(1,  # BLANK\n      2)")
    with pytest.raises(MarkerError, match="explicit span"):
        check_released(text, "f.py:3")


def test_a_blank_assigned_to_is_refused():
    """Is a blank as an assignment target refused (it would turn `_____` into a local)?"""
    text, _ = blank_source("def f(b):\n    x[0] = b  # BLANK `x[0]`")
    with pytest.raises(MarkerError, match="assigns to the blank"):
        check_released(text, "f.py:1")


def test_accept_and_reject_lists_stay_out_of_the_released_hint():
    """Do `# ACCEPT` / `# REJECT` lists (for the strength check) never reach the learner?"""
    released, [blank] = blank_source(
        "dst = (r + k) % N  # BLANK k places to the right # ACCEPT `(k + r) % N` # REJECT `r + k`")
    assert released == "dst = _____  # [1] k places to the right"
    assert blank.hint == "k places to the right" and blank.answer == "(r + k) % N"


def test_an_accept_list_without_backticks_is_refused_with_its_place():
    """Is `# ACCEPT` without backticks an error naming the file and line?"""
    with pytest.raises(MarkerError, match="nb.py:3: ACCEPT and REJECT take answers"):
        blank_source("x = 1\ny = 2\nz = x + y  # BLANK hint # ACCEPT y + x", "nb.py")


def test_an_api_clause_takes_no_answers_and_is_kept_apart():
    """Is `# API` read as a clause of its own (the hint before it), refused with answers?"""
    hint, [clause] = split_clauses("reshuffle each epoch # API", "nb.py:4")
    assert hint == "reshuffle each epoch" and clause.kind == "API" and clause.answers == ()
    with pytest.raises(MarkerError, match="nb.py:4: # API takes no answers"):
        split_clauses("hint # API `set_epoch`", "nb.py:4")
