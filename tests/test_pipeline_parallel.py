"""Notebook 05 (pipeline parallelism): what is particular to it: the release earning nothing, the
judge, the simulator's numbers against the formulas, and the reference orders against what
torch.distributed.pipelining runs. (What every exercise promises: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_pipeline_parallel.py -q   (about 45 s on 2 idle cores)
"""

import sys
import warnings

import cloudpickle
import pytest
from notebook_testing import (  # noqa: F401 (stop_ranks: a fixture)
    Notebook,
    assess,
    fails,
    reference_earns_every_point,
    released_earns_nothing,
    stop_ranks,
)

from autograder import reference

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # rank functions travel by value

ASSIGNMENT = "05_pipeline_parallel"
nb = Notebook(ASSIGNMENT)


def fails_quietly(name, fn, seed=0):
    """fails(), ignoring what a wrong answer warns (grading hides that too)."""
    return fails(name, fn, seed, ignore_warnings=True)


SIMULATED = ["gpipe_table", "one_f_one_b_order", "interleaved_order", "zb_h1_order",
             "predicted_activation_bytes"]
REAL_RANKS = ["run_stage", "pipelining_step", "activation_bytes"]


# ---------------------------------------------------------------- wrong blanks fail


@pytest.mark.parametrize("name", SIMULATED + REAL_RANKS)
def test_reference_earns_every_point_and_the_release_none(name):
    """Graded in the kernel, does the solved function earn every point, and the released one
    (every blank `_____`) none, reported as not filled?"""
    reference_earns_every_point(name)
    released_earns_nothing(nb, name)


@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("zb_h1_order", 1, "len(waiting) > 0"),  # the judge patches in a correct 1F1B
    ("run_stage", 2, "x, y = stash[mb]; y.backward(None if last else receive(nxt, mb)); "
                     "send(x.grad, prev, mb)"),  # on ranks in the judge's runner
    ("activation_bytes", 1, "h = block(h)"),  # counted on a rank of the judge's runner
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does one wrong blank cost exactly that blank's point?"""
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    earned, possible, report = nb.judge_verdict(name, number, wrong)
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


def test_a_broken_one_f_one_b_does_not_cost_zb_h1():
    """With a wrong one_f_one_b_order in the notebook, does zb_h1_order still pass (its test
    builds on a correct one)?"""
    fn = reference.reference("zb_h1_order")
    globs = dict(fn.__globals__, one_f_one_b_order=lambda S, M: [[] for _ in range(S)])
    broken = type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)
    assert fails_quietly("zb_h1_order", broken) == ""


def test_gpipe_table_takes_the_backward_phase_in_any_order_as_early():
    """Review round 2: the rules fix the forward order only; in the backward phase micro-batch
    M - 1 first is as early as 0 first. Does the hidden test accept that table (it checks
    dependencies and earliest starts, not cells)?"""
    def reversed_backward(S, M):
        table, ratio = reference.reference("gpipe_table")(S, M)
        steps = M + S - 1
        return [row[:steps] + [a and (a[0], "B", M - 1 - a[2]) for a in row[steps:]]
                for row in table], ratio

    assert fails_quietly("gpipe_table", reversed_backward) == ""


# ---------------------------------------------------------------- the numbers of the notebook


def test_gpipe_reproduces_the_seed_numbers():
    """Does the GPipe table give seed 000 exercise 5's bubbles: 33.33% for S=4, M=6 and 42.9%,
    27.3%, 15.8%, 8.6% for M = 4, 8, 16, 32, which are (S-1)/(M+S-1) of the total time?"""
    table = reference.reference("gpipe_table")
    assert table(4, 6)[1] == pytest.approx(1 / 3)
    assert [round(100 * table(4, m)[1], 1) for m in (4, 8, 16, 32)] == [42.9, 27.3, 15.8, 8.6]
    for S in range(1, 7):
        for M in range(1, 13):
            assert table(S, M)[1] == pytest.approx((S - 1) / (M + S - 1))


def test_simulated_bubbles_match_the_formulas():
    """Over the ideal time, is the simulated bubble (S-1)/M for GPipe and 1F1B and (S-1)/(vM)
    for interleaved 1F1B (M >= S), and is ZB-H1's idle time S-1 steps per rank with F = B = W?
    Does 1F1B hold min(S - s, M) micro-batches on stage s, GPipe M?"""
    from distlab.pipeline_parallel import peak_in_flight, simulate

    gpipe_order = reference.module(ASSIGNMENT).gpipe_order
    one_f_one_b = reference.reference("one_f_one_b_order")
    interleaved = reference.reference("interleaved_order")
    zb = reference.reference("zb_h1_order")
    for S in range(1, 7):
        for M in range(1, 17):
            for order in (gpipe_order(S, M), one_f_one_b(S, M)):
                assert simulate(order).bubble_over_ideal == pytest.approx((S - 1) / M)
            assert peak_in_flight(gpipe_order(S, M)) == {s: M for s in range(S)}
            assert peak_in_flight(one_f_one_b(S, M)) == {s: min(S - s, M) for s in range(S)}
            for v in range(1, 5):
                timeline = simulate(interleaved(S, M, v))
                if M >= S:
                    assert timeline.bubble_over_ideal == pytest.approx((S - 1) / (v * M))
            if M >= S:
                timeline = simulate(zb(S, M), {"F": 1, "B": 2, "W": 1})
                assert timeline.makespan == 3 * M + S - 1


def test_interleaved_pays_for_its_bubble_with_messages():
    """Does interleaving v chunks send 2M(vS-1) messages where 1F1B sends 2M(S-1)?"""
    from distlab.pipeline_parallel import simulate

    for S, M, v in ((4, 8, 2), (3, 6, 3), (2, 5, 4)):
        assert simulate(reference.reference("one_f_one_b_order")(S, M)).messages == \
            2 * M * (S - 1)
        assert simulate(reference.reference("interleaved_order")(S, M, v)).messages == \
            2 * M * (v * S - 1)


def test_the_simulator_rejects_broken_orders():
    """Does the simulator name a missing action, a repeated one, and a deadlock?"""
    from distlab.pipeline_parallel import ScheduleError, simulate

    with pytest.raises(ScheduleError, match="B of micro-batch 1 on stage 0 never runs"):
        simulate([[(0, "F", 0), (0, "F", 1), (0, "B", 0)]])
    with pytest.raises(ScheduleError, match="appears twice"):
        simulate([[(0, "F", 0), (0, "F", 0), (0, "B", 0)]])
    with pytest.raises(ScheduleError, match="deadlock: rank 0 waits to run B of micro-batch 0 "
                       "on stage 0: it needs B of micro-batch 0 on stage 1, which rank 1 only "
                       "runs after its own F of micro-batch 1 on stage 1"):
        simulate([[(0, "F", 0), (0, "B", 0), (0, "F", 1), (0, "B", 1)],
                  [(1, "F", 1), (1, "F", 0), (1, "B", 0), (1, "B", 1)]])
    with pytest.raises(ScheduleError, match="comes later in rank 0's own order"):
        simulate([[(0, "B", 0), (0, "F", 0)]])
    with pytest.raises(ScheduleError, match="on rank 0 and on rank 1"):
        simulate([[(0, "F", 0)], [(0, "B", 0)]])


def test_text_gantt_draws_the_table():
    """Is the text Gantt of GPipe's order, with the table's costs, the seed's picture?"""
    from distlab.pipeline_parallel import text_gantt

    text = text_gantt(reference.module(ASSIGNMENT).gpipe_order(2, 2), {"F": 1, "B": 1})
    assert text.splitlines() == ["t      0  1  2  3  4  5",
                                 "rank 0 F0 F1 .  .  B0 B1",
                                 "rank 1 .  F0 F1 B0 B1 ."]


def test_pictures_are_shown_once_and_described_in_words(monkeypatch):
    """Do the Gantt charts and bar charts draw without warnings, and say in words what they
    show?"""
    import matplotlib

    matplotlib.use("Agg")
    from distlab import pipeline_parallel as pipeline

    shown = []
    monkeypatch.setattr(pipeline, "_show", lambda fig, text: shown.append(text))
    mod = reference.module(ASSIGNMENT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipeline.show_gantt(mod.gpipe_order(4, 6), name="GPipe")
        pipeline.show_schedules({"1F1B": reference.reference("one_f_one_b_order"),
                                 "interleaved": reference.reference("interleaved_order")})
        pipeline.show_bars(["a", "b"], {"x": [1, 2]}, "two bars")
    pipeline.plt.close("all")
    assert shown[0].startswith("Gantt chart of the GPipe on 4 ranks: it ends at time 27")
    assert "interleaved ends at" in shown[1]
    assert shown[2] == "two bars: x: a 1, b 2"


# ---------------------------------------------------------------- against torch's pipelining

KINDS = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}


def _torch_runs(rank, world_size, schedule, num_microbatches, chunks):
    """What torch's schedule runs on this rank (every forward_one_chunk / backward_one_chunk,
    in order), and its pipeline_order table (actions only)."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed import pipelining

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(world_size * chunks)])
    ran, stages = [], []
    for c in range(chunks):
        index = c * world_size + rank
        stage = pipelining.PipelineStage(model[index], index, world_size * chunks,
                                         torch.device("cpu"))
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

        def logged_forward(mb, *args, _index=index, _run=forward, **kwargs):
            ran.append((_index, "F", mb))
            return _run(mb, *args, **kwargs)

        def logged_backward(mb, *args, _index=index, _run=backward, **kwargs):
            ran.append((_index, "B", mb))
            return _run(mb, *args, **kwargs)

        stage.forward_one_chunk, stage.backward_one_chunk = logged_forward, logged_backward
        stages.append(stage)
    cls = getattr(pipelining, schedule)
    pipe = cls(stages if chunks > 1 else stages[0], n_microbatches=num_microbatches,
               loss_fn=F.mse_loss)
    x, y = torch.randn(2 * num_microbatches, 4), torch.randn(2 * num_microbatches, 4)
    args = (x,) if rank == 0 else ()
    pipe.step(*args, **({"target": y} if rank == world_size - 1 else {}))
    table = [(a.stage_index, KINDS[a.computation_type.name], a.microbatch_index)
             for a in (pipe.pipeline_order or {}).get(rank, [])
             if a is not None and a.computation_type.name in KINDS]
    return ran, table


def _torch_orders(schedule, S, M, chunks=1):
    from distlab import run

    results = run(_torch_runs, schedule, M, chunks, world_size=S)
    return [ran for ran, _ in results], [table for _, table in results]


@pytest.mark.parametrize(("S", "M"), [(2, 2), (2, 3), (3, 3), (3, 5), (3, 6)])
def test_reference_orders_are_what_torch_runs(S, M):
    """For M >= S, are the reference GPipe and 1F1B orders exactly what ScheduleGPipe and
    Schedule1F1B run on S gloo ranks? Where Schedule1F1B's pipeline_order table differs from
    what it runs (torch 2.13 labels the last stage's forwards one micro-batch late), does the
    simulator show the table is the wrong one?"""
    from distlab.pipeline_parallel import ScheduleError, simulate

    gpipe_ran, _ = _torch_orders("ScheduleGPipe", S, M)
    assert gpipe_ran == reference.module(ASSIGNMENT).gpipe_order(S, M)
    ran, table = _torch_orders("Schedule1F1B", S, M)
    assert ran == reference.reference("one_f_one_b_order")(S, M)
    simulate(ran, num_stages=S, num_microbatches=M)
    if table != ran:
        with pytest.raises(ScheduleError):
            simulate(table, num_stages=S, num_microbatches=M)


def test_interleaved_reference_is_torchs_but_for_the_warmup():
    """With torch's warm-up, (v-1)·round + 2(S-1-r) forwards, is the reference interleaved
    order what ScheduleInterleaved1F1B runs (2 ranks, 2 chunks, M = 2, 3, 4)? And is the
    reference's shorter warm-up as fast, holding fewer activations?"""
    from distlab.pipeline_parallel import peak_in_flight, simulate

    torchs = nb.variant("interleaved_order", 1,
                     "min((v - 1) * size + 2 * (S - r - 1), len(forwards))")
    for M in (2, 3, 4):
        ran, _ = _torch_orders("ScheduleInterleaved1F1B", 2, M, chunks=2)
        assert ran == torchs(2, M, 2)
        ours = reference.reference("interleaved_order")(2, M, 2)
        assert simulate(ours).makespan == simulate(ran).makespan
        assert peak_in_flight(ours, "rank") <= peak_in_flight(ran, "rank")
