"""Notebook 07 (DP x TP x PP): what is particular to it: the blank release earning nothing, the
hidden tests naming the wrong group, and distlab.hybrid's counter and pictures showing what
they say. (What every exercise promises: tests/test_contract.py.) The TP block is compared with
the plain block it splits, the training with plain SGD on one process (in the hidden tests,
against this module's oracles).

Run: .venv/bin/python -m pytest tests/test_hybrid.py -q
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

ASSIGNMENT = "07_hybrid"
nb = Notebook(ASSIGNMENT)
PURE = ["group_ranks", "group_bytes", "layout_memory", "choose_layout"]
ON_RANKS = ["TPBlock", "shard_2d", "train_3d", "sync_tied"]


ROWS = ('; d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); '
        'xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)')


@pytest.mark.parametrize(("wrong", "says"), [
    ("pipeline = list(range(dist.get_world_size())); p = dist.get_rank(); "
     "xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)", "in its own pipeline only"),
    ('pipeline = dist.get_process_group_ranks(groups["tp"]); p = pipeline.index(dist.get_rank())'
     + ROWS, "in its own pipeline only"),
    ('pipeline = dist.get_process_group_ranks(groups["pp"]); p = pipeline.index(dist.get_rank()); '
     "xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)", "its index in its DP group"),
])
def test_a_pipeline_taken_from_the_wrong_ranks_is_named(wrong, says):
    """Does the bug report's line kept (the stages numbered by global rank), or the TP group
    taken for the pipeline, fail with a message that says a stage talks to its own pipeline's
    neighbours only; and every replica on the whole batch, saying a replica is its DP index?"""
    complaint = fails("train_3d", nb.variant("train_3d", 1, wrong))
    assert says in complaint, complaint


@pytest.mark.parametrize(("wrong", "says"), [
    ("list(model)", "root"),
    ("[model]", "several blocks in one unit"),
])
def test_fsdp_units_outside_zero3s_budget_are_named(wrong, says):
    """Do the blocks alone (each a root, never freed after its forward) or the model as one
    unit fail, saying why the all-gathers are not two per block?"""
    complaint = fails("shard_2d", nb.variant("shard_2d", 1, wrong))
    assert says in complaint, complaint


def test_a_block_with_f_before_the_layernorm_fails_naming_it():
    """Does f put on the block's input (before the LayerNorm, whose copies then get this rank's
    share of their gradient) fail, naming the LayerNorm?"""
    variant = nb.variant("TPBlock", 1, "h = F.gelu(F.linear(self.norm(self.f.apply(x)), "
                                       "self.w1, self.b1)); return x + self.g.apply("
                                       "F.linear(h, self.w2)) + self.b2")
    complaint = fails("TPBlock", variant)
    assert "norm." in complaint and "LayerNorm" in complaint, complaint


@pytest.mark.parametrize(("wrong", "says"), [
    ("return x + F.linear(h, self.w2) + self.b2", "g forward"),
    ("return x + self.g.apply(F.linear(h, self.w2, self.b2))", "once per TP rank"),
])
def test_a_block_without_g_or_with_fc2s_bias_summed_fails_naming_it(wrong, says):
    """Does a forward without g (a partial sum for the output), or with fc2's bias added before
    g's sum (once per TP rank), fail saying so?"""
    variant = nb.variant("TPBlock", 1, "h = F.gelu(F.linear(self.f.apply(self.norm(x)), "
                                       "self.w1, self.b1)); " + wrong)
    complaint = fails("TPBlock", variant)
    assert says in complaint, complaint


@pytest.mark.parametrize(("wrong", "says"), [
    ('dist.all_reduce(grad, group=groups["tied"]); grad /= 2', "different uses"),
    ('dist.all_reduce(grad, group=groups["tp"])', "meets only the other copies"),
])
def test_a_tied_weight_reduced_the_wrong_way_is_named(wrong, says):
    """Do the two uses averaged, or a sum over the TP group, fail with a message that says
    which copies are summed and which averaged?"""
    complaint = fails("sync_tied", nb.variant("sync_tied", 1, wrong))
    assert says in complaint, complaint


def test_the_tied_groups_stand_for_the_pipelines_ends():
    """Is the given tied_groups the first and last rank of each pipeline (one rank with one
    stage)?"""
    tied_groups = reference.reference("tied_groups")
    assert tied_groups((2, 2, 2)) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert tied_groups((3, 1, 2)) == [[0, 4], [1, 5]]
    assert tied_groups((1, 2, 1)) == [[0], [1]]


@pytest.mark.parametrize("name", PURE + ON_RANKS)
def test_the_blank_release_earns_nothing_and_says_so(name):
    """Graded as released (every blank `_____`), does each exercise earn 0 with its blanks
    named as not filled, rather than crash?"""
    released_earns_nothing(nb, name)


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
