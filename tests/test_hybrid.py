"""Notebook 07 (DP x TP x PP): what is particular to it: the blank release earning nothing, the
hidden tests naming the wrong group, and distlab.hybrid's counter and pictures showing what
they say. (What every exercise promises: tests/test_contract.py.) The TP block is compared with
the plain block it splits, the training with plain SGD on one process (in the hidden tests,
against this module's oracles).

Run: .venv/bin/python -m pytest tests/test_hybrid.py -q
"""


import pytest
from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

from autograder import reference
from distlab.source.markers import blank_source

ASSIGNMENT = "07_hybrid"
nb = Notebook(ASSIGNMENT)
PURE = ["group_ranks", "tied_groups", "group_bytes", "layout_memory", "choose_layout"]
ON_RANKS = ["TPBlock", "shard_2d", "train_3d"]


@pytest.mark.parametrize(("wrong", "says"), [
    ("dist.all_reduce(param.grad); param.grad /= dist.get_world_size()",
     "over the world (all 4 ranks) instead of its DP group"),
    ('dist.all_reduce(param.grad, group=groups["tp"]); param.grad /= n_d', "in its TP group"),
])
def test_a_gradient_averaged_in_the_wrong_group_is_named(wrong, says):
    """Does the bug report's line kept (a gradient all-reduced over the world), or one over the
    TP group, fail with a message that says which group it used and which it should have?"""
    complaint = fails("train_3d", nb.variant("train_3d", 1, wrong))
    assert says in complaint, complaint


def test_a_block_that_adds_the_bias_inside_g_fails():
    """Does fc2's bias added before g (so counted once per TP rank) fail, naming fc2.bias?"""
    variant = nb.variant("TPBlock", 1, "x + self.g.apply(F.linear(h, self.w2, self.b2))")
    assert "fc2.bias" in fails("TPBlock", variant)


def test_tied_groups_across_replicas_fail_naming_the_pipeline():
    """Does one group of every first- and last-stage rank (the copies of other replicas and
    TP ranks summed in) fail, saying a copy is summed with its own pipeline's only?"""
    complaint = fails("tied_groups", nb.variant(
        "tied_groups", 1, "[[g[0] for g in group_ranks(shape, 0)] + "
                          "[g[-1] for g in group_ranks(shape, 0)]]"))
    assert "its own pipeline" in complaint, complaint


def test_blocks_left_as_fsdp_roots_fail_on_the_budget():
    """Does shard_2d without the whole model's unit (each block a root, whole from forward to
    backward: the run's 2 all-gathers for 2 blocks) fail, naming the root?"""
    complaint = fails("shard_2d", nb.variant("shard_2d", 2, "list(model)"))
    assert "all-gather" in complaint and "root" in complaint, complaint


def test_the_whole_model_as_one_unit_fails_on_the_budget():
    """Does shard_2d with the model as its only unit (every block gathered at once) fail?"""
    complaint = fails("shard_2d", nb.variant("shard_2d", 2, "[model]"))
    assert "all-gather" in complaint and "in one unit" in complaint, complaint


def test_the_model_unit_made_first_fails():
    """Does fully_shard on the model before its blocks fail (the blocks left nothing)?"""
    assert fails("shard_2d", nb.variant("shard_2d", 2, "[model, *model]"))


@pytest.mark.parametrize("name", PURE + ON_RANKS)
def test_the_blank_release_earns_nothing_and_says_so(name):
    """Graded as released (every blank `_____`), does each exercise earn 0 with its blanks
    named as not filled, rather than crash?"""
    _, cell, blanks = reference.locate(name)
    template, _ = blank_source(cell.source)
    obj = nb.define(name, "from distlab import _____\n" + template)
    earned, possible, report = assess(obj)
    assert (earned, possible) == (0.0, float(len(blanks))), report
    assert "not filled yet" in "\n".join(report)


# ---------------------------------------------------------------- distlab.hybrid


def _counted(rank, world_size):
    import torch
    import torch.distributed as dist

    from distlab.hybrid import count_by_group

    pair = dist.new_group([0, 1])
    other = dist.new_group([2, 3])
    alone = [dist.new_group([r]) for r in range(world_size)]  # every rank creates every group
    mine = pair if rank < 2 else other
    original = dist.all_reduce
    with count_by_group({"tp": [0, 1] if rank < 2 else [2, 3], "pp": [rank % 2, rank % 2 + 2]}
                        ) as calls:
        t = torch.ones(4, dtype=torch.float64)
        dist.all_reduce(t, group=mine)
        dist.all_reduce(t)
        dist.all_reduce(t, group=alone[rank])  # one rank: moves nothing, not counted
        if rank < 2:
            dist.send(t, rank + 2)
        else:
            dist.recv(t, rank - 2)
    return calls.bytes_by("tp"), calls.bytes_by("pp"), calls.by_group(), \
        dist.all_reduce is original


def test_count_by_group_puts_each_call_in_its_group():
    """Does count_by_group give each all-reduce its group's ranks (none on a one-rank group),
    a send or recv the pipeline of its two ranks, and put torch.distributed back afterwards?"""
    import distlab

    for rank, (tp, pp, by_group, restored) in enumerate(distlab.run(_counted, world_size=4)):
        assert restored
        assert (tp, pp) == (32, 32), rank
        assert by_group[(0, 1, 2, 3)] == 32, by_group
        assert (rank,) not in by_group, by_group


def test_the_grid_picture_colours_every_group(monkeypatch):
    """Does show_grid draw the reference groups of every dimension, named in its description?"""
    import matplotlib

    matplotlib.use("Agg")
    from distlab import collectives, hybrid

    shown = []
    monkeypatch.setattr(collectives, "_show", lambda fig, text: shown.append(text))
    hybrid.show_grid((2, 2, 2), reference.reference("group_ranks"),
                     reference.reference("mesh_coords"))
    (text,) = shown
    assert "tp groups [[0, 1], [2, 3], [4, 5], [6, 7]]" in text, text
    assert "pp groups [[0, 4], [1, 5], [2, 6], [3, 7]]" in text, text
