"""Notebook 03 (data parallel): what is particular to it: hangs and broken broadcasts, the
judge naming a blank, and the notebook's helpers (the instruments on the ranks, the pictures)
doing what the notebook says. (What every exercise promises: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_data_parallel.py -q   (about a minute on 2 cores;
most of it real gloo ranks)
"""

import time

import matplotlib
import numpy as np
import pytest

from autograder import reference
from autograder.exercises import data_parallel as hidden

matplotlib.use("Agg")

from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

ASSIGNMENT = "03_data_parallel"
nb = Notebook(ASSIGNMENT)
UNITS = ["sync_sgd_step", "broadcast_parameters", "ddp_train", "DDPIndividualParameters",
         "DDPBucketed", "predicted_all_reduces", "accumulated_step", "ParameterServer"]


# ---------------------------------------------------------------- the references


def test_no_hint_holds_its_answer():
    """Does no hint spell out the code that goes in its blank?"""
    for name in UNITS:
        for blank in reference.locate(name)[2]:
            assert blank.answer not in blank.hint, (name, blank.number)


# ---------------------------------------------------------------- wrong and right answers


def test_a_rank_that_hangs_fails_one_case_in_seconds():
    """Does a bucketed DDP in which one rank never starts its all-reduces fail on the ranks'
    short timeout (not the launcher's), saying that a rank waited for a message?"""
    stuck = nb.variant("DDPBucketed", 2,
                       "if self._step.setdefault(index, []).append(param) or "
                       "len(self._step[index]) == len(bucket): "
                       "flat = torch.cat([p.grad.flatten() for p in bucket]); "
                       "work = (dist.all_reduce(flat, async_op=True) if dist.get_rank() != 1 "
                       "else __import__('types').SimpleNamespace(wait=lambda: None)); "
                       "self._later.append(work.wait)")
    start = time.monotonic()
    complaint = fails("DDPBucketed", stuck)
    assert "never came" in complaint, complaint
    assert time.monotonic() - start < 15


def test_a_broken_broadcast_does_not_cost_the_ddp_classes():
    """With a wrong broadcast_parameters in the notebook, do both DDP classes still pass (their
    tests put a correct one in its place)?"""
    for name in ("DDPIndividualParameters", "DDPBucketed"):
        broken = nb.variant(name, 1, reference.locate(name)[2][0].answer)  # a copy of its own
        assert "broadcast_parameters" in broken.__init__.__globals__
        broken.__init__.__globals__["broadcast_parameters"] = lambda module: None
        assert fails(name, broken) == ""


@pytest.mark.parametrize(("name", "number", "wrong"), [
    # a class, on ranks in the judge's runner
    ("DDPBucketed", 1, "return [[p] for p in reversed(params)]"),
    ("ddp_train", 5, "sampler.set_epoch(0)"),  # a rank function that makes its own group
])
def test_the_judge_names_a_wrong_blank(name, number, wrong, monkeypatch):
    """Under the judge, does one wrong blank cost exactly its point, and is it named?"""
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    earned, possible, report = nb.judge_verdict(name, number, wrong)
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


# ---------------------------------------------------------------- the hidden tests' own parts


def test_the_ranks_optimizers_are_torch_optims():
    """Do the small SGD and AdamW the ranks use compute what torch.optim's do?"""
    import torch

    spec = {"sizes": [3, 4, 4, 4, 2], "tied": True, "frozen": [(0, "bias")], "seed": 7}
    rng = np.random.default_rng(0)
    batches = hidden._batches(rng, spec, 2, 3)
    for kind, cls in (("SGD", torch.optim.SGD), ("AdamW", torch.optim.AdamW)):
        mine = hidden._single_process(spec, batches, kind, 0.1)
        model = hidden._net(spec, spec["seed"])
        optimizer = cls(model.parameters(), lr=0.1, **({"weight_decay": 0.01}
                                                       if kind == "AdamW" else {}))
        for step, (xs, ys) in enumerate(batches):
            torch.nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
            optimizer.step()
            optimizer.zero_grad()
            for a, b in zip(mine[step], model.parameters(), strict=True):
                assert torch.allclose(a, b.detach(), rtol=1e-12, atol=1e-14), (kind, step)


def test_buckets_follow_the_rule_of_section_3c():
    """Are buckets filled from the last parameter and closed as soon as they reach the limit,
    the parameter that reaches it inside (PyTorch's Reducer's rule)?"""
    numels = [100, 10, 40, 10, 5]  # bytes at 8 per element: 800, 80, 320, 80, 40
    assert hidden._bucket_numels(numels, 8 * 60) == [65, 100]  # 5+10+40+10 reaches 480
    assert hidden._bucket_numels(numels, 8 * 55) == [55, 110]  # exactly the limit: closed
    assert hidden._bucket_numels(numels, 1) == [5, 10, 40, 10, 100]
    assert hidden._bucket_numels(numels, 1e9) == [165]
    limit = hidden._telling_limit(numels, np.random.default_rng(0))
    assert sorted(hidden._bucket_numels(numels, limit)) != \
        sorted(hidden._bucket_numels(numels[::-1], limit))


def test_the_facts_about_distributed_sampler():
    """1000 samples: 250 per rank on 4 ranks; 334 on 3 (1002 indices, 2 of them padding); and
    without set_epoch every epoch is the same order?"""
    from torch.utils.data.distributed import DistributedSampler

    assert len(DistributedSampler(range(1000), num_replicas=4, rank=0)) == 250
    ranks = [list(DistributedSampler(range(1000), num_replicas=3, rank=r)) for r in range(3)]
    everything = [i for r in ranks for i in r]
    assert len(everything) == 1002 and len(set(everything)) == 1000
    again = DistributedSampler(range(10), num_replicas=2, rank=0)
    first = list(again)
    assert list(again) == first
    again.set_epoch(1)
    assert list(again) != first
    # the notebook's table draws "epoch told" with seed=e: the permutation set_epoch(e) gives
    assert list(DistributedSampler(range(10), num_replicas=2, rank=0, seed=1)) == list(again)


# ---------------------------------------------------------------- distlab.data_parallel


def _watch_on_ranks(rank, world_size, defer):
    import torch
    import torch.distributed as dist

    from distlab.data_parallel import watch_all_reduce

    with watch_all_reduce(defer=defer) as log:
        t = torch.full((3,), rank + 1.0)
        work = dist.all_reduce(t, async_op=True)
        time.sleep(0.05)
        before = t.tolist()
        work.wait()
        dist.all_reduce(torch.ones(5))
    return before, t.tolist(), log.numels(), log.total_bytes(), len(log.spans())


def test_watch_all_reduce_counts_times_and_defers():
    """Does watch_all_reduce log every all_reduce (elements, bytes, finished spans), and with
    defer=True hold an async result back until wait()?"""
    from distlab import run

    for defer in (False, True):
        for before, after, numels, nbytes, spans in run(_watch_on_ranks, defer, world_size=2):
            assert after == [3.0, 3.0, 3.0]
            assert numels == [3, 5] and nbytes == 32 and spans == 2
            if defer:
                assert before != after, "a deferred result must not show before wait()"


def test_overlap_fraction_counts_concurrent_all_reduces_once():
    """Is the overlap the share of all-reduce time (concurrent calls counted once) inside
    the backward?"""
    from distlab.data_parallel import overlap_fraction

    record = {"backward": (0.0, 10.0), "all_reduces": [(2, 6, 1), (4, 8, 1), (9, 13, 1)]}
    assert overlap_fraction(record) == pytest.approx((6 + 1) / (6 + 4))
    assert overlap_fraction({"backward": (0, 1), "all_reduces": []}) == 0.0


def test_pictures_draw_and_describe_themselves(monkeypatch):
    """Do the timeline, the loss curves and the sampler table draw, each with a text
    description?"""
    from distlab import collectives, data_parallel

    described = []
    monkeypatch.setattr(collectives, "_show", lambda fig, text: described.append(text))
    record = {"backward": (0.0, 0.01), "wait": (0.01, 0.012),
              "all_reduces": [(0.002, 0.004, 2**20), (0.008, 0.011, 2**21)]}
    data_parallel.show_timeline([record, record], "a step")
    data_parallel.show_loss_curves({"sync, 1 worker(s)": [1.0, 0.5], "async": [1.0, 0.7]})
    data_parallel.show_sampler([[[0, 2], [1, 0]]], 3)
    assert len(described) == 3
    assert "overlaps backward" in described[0] and "Final losses" in described[1]
    assert "rank 1 gets [1, 0]" in described[2]


def test_models_and_data_are_seeded():
    """Are mlp(), toy_model() and synthetic_digits() the same for the same seed, and is the
    toy model what the notebook says (6 tensors to all-reduce: one frozen, one tied)?"""
    import torch

    from distlab.data_parallel import flat_params, mlp, synthetic_digits, toy_model

    assert torch.equal(flat_params(mlp(seed=3)), flat_params(mlp(seed=3)))
    assert [p.shape[0] for p in mlp().parameters()] == [256, 256, 10, 10]
    a, b = synthetic_digits(50), synthetic_digits(50)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    model = toy_model()
    assert len([p for p in model.parameters() if p.requires_grad]) == 6
    assert len(list(model.named_parameters(remove_duplicate=False))) == 8
