"""Notebook 04 (tensor parallelism): do the reference answers pass their hidden tests, do answers
with one wrong blank fail them (and get that blank named), do answers written another correct
way pass, and do the notebook's pictures and byte counter work?

Run: .venv/bin/python -m pytest tests/test_tensor_parallel.py -q   (about two minutes on 2 cores)
"""

import warnings

import matplotlib
import pytest

from autograder import reference

matplotlib.use("Agg")

from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

ASSIGNMENT = "04_tensor_parallel"
nb = Notebook(ASSIGNMENT)
NAMES = ["column_parallel_forward", "row_parallel_forward", "column_parallel_backward",
         "row_parallel_backward", "megatron_f_g", "tp_mlp", "tp_attention", "sp_all_reduce",
         "sp_f_g"]

# Plausible mistakes, at least one per blank: (function, blank number, what a learner might write).
WRONG = [
    ("column_parallel_forward", 1, "x @ w_shard + b_shard"),  # .t() dropped
    ("column_parallel_forward", 1, "x @ w_shard.t()"),  # no bias
    ("column_parallel_forward", 2, "pass"),  # no collective
    ("column_parallel_forward", 2, "dist.all_reduce(y_shard)"),
    ("column_parallel_forward", 3, "torch.cat(pieces, dim=0)"),
    ("column_parallel_forward", 3, "torch.cat(pieces, dim=1)"),  # right for 2-D inputs only
    ("column_parallel_forward", 3, "y_shard"),
    ("row_parallel_forward", 1, "x_shard @ w_shard.t() + bias"),  # the bias on every rank
    ("row_parallel_forward", 1, "x_shard @ w_shard"),
    ("row_parallel_forward", 2, "pass"),  # the all-reduce dropped
    ("row_parallel_forward", 2, "dist.all_reduce(partial, op=dist.ReduceOp.MAX)"),
    ("row_parallel_forward", 3, "partial"),  # the bias forgotten
    ("row_parallel_forward", 3, "partial + bias * world_size"),
    ("column_parallel_backward", 1, "x.t() @ grad_y_shard"),
    ("column_parallel_backward", 1, "grad_y_shard @ x.t()"),
    ("column_parallel_backward", 2, "grad_y_shard @ w_shard.t()"),
    ("column_parallel_backward", 3, "pass"),
    ("column_parallel_backward", 3, "dist.all_reduce(grad_w)"),  # seed 002's all-reduce
    ("row_parallel_backward", 1, "x_shard.t() @ grad_y"),
    ("row_parallel_backward", 2, "grad_y @ w_shard.t()"),
    ("row_parallel_backward", 3, "pass"),
    ("row_parallel_backward", 3, "dist.all_reduce(grad_x_shard)"),
    ("megatron_f_g", 1, "all_reduce_sum(x)"),
    ("megatron_f_g", 2, "grad"),
    ("megatron_f_g", 3, "partial"),
    ("megatron_f_g", 4, "all_reduce_sum(grad)"),
    ("tp_mlp", 1, "shard(w2, rank, world_size, dim=0)"),
    ("tp_mlp", 2, "F.gelu(F.linear(x, w1_shard, b1_shard))"),  # no f
    ("tp_mlp", 2, "F.gelu(F.linear(g.apply(x), w1_shard, b1_shard))"),
    ("tp_mlp", 3, "F.linear(hidden, w2_shard) + b2"),  # no g
    ("tp_mlp", 3, "g.apply(F.linear(hidden, w2_shard, b2))"),  # the bias N times
    ("tp_attention", 1, "slice(rank * local_heads, (rank + 1) * local_heads)"),
    ("tp_attention", 1, "slice((rank + 1) * local_heads * head_dim, "
                        "(rank + 2) * local_heads * head_dim)"),
    ("tp_attention", 2, "wo[rows]"),
    ("tp_attention", 2, "wo"),
    ("sp_all_reduce", 1, "dist.all_reduce(t)"),
    ("sp_all_reduce", 1, "dist.reduce_scatter_single(part, t, op=dist.ReduceOp.MAX)"),
    ("sp_all_reduce", 2, "dist.all_reduce(part)"),
    ("sp_all_reduce", 2, "total.copy_(t)"),
    ("sp_f_g", 1, "grad"),
    ("sp_f_g", 1, "all_reduce_sum(grad)"),
    ("sp_f_g", 2, "grad"),
    ("sp_f_g", 2, "scatter_rows(grad)"),
]

# Correct answers written another way: they must earn the points too.
RIGHT = [
    ("column_parallel_forward", 1, "F.linear(x, w_shard, b_shard)"),
    ("column_parallel_forward", 2, "dist.all_gather(pieces, y_shard.contiguous())"),
    ("column_parallel_forward", 3, "torch.cat(pieces, dim=x.dim() - 1)"),
    ("row_parallel_forward", 1, "F.linear(x_shard, w_shard)"),
    ("row_parallel_forward", 2, "dist.all_reduce(partial)"),
    ("row_parallel_forward", 3, "bias + partial"),
    ("column_parallel_backward", 1, "(x.t() @ grad_y_shard).t()"),
    ("column_parallel_backward", 3, "dist.all_reduce(grad_x)"),
    ("row_parallel_backward", 3, "dist.all_gather(pieces, grad_x_shard.contiguous())"),
    ("megatron_f_g", 1, "x.clone()"),
    ("megatron_f_g", 4, "grad.clone()"),
    ("tp_mlp", 1, "w2.chunk(world_size, dim=1)[rank]"),
    ("tp_mlp", 2, "F.gelu(f.apply(x) @ w1_shard.t() + b1_shard)"),
    ("tp_attention", 1, "slice(rank * x.shape[-1] // world_size, "
                        "(rank + 1) * x.shape[-1] // world_size)"),
    ("sp_all_reduce", 1, "dist.reduce_scatter_single(part, t)"),
    ("sp_f_g", 1, "scatter_rows(grad.clone())"),
]


# ---------------------------------------------------------------- references pass


@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_its_hidden_test(name, seed, capfd):
    """Does the solved answer pass its hidden test on 1, 2 and 4 ranks, without a warning and
    without writing to stderr?"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fails(name, reference.reference(name), seed) == ""
    assert capfd.readouterr().err == ""


def test_every_learner_function_has_a_hidden_test_and_points_equal_blanks():
    """Is every solution cell one function, graded by a test cell worth one point per blank,
    with 15 to 25 blanks in the notebook?"""
    units = nb.graded_units()
    assert list(units) == NAMES
    assert 15 <= sum(len(blanks) for blanks in units.values()) <= 25


@pytest.mark.parametrize("name", NAMES)
def test_reference_earns_every_point_and_the_release_none(name):
    """Graded in the kernel, does the solved function earn every point, and the released one
    (every blank `_____`) none, reported as not filled?"""
    earned, possible, report = assess(reference.reference(name), name)
    assert earned == possible == len(reference.locate(name)[2]), report
    earned, possible, report = assess(nb.released(name), name)
    assert earned == 0 and possible > 0, report
    assert any("not filled yet" in line for line in report), report


# ---------------------------------------------------------------- wrong and right answers


@pytest.mark.parametrize(("name", "number", "wrong"), WRONG,
                         ids=[f"{n}-{k}-{w}" for n, k, w in WRONG])
def test_one_wrong_blank_fails_the_hidden_test(name, number, wrong):
    """Does an answer with this one wrong blank fail its hidden test, with a message that names
    the case and not the answer?"""
    complaint = fails(name, nb.variant(name, number, wrong))
    assert complaint
    assert complaint.startswith("world_size="), complaint
    answer = reference.locate(name)[2][number - 1].answer
    assert answer.isidentifier() or answer not in complaint  # ("grad" is a word, too)


def test_every_blank_has_a_wrong_variant():
    """Is every blank of the notebook covered by a deliberately wrong variant above?"""
    covered = {(name, number) for name, number, _ in WRONG}
    for name in NAMES:
        assert {(name, b.number) for b in reference.locate(name)[2]} <= covered, name


@pytest.mark.parametrize(("name", "number", "right"), RIGHT,
                         ids=[f"{n}-{k}-{r}" for n, k, r in RIGHT])
def test_another_correct_answer_passes(name, number, right):
    """Does a correct answer written differently from the reference pass?"""
    assert fails(name, nb.variant(name, number, right)) == ""


@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("column_parallel_forward", 2, "dist.all_reduce(y_shard)"),
    ("row_parallel_forward", 1, "x_shard @ w_shard.t() + bias"),
    ("column_parallel_backward", 3, "dist.all_reduce(grad_w)"),
    ("megatron_f_g", 2, "grad"),
    ("tp_attention", 2, "wo[rows]"),
])
def test_grading_names_the_wrong_blank(name, number, wrong):
    """Does grading take exactly that blank's point and name it as the one that looks wrong?"""
    earned, possible, report = assess(nb.variant(name, number, wrong), name)
    assert earned == possible - 1, report
    (line,) = [line for line in report if "looks wrong" in line]
    assert f"[{number}]" in line and line.count("[") == 1, report


def test_a_wrong_f_and_g_costs_only_their_own_points():
    """With f and g swapped in the notebook, do tp_mlp and tp_attention still pass (their
    tests use a correct f and g)?"""
    swapped = nb.variant("megatron_f_g", 1, "all_reduce_sum(x)")
    for name in ("tp_mlp", "tp_attention"):
        fn = reference.reference(name)
        globs = dict(fn.__globals__, megatron_f_g=swapped)
        assert fails(name, type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)) == ""


def test_a_missing_all_reduce_on_some_ranks_fails_in_seconds():
    """Does a collective that only rank 0 calls (a deadlock) fail its case on the ranks' short
    timeout, saying that a rank waited, instead of stalling the grade?"""
    fn = nb.variant("row_parallel_forward", 2,
                 "dist.all_reduce(partial) if rank == 0 else None")
    complaint = fails("row_parallel_forward", fn)
    assert complaint.startswith("world_size=2") and "rank 0" in complaint, complaint



@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("tp_mlp", 3, "F.linear(hidden, w2_shard) + b2"),  # with the judge's trusted f and g
    ("megatron_f_g", 3, "partial"),
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does one wrong blank cost exactly one point, and is it named?"""
    from autograder import judge
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    blank = reference.locate(name)[2][number - 1]

    def edit(code):
        if f"def {name}(" not in code:
            return code
        lines = code.split("\n")
        row = next(i for i, line in enumerate(lines) if "BLANK" in line and blank.hint in line)
        code_part, marker = lines[row].split("# BLANK", 1)
        lines[row] = code_part.replace(blank.answer, wrong, 1) + "# BLANK" + marker
        return "\n".join(lines)

    [(earned, possible, report)] = judge.verdicts(nb.solved_cells(edit), [(name, None)], "test")
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


# ---------------------------------------------------------------- distlab.tensor_parallel


def _count_on_rank(rank, world_size):
    import torch
    import torch.distributed as dist

    from distlab.tensor_parallel import count_collectives

    real = dist.all_reduce
    with count_collectives() as calls:
        t = torch.ones(6)
        dist.all_reduce(t)
        pieces = [torch.empty(2, 3, dtype=torch.float64) for _ in range(world_size)]
        dist.all_gather(pieces, torch.ones(2, 3, dtype=torch.float64))
        whole = torch.empty(4 * world_size)
        dist.all_gather_single(whole, torch.ones(4))
        part = torch.empty(4)
        dist.reduce_scatter_single(part, whole, op=dist.ReduceOp.SUM)
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()  # no collective: nothing recorded
    return calls, dist.all_reduce is real, t.tolist()


def test_count_collectives_records_each_call_with_its_ring_bytes():
    """On 4 ranks, does count_collectives record each collective with the bytes of its whole
    tensor and a ring's bytes per rank (2(N-1)/N S for an all-reduce, (N-1)/N S for an
    all-gather or reduce-scatter), and put dist back afterwards?"""
    from distlab import run

    for calls, restored, t in run(_count_on_rank, world_size=4):
        assert restored and t == [4.0] * 6
        assert [(c.name, c.nbytes, c.sent, c.backward) for c in calls] == [
            ("all_reduce", 24, 36.0, False),
            ("all_gather", 4 * 48, 3 * 48.0, False),
            ("all_gather_single", 64, 48.0, False),
            ("reduce_scatter_single", 64, 48.0, False)]
        assert calls[1].shape == (4, 2, 3)


@pytest.mark.parametrize("kind", ["column", "row", "mlp", "attention"])
def test_split_pictures_draw_without_warnings_and_describe_themselves(kind, monkeypatch):
    """Does every split picture draw (for 1, 2 and 4 ranks) without a warning, and does an
    impossible head split say so?"""
    from distlab import collectives, tensor_parallel

    shown = []
    monkeypatch.setattr(collectives, "_show", lambda fig, text: shown.append(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 2, 4):
            tensor_parallel.show_split(kind, world_size=n, num_heads=8)
        tensor_parallel.show_comm_table([("tensor parallel", "2 all-reduce", "2 all-reduce")])
    collectives.plt.close("all")
    assert len(shown) == 4 and all(len(text) > 80 for text in shown)
    assert "forward 2 all-reduce, backward 2 all-reduce" in shown[-1]
    with pytest.raises(ValueError, match="cannot be split"):
        tensor_parallel.show_split("attention", world_size=4, num_heads=6)


def test_the_helpers_hold_no_answer():
    """Does distlab.tensor_parallel stay free of the exercises' answers (no slicing of weights,
    no parallel layer)?"""
    import inspect

    from distlab import tensor_parallel

    text = inspect.getsource(tensor_parallel)
    for answer in ("weight[", "chunk(", "narrow(", "autograd.Function", "F.linear"):
        assert answer not in text, answer
