"""Notebook 04 (tensor parallelism): what is particular to it: the release earning nothing, f and
g costing only their own points, a missing all-reduce failing in seconds, the judge, and the
notebook's pictures and byte counter. (What every exercise promises: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_tensor_parallel.py -q   (about two minutes on 2 cores)
"""

import warnings

import matplotlib
import pytest

from autograder import reference

matplotlib.use("Agg")

from notebook_testing import (  # noqa: F401 (stop_ranks: a fixture)
    Notebook,
    assess,
    fails,
    reference_earns_every_point,
    released_earns_nothing,
    stop_ranks,
)

ASSIGNMENT = "04_tensor_parallel"
nb = Notebook(ASSIGNMENT)
# tp_region's blank with no f: the gradient of x is never summed over the ranks' branches
NO_F = ("region_in = lambda x, w: F.linear(x, shard(w, rank, world_size, 0)); "
        "region_out = lambda h, w: g.apply(F.linear(h, shard(w, rank, world_size, 1)))")
NAMES = ["column_parallel_forward", "row_parallel_forward", "row_parallel_backward",
         "megatron_f_g", "tp_region", "tp_attention", "mlp_bytes", "sp_costs"]


# ---------------------------------------------------------------- references pass


@pytest.mark.parametrize("name", NAMES)
def test_reference_earns_every_point_and_the_release_none(name):
    """Graded in the kernel, does the solved function earn every point, and the released one
    (every blank `_____`) none, reported as not filled?"""
    reference_earns_every_point(name)
    released_earns_nothing(nb, name)


# ---------------------------------------------------------------- wrong and right answers


def test_a_wrong_f_and_g_costs_only_their_own_points():
    """With a wrong f in the notebook, do tp_region and tp_attention still pass (their tests use
    a correct f and g), and with a wrong region_out, tp_attention (its test uses a correct
    tp_region)?"""
    swapped = nb.variant("megatron_f_g", 1, "f_backward, g_backward = "
                                           "(lambda grad: grad), all_reduce_sum")
    no_f = nb.variant("tp_region", 1, NO_F)
    for name in ("tp_region", "tp_attention"):
        fn = reference.reference(name)
        globs = dict(fn.__globals__, megatron_f_g=swapped, tp_region=no_f)
        assert fails(name, type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)) == ""


def test_a_missing_all_reduce_on_some_ranks_fails_in_seconds():
    """Does a collective that only rank 0 calls (a deadlock) fail its case on the ranks' short
    timeout, saying that a rank waited, instead of stalling the grade?"""
    fn = nb.variant("row_parallel_forward", 1,
                    "partial = F.linear(x_shard, w_shard); "
                    "dist.all_reduce(partial) if rank == 0 else None; y = partial + bias")
    complaint = fails("row_parallel_forward", fn)
    assert complaint.startswith("world_size=2") and "rank 0" in complaint, complaint


@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("tp_region", 1, NO_F),
    ("megatron_f_g", 1, "f_backward, g_backward = all_reduce_sum, all_reduce_sum"),
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does one wrong blank cost exactly its share of the points, and is it named?"""
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    earned, possible, report = nb.judge_verdict(name, number, wrong)
    assert earned == possible - possible / len(reference.locate(name)[2]), report  # its share
    assert f"looks wrong: [{number}]" in "\n".join(report), report


@pytest.mark.parametrize("name", ["mlp_bytes", "sp_costs"])
def test_the_judge_grades_the_predictions_with_plain_numbers(name, monkeypatch):
    """Graded by the judge, does each solved prediction earn its point (its hidden test sends
    only plain numbers to the learner's process: non-integer sizes, not symbols, tell a formula
    from a measurement), and does a fill that reads a table of the small cases earn nothing?"""
    from autograder import grade_cell
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    [verdict] = grade_cell.verdicts(nb.solved_cells(), [(name, None)], "test")
    assert verdict.earned == verdict.possible == 1, verdict.report
    wanted = {"mlp_bytes": "yours, rows_twice = {(2, 8, 16, 64, 4): (512.0, 1280.0)}"
                           ".get((n, b, d, h, e), (0, 0))",
              "sp_costs": "sent, held = {(2, 8, 2, 16, 4): (1024.0, 512.0)}"
                          ".get((n, s, b, d, e), (0, 0))"}[name]
    earned, _, report = nb.judge_verdict(name, 1, wanted)
    assert earned == 0, report


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
        dist.reduce(torch.ones(4), dst=0)  # a chain reduce, the broadcast's mirror: S
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()  # no collective: nothing recorded
    return calls, dist.all_reduce is real, t.tolist()


def test_count_collectives_records_each_call_with_its_ring_bytes():
    """On 4 ranks, does count_collectives record each collective with the bytes of its whole
    tensor and a ring's bytes per rank (2(N-1)/N S for an all-reduce, (N-1)/N S for an
    all-gather or reduce-scatter, S for a reduce down a chain), and put dist back afterwards?"""
    from distlab import run

    for calls, restored, t in run(_count_on_rank, world_size=4):
        assert restored and t == [4.0] * 6
        assert [(c.name, c.nbytes, c.sent, c.backward) for c in calls] == [
            ("all_reduce", 24, 36.0, False),
            ("all_gather", 4 * 48, 3 * 48.0, False),
            ("all_gather_single", 64, 48.0, False),
            ("reduce_scatter_single", 64, 48.0, False),
            ("reduce", 16, 16.0, False)]
        assert calls[1].shape == (4, 2, 3)


@pytest.mark.parametrize("kind", ["column", "row"])
def test_split_pictures_draw_without_warnings_and_describe_themselves(kind, monkeypatch):
    """Does every split picture draw (for 1, 2 and 4 ranks) without a warning, with its
    description, and does an unknown kind say so?"""
    from distlab import collectives, tensor_parallel

    shown = []
    monkeypatch.setattr(collectives, "_show", lambda fig, text: shown.append(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 2, 4):
            tensor_parallel.show_split(kind, world_size=n)
        tensor_parallel.show_matrices([("x", 3, 4, None, "whole"), ("W", 8, 4, "rows", "",
                                        ["a", "b"]), ("y", 3, 4, "partial", "")],
                                      world_size=2, title="t", description="d" * 90)
        tensor_parallel.show_comm_table([("tensor parallel", "2 all-reduce", "2 all-reduce")])
    collectives.plt.close("all")
    assert len(shown) == 5 and all(len(text) > 80 for text in shown)
    assert "forward 2 all-reduce, backward 2 all-reduce" in shown[-1]
    with pytest.raises(ValueError, match="'column' or 'row'"):
        tensor_parallel.show_split("mlp")


def test_the_helpers_hold_no_answer():
    """Does distlab.tensor_parallel stay free of the exercises' answers (no slicing of weights,
    no parallel layer, no collective named in the situation pictures)?"""
    import inspect

    from distlab import tensor_parallel

    text = inspect.getsource(tensor_parallel)
    for answer in ("weight[", "chunk(", "narrow(", "autograd.Function", "F.linear"):
        assert answer not in text, answer
    # the pictures show who holds what, never the collective that comes next (BLANKS.md)
    layout = inspect.getsource(tensor_parallel._layout).lower()
    for collective in ("all-gather", "all-reduce", "allreduce", "all_reduce", "all_gather",
                       "reduce-scatter", "partial"):
        assert collective not in layout, collective
