"""Notebook 08 (context parallelism): what is particular to it: the release earning nothing,
the judge, the distlab helpers (attention, saved_bytes, count_bytes) against torch, and the
notebook's numbers. (What every exercise promises: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_context_parallel.py -q   (about 60 s on 2 idle cores)
"""

import sys

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

ASSIGNMENT = "08_context_parallel"
nb = Notebook(ASSIGNMENT)
EXERCISES = ["merge_block", "RingPass", "ring_attention", "zigzag_chunks", "ulysses_attention",
             "predicted_bytes"]


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_earns_every_point_and_the_release_none(name):
    """Graded in the kernel, does the solved function earn every point, and the released one
    (every blank `_____`) none, reported as not filled?"""
    reference_earns_every_point(name)
    released_earns_nothing(nb, name)


@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("ring_attention", 2, "False, causal and b == a"),  # on ranks in the judge's runner
    ("ulysses_attention", 1, "send = x.reshape(b, h // n, n, length, d).permute(2, 0, 1, 3, 4)"
                             ".contiguous(); got = all_to_all(send); return got.permute(1, 2, "
                             "0, 3, 4).reshape(b, h // n, n * length, d)"),
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does one wrong blank cost exactly that blank's point?"""
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    earned, possible, report = nb.judge_verdict(name, number, wrong)
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


def test_a_broken_merge_block_does_not_cost_ring_attention():
    """With a wrong merge_block and RingPass in the notebook, does ring_attention still pass
    (its test runs it with trusted ones)?"""
    fn = reference.reference("ring_attention")

    def no_merge(m, l, acc, scores, v):  # noqa: E741
        return m, l, acc

    globs = dict(fn.__globals__, merge_block=no_merge, RingPass=None)
    broken = type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)
    assert fails("ring_attention", broken, ignore_warnings=True) == ""


# ---------------------------------------------------------------- distlab's helpers


def test_attention_is_torch_scaled_dot_product_attention():
    import torch
    import torch.nn.functional as F

    from distlab.context_parallel import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 5, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert torch.allclose(attention(q, k, v, causal), want)


def test_saved_bytes_grows_with_the_square_of_the_sequence():
    """Does what autograd keeps for attention grow 4x when the sequence doubles (for long
    enough sequences), and does it leave the inputs out?"""
    import torch

    from distlab.context_parallel import attention, saved_bytes

    def kept(length):
        q, k, v = (torch.randn(1, 2, length, 8, requires_grad=True) for _ in range(3))
        return saved_bytes(lambda a, b, c: attention(a, b, c, causal=True), q, k, v)

    assert kept(512) / kept(256) == pytest.approx(4, rel=0.05)
    x = torch.randn(10, requires_grad=True)
    assert saved_bytes(lambda t: (t * t).sum(), x) == 0  # only x itself is kept


def _counted(rank, world_size):
    import torch
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    from distlab.context_parallel import count_bytes

    x = torch.ones(4 * world_size, 3, dtype=torch.float64)
    with count_bytes() as sent:
        request = dist.isend(x[:2].contiguous(), dst=(rank + 1) % world_size)
        buf = torch.empty(2, 3, dtype=torch.float64)
        dist.recv(buf, src=(rank - 1) % world_size)
        request.wait()
        all_to_all_single(torch.empty_like(x), x)
    return sent.total("isend"), sent.total("all_to_all_single"), sent.count()


@pytest.mark.usefixtures("stop_ranks")
def test_count_bytes_counts_what_leaves_the_rank():
    """isend: its tensor; all_to_all_single: its input but the rank's own piece."""
    from distlab import run

    for n in (2, 4):
        for isend, a2a, count in run(_counted, world_size=n):
            assert isend == 2 * 3 * 8
            assert a2a == (n - 1) * 4 * 3 * 8
            assert count == 2


# ---------------------------------------------------------------- the notebook's numbers


def test_the_quoted_128k_score_bytes():
    """§1: 4 heads of a 128k sequence, float32 scores: 256 GiB."""
    assert 4 * (2**17) ** 2 * 4 == 256 * 2**30


def test_zigzag_balances_and_contiguous_does_not():
    """§4: under a causal mask, contiguous chunks give rank r r + 1 pairs; zig-zag 2N + 1."""
    zigzag = reference.reference("zigzag_chunks")
    for n in range(1, 9):
        work = [sum(a + 1 for a in zigzag(r, n)) for r in range(n)]
        assert work == [2 * n + 1] * n


def test_the_ring_pass_checker_catches_a_gradient_sent_the_wrong_way(capsys):
    """check_ring_pass: the right gradients (x_r's: the weight of rank r + 1) pass; the ones a
    backward sending the forward's way gives (rank r - 1's weight) fail, with a ✗ printed."""
    from distlab.context_parallel import check_ring_pass

    def weight(rank):
        return 10.0 + rank

    n = 4
    right = [([float(r)], [float((r - 1) % n)], [weight((r + 1) % n)]) for r in range(n)]
    wrong = [([float(r)], [float((r - 1) % n)], [weight((r - 1) % n)]) for r in range(n)]
    assert check_ring_pass(right, weight)
    assert "✗" not in capsys.readouterr().out
    assert not check_ring_pass(wrong, weight)
    assert "✗" in capsys.readouterr().out
