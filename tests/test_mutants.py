"""Which wrong answers does the blank-strength check make from a reference answer, and how does a
solved line list accepted and rejected answers?"""

import ast
import enum

import pytest

from autograder.mutants import (
    Mutant,
    answer_lists,
    generate,
    merge,
    normalized,
    scope_of,
)
from distlab.source.markers import Clause, MarkerError, split_clauses


def scope(code: str, namespace=None):
    """The Scope of the first function in `code`."""
    return scope_of(ast.parse(code).body[0], namespace)


def made(answer, code="def f():\n    pass", before="", after="", namespace=None):
    """{mutant text: kind} for `answer` in the function `code`."""
    return {m.text: m.kind for m in generate(answer, scope(code, namespace), before, after)}


@pytest.mark.parametrize(
    ("answer", "wrong", "kind"),
    [
        ("x + 1", "x + 2", "off by one"),
        ("x + 1", "x + 0", "off by one"),
        ("(i + 1) % n", "(i - 1) % n", "other neighbour"),
        ("(i - 1) % n", "(i + 1) % n", "other neighbour"),
        ("a + b", "a - b", "`-` for `+`"),
        ("a - b", "a + b", "`+` for `-`"),
        ("a * b", "a / b", "`/` for `*`"),
        ("a / b", "a * b", "`*` for `/`"),
        ("a // b", "a / b", "`/` for `//`"),
        ("(x) % N", "x", "dropped modulo"),
        ("a - b", "b - a", "swapped operands"),
        ("a < b", "b < a", "swapped operands"),
        ("a < b", "a <= b", "boundary"),
        ("a == b", "a != b", "negated comparison"),
        ("f(a, b)", "f(b, a)", "swapped arguments"),
        ("(a, b)", "(b, a)", "swapped elements"),
        ("f(x)", "x", "dropped call"),
        ("t.clone()", "t", "dropped method call"),
        ("list(t.detach())", "list(t)", "dropped method call"),
        ("True", "False", "True/False"),
        ("False", "True", "True/False"),
        ("a and b", "a or b", "and/or"),
        ("x if c else y", "y if c else x", "swapped branches"),
        ("-x", "x", "dropped sign"),
        ("not done", "done", "negated condition"),
    ],
)
def test_each_kind_of_mutant_is_made(answer, wrong, kind):
    """Does each kind of plausible mistake come out of a tiny answer?"""
    assert made(answer).get(wrong) == kind


def test_a_condition_is_negated():
    """Is the condition of an `if` or `while` negated, even a bare name?"""
    assert made("x < n", before="    if ")["not x < n"] == "negated condition"
    assert made("ready", before="    while ")["not ready"] == "negated condition"
    assert "not x" not in made("x", before="    y = ")


def test_other_names_are_of_the_same_kind():
    """Are names swapped only for names the function uses the same way (numbers for numbers,
    containers for containers)?"""
    code = "def f(i, step, N, chunks):\n    return chunks[(i - step) % N]"
    mutants = made("(i - step) % N", code)
    assert mutants["(step - step) % N"] == "other name"
    assert mutants["(i - step) % step"] == "other name"
    assert not any("chunks" in text for text in mutants)
    assert made("chunks[i]", code + "\n    rows = [[1]]\n    return rows[0]")["rows[i]"] == \
        "other name"


def test_an_index_name_is_off_by_one():
    """Is a name used as an index also tried one off?"""
    code = "def f(bounds, r):\n    return bounds[r] + r"
    mutants = made("bounds[r]", code)
    assert mutants["bounds[r + 1]"] == mutants["bounds[r - 1]"] == "off by one"


def test_a_call_is_replaced_by_another_call_of_the_function():
    """Is `len(x)` also tried as the function's other calls (`sum(x)`)?"""
    assert made("len(x)", "def f(x):\n    return len(x) + sum(x)")["sum(x)"] == "other call"


def test_swapping_a_symmetric_call_is_not_a_mutant():
    """Is `max(b, a)` left out (it is the same answer as `max(a, b)`)?"""
    assert "max(b, a)" not in made("max(a, b)")
    assert "a + b" not in made("b + a")


def test_a_string_is_replaced_by_another_string_of_the_function():
    """Is `"sum"` tried as the function's other strings, never its docstring?"""
    code = 'def f(op):\n    """Docs."""\n    return op == "mean" or op == "sum"'
    mutants = made('"sum"', code)
    assert mutants["'mean'"] == "other string"
    assert "'Docs.'" not in mutants


def test_a_method_name_blank_gets_other_methods_and_its_in_place_twin():
    """With `recv._____(x)` blanked, are `add` (out of place) and the function's other methods
    on locals tried, but not functions of a module?"""
    code = "def f(recv, x):\n    recv.add_(x)\n    recv.div_(2)\n    torch.zeros(3)"
    mutants = made("add_", code, before="    recv.", after="(x)")
    assert mutants == {"div_": "other method", "add": "in-place twin"}


class Op(enum.Enum):
    SUM = 0
    MAX = 1
    MIN = 2


def test_an_enum_member_is_replaced_by_its_siblings():
    """Is `Op.SUM` tried as the enum's other members (found in the notebook's names)?"""
    mutants = made("Op.SUM", "def f(x):\n    return g(x, Op.SUM)", namespace={"Op": Op})
    assert mutants["Op.MAX"] == mutants["Op.MIN"] == "other member"


def test_call_arguments_and_slices_are_answers_too():
    """Do spans that are not an expression on their own (`"gloo", rank=rank`, `lo:hi`) get
    mutants?"""
    assert made('"gloo", rank=rank', "def f(rank, size):\n    g(rank + size)").get(
        "'gloo', rank=size") == "other name"
    assert made("lo:hi", "def f(lo, hi, x):\n    return x[lo:hi] + lo").get("hi:hi")


def test_mutants_are_unique_and_never_the_answer():
    """Is each mutant made once, and is the answer itself, however spaced, never one?"""
    for answer in ("(i + 1) % n", "(i+1)%n", "((i + 1) % n)"):
        texts = [m.text for m in generate(answer, scope("def f(i, n, k):\n    return i * n * k"))]
        assert len(texts) == len(set(texts))
        assert "(i + 1) % n" not in texts and answer not in texts


def test_an_answer_that_does_not_parse_gives_no_mutant():
    """Is an answer that is no Python at all left without mutants (and so flagged)?"""
    assert generate("for x in") == []


def test_a_statement_can_be_dropped():
    """Is a blank that is a whole statement also tried as `pass`?"""
    assert made("sampler.set_epoch(epoch)", before="    ")["pass"] == "dropped statement"
    assert "pass" not in made("sampler.set_epoch(epoch)", before="    x = ")


# ---------------------------------------------------------------- ACCEPT / REJECT


def test_clauses_are_split_from_the_hint():
    """Does the learner's hint end where `# ACCEPT` or `# REJECT` begins?"""
    hint, clauses = split_clauses(" which chunk? # ACCEPT `a` `b`  # REJECT `c` ")
    assert hint == "which chunk?"
    assert clauses == [Clause("ACCEPT", None, ("a", "b")), Clause("REJECT", None, ("c",))]
    assert split_clauses(" just a hint ") == ("just a hint", [])
    assert split_clauses(" # REJECT 2 `x`")[1] == [Clause("REJECT", 2, ("x",))]


def test_a_clause_without_backticks_is_an_error():
    """Is `# ACCEPT a` (no backticks) refused with the file and line?"""
    with pytest.raises(MarkerError, match=r"f\.py:3: ACCEPT and REJECT take answers"):
        split_clauses("hint # ACCEPT a", "f.py:3")


def test_answer_lists_are_per_blank_of_the_line():
    """On a line with two blanks, does `# ACCEPT 2` go to the second?"""
    line = "x = f(a) + g(b)  # BLANK `f(a)` `g(b)` both # ACCEPT 2 `g(b=b)` # REJECT 1 `f(b)`"
    assert answer_lists(line, 2) == [((), ("f(b)",)), (("g(b=b)",), ())]
    assert answer_lists("y = (i + 1) % n  # BLANK next # ACCEPT `(1 + i) % n`", 1) == [
        (("(1 + i) % n",), ())]
    assert answer_lists("y = 1  # BLANK hint", 1) == [((), ())]


def test_answer_lists_name_the_blank_on_a_line_with_several():
    """Is a clause without a number refused on a line with two blanks, and one whose number is
    past the line's blanks?"""
    line = "x = f(a) + g(b)  # BLANK `f(a)` `g(b)` # ACCEPT `g(b=b)`"
    with pytest.raises(MarkerError, match="f.py:1: the line has 2 blanks"):
        answer_lists(line, 2, "f.py:1")
    with pytest.raises(MarkerError, match="ACCEPT 3: the line has 2 blank"):
        answer_lists(line.replace("ACCEPT", "ACCEPT 3"), 2)


def test_merge_marks_accepted_mutants_and_adds_hand_written_ones():
    """Is a generated mutant that is also an ACCEPT expected to pass, is a generated mutant
    written by hand marked `written` (the sampled check runs every written one and drops the
    generated ones it did not pick: a planted ACCEPT `(i + 2) % N` that fails was once never
    run), and are REJECT and ACCEPT answers added once?"""
    mutants = merge([Mutant("(1 + i) % n", "swapped operands"), Mutant("i - 1", "x"),
                     Mutant("i", "other name")],
                    accepted=["(1+i) % n", "(i + n + 1) % n"], rejected=["i - 1", "0"])
    assert mutants == [Mutant("(1 + i) % n", "swapped operands", True, True),
                       Mutant("i - 1", "x", False, True), Mutant("i", "other name"),
                       Mutant("0", "REJECT", False, True),
                       Mutant("(i + n + 1) % n", "ACCEPT", True, True)]
    from autograder.strength.plan import sampled

    assert [m.text for m in sampled(mutants) if not m.by_hand] in (["i"], [])
    assert normalized("( i+1 )%n") == "(i + 1) % n"
