"""Notebook 06 (ZeRO): what is particular to it: units that keep what they gathered, a helper
that does not cost its users, the blank release earning nothing, the judge, and the helpers in
distlab.zero counting what they say. (What every exercise promises: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_zero.py -q
"""


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

ASSIGNMENT = "06_zero"
nb = Notebook(ASSIGNMENT)
PURE = ["fewest_gpus", "assign_params", "zero2_held_bytes"]
ON_RANKS = ["ShardedOptimizer", "Zero2Optimizer", "GatheredUnit", "lm_plan"]


# ---------------------------------------------------------------- one wrong blank fails


@pytest.mark.parametrize("kept", ["full", "full.clone()"])
def test_a_unit_that_keeps_its_gathered_parameters_fails(kept):
    """Does a ZeRO-3 unit that computes the right numbers but keeps the gathered parameters (or
    a copy of them) alive until the backward, stashed on ctx, fail, saying what ZeRO-3 frees?"""
    _, cell, _ = reference.locate("GatheredUnit")
    given = "        return unit.run(full, inputs)\n"
    source = cell.source.replace(given, f"        ctx.kept = {kept}\n" + given)
    assert source != cell.source
    assert "frees each gathered layer" in fails("GatheredUnit",
                                                nb.define("GatheredUnit", source))


def test_a_unit_that_saves_its_gathered_unit_fails():
    """Does a ZeRO-3 unit whose forward saves the gathered unit for its backward (and whose
    backward uses it rather than gathering again) fail on what the forward saved?"""
    _, cell, _ = reference.locate("GatheredUnit")
    source = cell.source.replace("ctx.save_for_backward(shard, *inputs)  # BLANK",
                                 "ctx.save_for_backward(full, shard, *inputs)  # BLANK")
    source = source.replace("shard, *inputs = ctx.saved_tensors; full = "
                            "GatheredUnit.gather_unit(unit, shard);",
                            "full, shard, *inputs = ctx.saved_tensors;")
    assert "full, shard, *inputs = ctx" in source
    assert "gathered" in fails("GatheredUnit", nb.define("GatheredUnit", source))


def test_a_sharded_optimizer_that_updates_everything_everywhere_fails():
    """Does a ShardedOptimizer that gives every rank's local optimizer all the parameters (right
    numbers, no memory saved) fail on where the optimizer state is?"""
    _, cell, _ = reference.locate("ShardedOptimizer")
    source = cell.source.replace('local_group = {**group, "params": mine}',
                                 'local_group = {**group, "params": list(group["params"])}')
    assert source != cell.source
    assert "optimizer state" in fails("ShardedOptimizer", nb.define("ShardedOptimizer", source))


def test_a_wrong_helper_does_not_cost_the_class_that_uses_it():
    """With a wrong assign_params in the notebook, does ShardedOptimizer still pass (its test
    gives it a correct one)?"""
    worst_owner = ("for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]): "
                   "owners[i] = loads.index(max(loads)); loads[owners[i]] += sizes[i]")
    broken = {"assign_params": nb.variant("assign_params", 1, worst_owner)}
    source = reference.locate("ShardedOptimizer")[1].source
    assert fails("ShardedOptimizer", nb.define("ShardedOptimizer", source, **broken)) == ""


def test_a_unit_that_saves_a_bf16_copy_of_its_slice_fails_on_what_it_saves():
    """Does a ZeRO-3 unit that saves a bf16 copy of its slice for the backward (the gathered
    copy right, the master's gradient sent through bf16) fail on what autograd saved, seen
    from below, before any gradient is compared?"""
    _, cell, _ = reference.locate("GatheredUnit")
    source = cell.source.replace("ctx.save_for_backward(shard, *inputs)  # BLANK",
                                 "ctx.save_for_backward(shard.to(unit.compute_dtype), *inputs)"
                                 "  # BLANK")
    assert source != cell.source
    assert "copy of a slice" in fails("GatheredUnit", nb.define("GatheredUnit", source))


@pytest.mark.parametrize("name", PURE + ON_RANKS)
def test_the_blank_release_earns_nothing_and_says_so(name):
    """Graded as released (every blank `_____`), does each exercise earn 0 with its blanks
    named as not filled, rather than crash?"""
    released_earns_nothing(nb, name)


def test_the_judge_names_a_wrong_blank_outside_the_kernel(monkeypatch):
    """Graded by the judge (the learner's code in a separate runner, only plain values coming
    back), does one wrong blank cost one point, and is it named? (The judge's full marks for
    every solved exercise: tests/system/test_grading.py, under make grade.)"""
    from autograder import grade_cell, solved
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    cells = [c.source for c in solved.load(ASSIGNMENT).cells if c.cell_type == "code"]
    wrong = [c.replace("return (world_size + 1) * size * itemsize",
                       "return world_size * size * itemsize") for c in cells]
    assert wrong != cells
    [(earned, possible, report)] = grade_cell.verdicts(wrong, [("zero2_held_bytes", None)], "s")
    assert (earned, possible) == (0, 1) and "looks wrong: [1]" in "\n".join(report), report


# ---------------------------------------------------------------- distlab.zero


def _counted(rank, world_size):
    import torch
    import torch.distributed as dist

    from distlab.zero import count_collectives

    original = dist.all_reduce
    with count_collectives() as counter:
        t = torch.ones(6)
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        full = torch.empty(4 * world_size)
        dist.all_gather_single(full, torch.ones(4))
        alive = counter.live_gathered_bytes()
        del full
        out = torch.empty(2)
        dist.reduce_scatter_single(out, torch.ones(2 * world_size))
    return counter.calls, alive, counter.live_gathered_bytes(), dist.all_reduce is original


def test_count_collectives_records_whole_messages_and_gathered_buffers_alive():
    """Does count_collectives record each call with its whole message's bytes (an all-gather's
    output, a reduce-scatter's input), see a gathered buffer alive until it is dropped, and
    put torch.distributed back afterwards?"""
    import distlab

    calls, alive, after, restored = distlab.run(_counted, world_size=2)[0]
    assert restored
    assert calls == [("all_reduce", 24), ("broadcast", 24), ("all_gather_single", 32),
                     ("reduce_scatter_single", 16)]
    assert (alive, after) == (32, 0)


def test_tensor_bytes_counts_a_shared_storage_once():
    """Do views of one flat buffer count as the buffer, once, and None as nothing?"""
    import torch

    from distlab.zero import state_bytes, tensor_bytes

    flat = torch.zeros(12)
    assert tensor_bytes([flat[:5].view(5), flat[5:], None]) == 48
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert state_bytes(optimizer) == 2 * 4 * 8 + 2 * 4  # exp_avg, exp_avg_sq, 2 step counters


def test_the_memory_bars_draw_the_papers_numbers(monkeypatch):
    """Does show_memory draw the reference formula's four stages for the paper's model, with
    their totals (120, 31.4, 16.6 and 1.875, the paper's 1.9 GB) in the figure's description?"""
    import matplotlib

    matplotlib.use("Agg")
    from distlab import collectives, zero

    shown = []
    monkeypatch.setattr(collectives, "_show", lambda fig, text: shown.append(text))
    monkeypatch.setitem(__import__("sys").modules, "ipywidgets", None)  # no sliders: one figure
    zero.show_memory(reference.reference("model_state_bytes"))
    (text,) = shown
    for total in ("120 GB", "31.4 GB", "16.6 GB", "1.88 GB"):
        assert total in text, text
