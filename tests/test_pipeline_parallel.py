"""Notebook 05 (pipeline parallelism): do the reference answers pass their hidden tests, do
answers with one wrong blank fail them (and get that blank named), do other correct answers
pass, do the simulator's numbers match the formulas, and do the reference orders match what
torch.distributed.pipelining runs?

Run: .venv/bin/python -m pytest tests/test_pipeline_parallel.py -q   (about 45 s on 2 idle cores)
"""

import linecache
import re
import sys
import warnings

import cloudpickle
import numpy as np
import pytest
from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

from autograder import diagnose, exercises, grade_cell, reference
from distlab.source.definitions import functions
from distlab.source.markers import blank_source

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # rank functions travel by value

ASSIGNMENT = "05_pipeline_parallel"
nb = Notebook(ASSIGNMENT)


def fails_quietly(name, fn, seed=0):
    """fails(), ignoring what a wrong answer warns (grading hides that too)."""
    return fails(name, fn, seed, ignore_warnings=True)


SIMULATED = ["gpipe_table", "one_f_one_b_order", "interleaved_order", "zb_h1_order",
             "activation_bytes"]
REAL_RANKS = ["run_stage", "pipelining_step"]

# Plausible mistakes: (function, blank number, what a learner might write there).
WRONG = [
    ("gpipe_table", 1, "t + s"),
    ("gpipe_table", 1, "t - s - 1"),
    ("gpipe_table", 1, "s - t"),
    ("gpipe_table", 2, "t - s"),  # the backward entering at stage 0
    ("gpipe_table", 2, "t - (S - s)"),
    ("gpipe_table", 2, "t - (S + 1 - s)"),
    ("gpipe_table", 2, "t + s - S"),
    ("gpipe_table", 3, "0 <= mb <= M"),
    ("gpipe_table", 3, "0 < mb < M"),
    ("gpipe_table", 3, "mb < M"),
    ("gpipe_table", 3, "not 0 <= mb < M"),
    ("gpipe_table", 4, "active / total"),
    ("gpipe_table", 4, "(total - active) / active"),  # the other convention
    ("gpipe_table", 4, "(S - 1) / M"),  # the other convention, in closed form
    ("one_f_one_b_order", 1, "min(S - s, M)"),
    ("one_f_one_b_order", 1, "S - s - 1"),  # fewer micro-batches than stages
    ("one_f_one_b_order", 1, "min(s, M)"),
    ("one_f_one_b_order", 1, "min(S - s - 2, M)"),
    ("one_f_one_b_order", 1, "min(S - s + 1, M)"),
    ("one_f_one_b_order", 1, "max(S - s - 1, M)"),
    ("one_f_one_b_order", 2, "k"),
    ("one_f_one_b_order", 2, "warmup + k + 1"),
    ("one_f_one_b_order", 3, "k + 1"),
    ("one_f_one_b_order", 3, "warmup + k"),
    ("one_f_one_b_order", 3, "M - 1 - k"),
    ("interleaved_order", 1, "r * v + c"),  # each rank one contiguous block of stages
    ("interleaved_order", 1, "c * S + r + 1"),
    ("interleaved_order", 1, "c + r * S"),
    ("interleaved_order", 2, "c * S + r"),  # the backward in the forward's chunk order
    ("interleaved_order", 2, "(v - c) * S + r"),
    ("interleaved_order", 3, "min((v - 1) * size + 2 * (S - r - 1), len(forwards))"),  # torch's
    ("interleaved_order", 3, "min((v - 1) * S + S - r - 1, len(forwards))"),  # rounds of S
    ("interleaved_order", 3, "min(v * size + S - r - 1, len(forwards))"),
    ("interleaved_order", 3, "min((v - 1) * size + S - r - 2, len(forwards))"),
    ("interleaved_order", 3, "min((v - 1) * size + r, len(forwards))"),
    ("interleaved_order", 3, "(v - 1) * size + S - r - 1"),
    ("interleaved_order", 3, "min(S - r - 1, len(forwards))"),  # 1F1B's
    ("zb_h1_order", 1, '(s, "B", action[2])'),
    ("zb_h1_order", 1, '(s, "W", len(waiting))'),
    ("zb_h1_order", 1, '(s + 1, "W", action[2])'),
    ("zb_h1_order", 2, "len(waiting) >= s"),
    ("zb_h1_order", 2, "len(waiting) > 0"),  # no W waits: 1F1B with a split backward
    ("zb_h1_order", 2, "len(waiting) > num_stages - 1 - s"),
    ("zb_h1_order", 2, "len(waiting) > s + 1"),
    ("zb_h1_order", 2, "len(waiting) < s"),
    ("activation_bytes", 1, "t.untyped_storage().data_ptr() in weights"),
    ("activation_bytes", 1, "True"),  # the weights counted too
    ("activation_bytes", 1, "not isinstance(t, nn.Parameter)"),  # misses weight.t() views
    ("activation_bytes", 2, "t.numel()"),
    ("activation_bytes", 2, "t.element_size()"),
    ("activation_bytes", 3, "block(h)"),
    ("activation_bytes", 3, "checkpoint(block, h, use_reentrant=True)"),  # block 0 gets no grads
    ("activation_bytes", 3, "checkpoint(block, h.detach(), use_reentrant=False)"),
    ("run_stage", 1, "len(stash)"),  # the count at the last forward, not the most
    ("run_stage", 2, "get"),  # nothing is ever freed
    ("run_stage", 3, "torch.ones_like(y)"),
    ("run_stage", 4, "grad"),  # passes on the gradient it received
    ("pipelining_step", 1, "world_size - 1 - rank"),
    ("pipelining_step", 2, "(x,) if rank == world_size - 1 else ()"),
    ("pipelining_step", 2, "()"),
    ("pipelining_step", 3, '{"target": y, "losses": losses} if rank == 0 else {}'),
    ("pipelining_step", 3, "{}"),
    ("pipelining_step", 3, '{"target": y, "losses": losses}'),  # targets where no loss is
]

# Correct answers written differently: they must pass.
ACCEPTED = [
    ("gpipe_table", 1, "-s + t"),
    ("gpipe_table", 2, "t + s - S + 1"),
    ("gpipe_table", 3, "mb in range(M)"),
    ("gpipe_table", 3, "M > mb >= 0"),
    ("gpipe_table", 4, "1 - active / total"),
    ("gpipe_table", 4, "(S - 1) / (M + S - 1)"),  # the closed form
    ("one_f_one_b_order", 1, "min(M, num_stages - 1 - s)"),
    ("one_f_one_b_order", 1, "min(S - s - 1, M - 1)"),  # the same order: the last warm-up
    # forward is then the first steady one
    ("one_f_one_b_order", 1, "min(M, S - s - 1)"),
    ("one_f_one_b_order", 2, "k + warmup"),
    ("interleaved_order", 1, "r + c * S"),
    ("interleaved_order", 2, "(v - c - 1) * S + r"),
    ("interleaved_order", 3, "min(size * (v - 1) + S - 1 - r, v * M)"),
    ("interleaved_order", 3, "min(len(backwards), (v - 1) * size + S - r - 1)"),
    ("zb_h1_order", 1, '(s, "W", action[-1])'),
    ("zb_h1_order", 2, "len(waiting) >= s + 1"),
    ("run_stage", 1, "max(len(stash), peak)"),
    ("activation_bytes", 1, "not t.untyped_storage().data_ptr() in weights"),
    ("activation_bytes", 1, "t.data_ptr() not in weights"),  # saved weights start their storage
    ("activation_bytes", 2, "t.element_size() * t.nelement()"),
    ("activation_bytes", 3, "checkpoint(block.forward, h, use_reentrant=False)"),
]



# ---------------------------------------------------------------- references pass


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("name", SIMULATED)
def test_reference_passes_its_hidden_test(name, seed, capfd):
    """Does the solved answer pass its hidden test, quietly and without warnings, for this
    seed?"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exercises.test_for(name)(reference.reference(name), np.random.default_rng(seed))
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("name", REAL_RANKS)
def test_reference_passes_its_hidden_test_on_real_ranks(name, capfd):
    """Does the solved real-ranks answer pass its hidden test (gloo, 1 to 4 ranks), writing
    nothing to stderr?"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exercises.test_for(name)(reference.reference(name), np.random.default_rng(3))
    assert capfd.readouterr().err == ""


def test_every_learner_function_has_a_hidden_test_and_points_equal_blanks():
    """Is every solution cell graded by a test cell worth one point per blank?"""
    assert sorted(nb.graded_units()) == sorted(SIMULATED + REAL_RANKS)
    assert len(reference.locate("gpipe_table")[2]) == 4  # five blanks once; the count given


# ---------------------------------------------------------------- wrong blanks fail


@pytest.mark.parametrize(("name", "number", "wrong"), WRONG,
                         ids=[f"{n}-{k}-{w}" for n, k, w in WRONG])
def test_one_wrong_blank_fails_the_hidden_test(name, number, wrong):
    """Does an answer with this one wrong blank fail its hidden test, with a message that names
    the case and not the answer?"""
    complaint = fails_quietly(name, nb.variant(name, number, wrong))
    assert complaint
    answer = reference.locate(name)[2][number - 1].answer
    if not answer.isidentifier():  # a bare name (`rank`, `k`) may well be a word of the case
        assert not re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", complaint), complaint


@pytest.mark.parametrize(("name", "number", "right"), ACCEPTED,
                         ids=[f"{n}-{k}-{w}" for n, k, w in ACCEPTED])
def test_another_correct_answer_passes(name, number, right):
    """Does a correct answer written differently from the reference earn the blank?"""
    assert fails_quietly(name, nb.variant(name, number, right)) == ""


def test_every_blank_has_a_wrong_variant():
    """Is every blank of the notebook covered by a deliberately wrong variant above?"""
    covered = {(name, number) for name, number, _ in WRONG}
    for name in SIMULATED + REAL_RANKS:
        blanks = reference.locate(name)[2]
        assert {(name, b.number) for b in blanks} <= covered, name


@pytest.mark.parametrize(("name", "number", "wrong"),
                         [w for w in WRONG if w[0] in SIMULATED][::3]
                         + [("run_stage", 2, "get")], ids=lambda v: str(v))
def test_grading_names_the_wrong_blank(name, number, wrong):
    """Does grading take exactly that blank's point and name it as the one that looks wrong?"""
    fn = nb.variant(name, number, wrong)

    def make(source):
        return fn if source is None else diagnose.rebuild(fn, source)

    earned, possible, report = grade_cell.assess(name, diagnose.source_of(fn), make)
    assert earned == possible - 1, report
    (line,) = [line for line in report if "looks wrong" in line]
    assert f"[{number}]" in line and line.count("[") == 1, report


def _released(name: str):
    """The learner's function as released: every blank `_____`."""
    _, cell, _ = reference.locate(name)
    template, _ = blank_source(cell.source)
    filename = f"<released-{name}>"
    linecache.cache[filename] = (len(template), None, template.splitlines(True), filename)
    namespace = dict(vars(reference.module(ASSIGNMENT)))
    namespace["__name__"] = "__main__"
    exec(compile(template, filename, "exec"), namespace)
    return namespace[name], template


@pytest.mark.parametrize("name", SIMULATED + REAL_RANKS)
def test_reference_earns_every_point_and_the_release_none(name):
    """Graded in the notebook, does the reference earn every point, and the released template
    (nothing filled) 0 points with a "not filled" report?"""
    fn = reference.reference(name)
    earned, possible, report = grade_cell.assess(name, diagnose.source_of(fn), lambda s: fn)
    assert earned == possible == len(reference.locate(name)[2]), report
    blank_fn, template = _released(name)
    source = functions(template)[name]

    def make(candidate):
        return blank_fn if candidate is None else diagnose.rebuild(blank_fn, candidate)

    earned, possible, report = grade_cell.assess(name, source, make)
    assert earned == 0 and possible == len(reference.locate(name)[2]), report
    assert any("not filled" in line for line in report), report



@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("zb_h1_order", 2, "len(waiting) > 0"),  # the judge patches in a correct 1F1B
    ("run_stage", 2, "get"),  # on ranks in the judge's runner
    ("activation_bytes", 3, "block(h)"),  # tensors come back as plain data
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does one wrong blank cost exactly that blank's point?"""
    from autograder import judge
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests

    def edit(code):
        if f"def {name}(" not in code:
            return code
        blank = reference.locate(name)[2][number - 1]
        lines = code.split("\n")
        row = next(i for i, line in enumerate(lines) if blank.answer in line and "BLANK" in line
                   and blank.hint in line)
        lines[row] = lines[row].replace(blank.answer, wrong, 1)
        return "\n".join(lines)

    [(earned, possible, report)] = judge.verdicts(nb.solved_cells(edit), [(name, None)], "test")
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


def test_a_broken_one_f_one_b_does_not_cost_zb_h1():
    """With a wrong one_f_one_b_order in the notebook, does zb_h1_order still pass (its test
    builds on a correct one)?"""
    fn = reference.reference("zb_h1_order")
    globs = dict(fn.__globals__, one_f_one_b_order=lambda S, M: [[] for _ in range(S)])
    broken = type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)
    assert fails_quietly("zb_h1_order", broken) == ""


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

    torchs = nb.variant("interleaved_order", 3,
                     "min((v - 1) * size + 2 * (S - r - 1), len(forwards))")
    for M in (2, 3, 4):
        ran, _ = _torch_orders("ScheduleInterleaved1F1B", 2, M, chunks=2)
        assert ran == torchs(2, M, 2)
        ours = reference.reference("interleaved_order")(2, M, 2)
        assert simulate(ours).makespan == simulate(ran).makespan
        assert peak_in_flight(ours, "rank") <= peak_in_flight(ran, "rank")
