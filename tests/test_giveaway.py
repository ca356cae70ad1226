"""Does the give-away check find every blank a learner could fill by copying what they already
read (the answer itself, or its shape with names changed, or a hint that says it, or one idea
asked again and again), name both places, and leave alone what is fine?"""

import pytest
from rewrites import until_rewritten

from autograder import giveaway
from distlab.source import paths


def toy(tmp_path, *cells, assignment="00_toy"):
    """A solved source made of `cells` (percent-format text each); returns the folder."""
    folder = tmp_path / assignment
    folder.mkdir(parents=True)
    (folder / f"{assignment}.py").write_text("\n\n".join(cells) + "\n")
    return tmp_path


def markdown(text):
    return "# %% [markdown]\n" + "\n".join(f"# {line}" for line in text.split("\n"))


def solution(name, body):
    return f'# %% solution="{name}"\ndef {name}(i, n, step):\n' + body


def report_of(tmp_path, *cells):
    return giveaway.check_assignment("00_toy", toy(tmp_path, *cells))


def kinds(report):
    return [f.kind for f in report.findings]


def test_an_answer_in_the_markdown_above_is_given_away(tmp_path):
    """Does an answer that stands in an earlier markdown cell fail, naming the blank's line and
    the line that shows it?"""
    report = report_of(tmp_path, markdown("The chunk to send is `(i - step) % n`."),
                       solution("send_index", "    return (i - step) % n  # BLANK which chunk?"))
    [finding] = report.findings
    assert finding.kind == "GIVEN AWAY" and finding.fails
    assert finding.where.endswith("00_toy.py:6")  # the blank's line in the solved source
    assert "00_toy.py:2" in finding.detail  # the markdown line
    assert report.failures()


def test_whitespace_does_not_hide_a_copy(tmp_path):
    """Is `(i-step)%n` above a copy of `(i - step) % n`?"""
    report = report_of(tmp_path, "# %%\nx = [(i-step)%n for i in range(4)]",
                       solution("send_index", "    return (i - step) % n  # BLANK which chunk?"))
    assert kinds(report) == ["GIVEN AWAY"]


def test_short_answers_are_not_give_aways_and_later_text_is(tmp_path):
    """Is a lone name left alone, and does an answer shown only after its blank (in a later
    cell, or below it in its own) count: the learner reads on before filling it?"""
    report = report_of(
        tmp_path, markdown("Each rank has a `rank` and sees `n`."),
        solution("send_index", "    return rank  # BLANK who am I?"))
    assert report.findings == [] and report.blanks == 1
    report = report_of(
        tmp_path / "a", solution("send_index", "    return (i - step) % n  # BLANK which chunk?"),
        markdown("The answer was `(i - step) % n`."))
    assert kinds(report) == ["GIVEN AWAY"] and "markdown" in report.findings[0].detail
    report = report_of(
        tmp_path / "b", solution("send_index", "    return (i - step) % n  # BLANK which chunk?\n"
                                               "    # the answer above is (i - step) % n"))
    assert kinds(report) == ["GIVEN AWAY"]


def test_three_tokens_are_enough_to_copy(tmp_path):
    """Is `x.grad` (three tokens, six characters) a copy when it stands on the screen?"""
    report = report_of(tmp_path, markdown("Its gradient is `x.grad`."),
                       solution("send_index", "    return x.grad  # BLANK its gradient"))
    assert kinds(report) == ["GIVEN AWAY"]


def test_what_the_solved_notebook_prints_is_on_the_screen(tmp_path):
    """Does an answer that a check cell prints (in the executed copy) count, placed as an
    output of that cell?"""
    import nbformat

    from autograder import solved

    folder = toy(tmp_path, solution("send_index", "    return (i - step) % n  # BLANK which?"),
                 "# %%\nprint('send chunk (i - step) % n')")
    executed = solved.load("00_toy", folder)
    executed.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                         text="send chunk (i - step) % n\n")]
    executed.cells[1].source = "show()"  # the code does not say it; its output does
    assert giveaway.check_assignment("00_toy", folder).findings != []  # the code cell says it
    (folder / "00_toy" / "00_toy.py").write_text(
        solution("send_index", "    return (i - step) % n  # BLANK which?") + "\n\n# %%\nshow()\n")
    assert giveaway.check_assignment("00_toy", folder).findings == []
    [finding] = giveaway.check_assignment("00_toy", folder, executed=executed).findings
    assert finding.kind == "GIVEN AWAY" and finding.place == "output"


def test_a_distlab_helper_the_notebook_imports_is_on_the_screen(tmp_path):
    """Is a caption drawn by a distlab module the notebook imports from on the screen, and is
    a module it does not import left off?"""
    figure = '3, 8, "cols", "rank r: its columns"'  # show_split's
    assert figure in (giveaway.DISTLAB / "tensor_parallel.py").read_text()
    asked = '    return (3, 8, "cols")  # BLANK `3, 8, "cols"` what the figure shows'
    report = report_of(tmp_path, "# %%\nfrom distlab.tensor_parallel import show_split",
                       solution("caption", asked))
    assert kinds(report) == ["GIVEN AWAY"] and report.findings[0].place == "distlab"
    assert "src/distlab/tensor_parallel.py:" in report.findings[0].detail
    report = report_of(tmp_path / "b", "# %%\nfrom distlab.collectives import show_ring",
                       solution("caption", asked))
    assert report.findings == []


def test_an_api_blank_is_reported_apart_and_never_fails(tmp_path):
    """Is a blank marked # API reported as API, even with its answer on the screen above?"""
    report = report_of(tmp_path, markdown("Call `sampler.set_epoch(epoch)` each epoch."),
                       solution("epoch", "    sampler.set_epoch(epoch)  # BLANK reshuffle # API"))
    assert kinds(report) == ["API"] and report.failures() == []


def test_the_lines_above_in_its_own_cell_count(tmp_path):
    """Is an unblanked twin line above the blank, in the same cell, a give-away?"""
    body = ("    first = (i - step) % n\n"
            "    return (i - step) % n  # BLANK which chunk?")
    assert kinds(report_of(tmp_path, solution("send_index", body))) == ["GIVEN AWAY"]


def test_the_same_shape_needs_a_reason(tmp_path):
    """Is `dist.all_reduce(grad, op=SUM)` asked after `dist.all_reduce(t, op=SUM)` was shown
    reported, and does a reason in its marker let it stay?"""
    shown = "# %%\nimport torch.distributed as dist\ndist.all_reduce(t, op=dist.ReduceOp.SUM)"
    asked = ("    dist.all_reduce(grad, op=dist.ReduceOp.SUM)  "
             "# BLANK `dist.all_reduce(grad, op=dist.ReduceOp.SUM)` sum the gradients")
    report = report_of(tmp_path, shown, solution("reduce", asked))
    assert kinds(report) == ["SAME SHAPE"] and report.failures()
    assert "00_toy.py:3" in report.findings[0].detail
    report = report_of(tmp_path / "b", shown,
                       solution("reduce", asked + " # SHAPE `the API box shows the call`"))
    assert kinds(report) == ["SAME SHAPE"] and report.failures() == []
    assert report.findings[0].reason == "the API box shows the call"


def test_the_api_keeps_its_spelling_in_a_shape(tmp_path):
    """Are attribute names kept: `dist.broadcast(t, src=0)` is not the shape of
    `dist.all_reduce(grad, op=...)`?"""
    shown = "# %%\nimport torch.distributed as dist\ndist.broadcast(t, dist.ReduceOp.SUM)"
    asked = ("    dist.all_reduce(grad, dist.ReduceOp.SUM)  "
             "# BLANK `dist.all_reduce(grad, dist.ReduceOp.SUM)` sum the gradients")
    assert report_of(tmp_path, shown, solution("reduce", asked)).findings == []


def test_more_same_shapes_than_allowed_fail(tmp_path):
    """With a reason each, do more than MAX_SHAPES same-shape blanks still fail the notebook?"""
    shown = "# %%\nimport torch.distributed as dist\ndist.all_reduce(t, op=dist.ReduceOp.SUM)"
    cells = [shown] + [
        solution(f"reduce_{k}", f"    dist.all_reduce(g{k}, op=dist.ReduceOp.SUM)  # BLANK "
                                f"`dist.all_reduce(g{k}, op=dist.ReduceOp.SUM)` sum "
                                "# SHAPE `shown once`")
        for k in range(giveaway.MAX_SHAPES + 1)]
    report = report_of(tmp_path, *cells)
    assert len(report.of("SAME SHAPE")) == giveaway.MAX_SHAPES + 1
    assert any("at most" in line for line in report.failures())


def test_a_hint_that_states_the_answer_fails(tmp_path):
    """Does a hint that holds the answer fail, even a short one?"""
    report = report_of(tmp_path, solution("start", "    return 0  # BLANK start at 0"))
    assert kinds(report) == ["HINT"]


def test_an_idea_asked_again_and_again_is_reported(tmp_path):
    """Is one idea asked more than MAX_REPEATS times reported, with every place, also when
    its names change and a trailing constant is added?"""
    answers = ["(i - step) % n", "(rank - k) % n", "(i - step + 1) % n"]
    assert giveaway.MAX_REPEATS == len(answers) - 1
    cells = [solution(f"index_{k}", f"    return {answer}  # BLANK which chunk?")
             for k, answer in enumerate(answers)]
    report = report_of(tmp_path, *cells)
    [finding] = report.of("REPEATED")
    assert finding.fails and finding.detail.count("00_toy.py:") == len(answers)
    assert report_of(tmp_path / "b", *cells[:2]).of("REPEATED") == []


def test_an_idea_drops_only_a_trailing_constant():
    """`(i - step + 1) % N` is `(i - step) % N`; `(i - 1 - step) % N` is not."""
    def of(code):
        return giveaway.idea(giveaway.shape(giveaway.tokens(code), set()))

    assert of("(i - step + 1) % N") == of("(i - step) % N") == of("(r - k - 2) % M")
    assert of("(i - 1 - step) % N") != of("(i - step) % N")


def test_the_shape_reason_is_not_an_answer_for_the_strength_check():
    """Does a `# SHAPE` clause stay out of the ACCEPT/REJECT lists?"""
    from autograder.mutants import answer_lists

    line = "x = f(a)  # BLANK hint # SHAPE `why` # REJECT `g(a)`"
    assert answer_lists(line, 1) == [((), ("g(a)",))]


@pytest.mark.parametrize("assignment", [until_rewritten(a) for a in paths.assignment_ids()])
def test_no_notebook_gives_a_blank_away(assignment):
    """Does every notebook of the course pass the give-away check?"""
    report = giveaway.check_assignment(assignment)
    assert report.failures() == [], report.text()
