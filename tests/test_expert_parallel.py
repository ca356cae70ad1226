"""Notebook 09 (expert parallelism): what is particular to it: the blank release earning
nothing, the hidden tests naming the broken idea (the queue order, the dispatch's rows, the
expert gradients' divisor and group), the byte check's routing telling the wrong counts apart,
and distlab.expert_parallel's counter and pictures showing what they say. (What every exercise
promises: tests/test_contract.py.) The layer is compared with one process holding every expert
(in the hidden tests, against that module's oracles).

Run: .venv/bin/python -m pytest tests/test_expert_parallel.py -q
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

ASSIGNMENT = "09_expert_parallel"
nb = Notebook(ASSIGNMENT)
PURE = ["route_top_k", "balance_loss", "predict_a2a_bytes"]
ON_RANKS = ["ep_moe", "sync_ep_dp_grads"]


@pytest.mark.parametrize("name", PURE + ON_RANKS)
def test_the_blank_release_earns_nothing_and_says_so(name):
    """Graded as released (every blank `_____`), does each exercise earn 0 with its blanks
    named as not filled, rather than crash?"""
    released_earns_nothing(nb, name)


def test_the_router_queues_first_choices_before_second_ones():
    """Does the solved router keep the notebook's picture as its check says, and does the
    token-by-token order fail naming the rule?"""
    import torch

    route = reference.reference("route_top_k")
    scores = torch.full((5, 3), -4.0)
    for token, (first, second) in enumerate([(0, 1), (0, 2), (1, 0), (0, 1), (2, 1)]):
        scores[token, first] += 7.0
        scores[token, second] += 5.0
    _, _, keep = route(scores, 2, 2)
    assert keep.tolist() == [[True, True], [True, True], [True, False], [False, False],
                             [True, False]]
    complaint = fails("route_top_k", nb.variant(
        "route_top_k", 1, "queue = experts.reshape(-1); onehot = F.one_hot(queue, E); "
        "place = (onehot.cumsum(0) * onehot).sum(1) - 1; keep = (place < cap).reshape(T, k)"))
    assert "first choice" in complaint, complaint


def test_the_balance_loss_is_one_when_balanced_and_needs_the_probabilities():
    """Is the solved loss 1 for uniform routing, and does a loss of the loads alone (no
    gradient) fail?"""
    import torch

    loss = reference.reference("balance_loss")
    value = loss(torch.zeros(6, 3), torch.arange(6).remainder(3).unsqueeze(1))
    assert abs(value.item() - 1) < 1e-6
    complaint = fails("balance_loss", nb.variant("balance_loss", 1,
                                                 "E * (first_share * first_share).sum()"))
    assert "no gradient" in complaint, complaint


@pytest.mark.parametrize(("wrong", "says"), [
    ("group, _ = dist.new_subgroups_by_enumeration([list(range(e, N, ep)) for e in range(ep)]); "
     "divisor = dist.get_world_size(group)", "divided by"),
    ("group = None; divisor = N", "over the world"),
    ("group, _ = dist.new_subgroups_by_enumeration([list(range(d * ep, d * ep + ep)) for d in "
     "range(N // ep)]); divisor = N", "copies"),
])
def test_expert_gradients_reduced_the_wrong_way_are_named(wrong, says):
    """Do the copies' average (EP times too large), a reduction over the world and one over the
    EP groups fail with a message that says which?"""
    wrong = "N = dist.get_world_size(); " + wrong  # the blank names the world's size itself
    complaint = fails("sync_ep_dp_grads", nb.variant("sync_ep_dp_grads", 1, wrong))
    assert says in complaint, complaint


def test_rows_sent_where_no_expert_waits_are_named():
    """Does a dispatch that gives every rank its own counts as split sizes fail (the counts
    never exchanged)?"""
    complaint = fails("ep_moe", nb.variant("ep_moe", 1, "recv_counts = send_counts.clone()"))
    assert "split sizes" in complaint, complaint


def test_the_counter_sees_the_rows_each_rank_gets():
    """Does count_all_to_all record each all_to_all_single's rows per rank (given split sizes
    and equal pieces) and the bytes that leave the rank, also through torch.distributed.nn?"""
    import torch
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    from distlab import run
    from distlab.expert_parallel import count_all_to_all

    def on_rank(rank, world_size):
        with count_all_to_all() as calls:
            out = torch.empty(4, 3)
            dist.all_to_all_single(out, torch.full((4, 3), float(rank)))
            sends = [1, 2] if rank == 0 else [3, 0]
            recvs = [1, 3] if rank == 0 else [2, 0]
            x = torch.ones(sum(sends), 3, dtype=torch.float64, requires_grad=True)
            all_to_all_single(x.new_empty(sum(recvs), 3), x, recvs, sends)
        return calls.rows, calls.off_rank_bytes(rank)

    (rows0, off0), (rows1, off1) = run(on_rank, world_size=2)
    assert rows0 == [[2, 2], [1, 2]] and rows1 == [[2, 2], [3, 0]]
    assert off0 == [2 * 12, 2 * 24] and off1 == [2 * 12, 3 * 24]


def test_the_pictures_draw(monkeypatch):
    """Do show_loads and show_bytes draw without error, outside a notebook?"""
    import matplotlib

    matplotlib.use("Agg")
    from distlab.expert_parallel import show_bytes, show_loads

    totals = show_loads([("before", [5, 1, 0, 2]), ("after", [2, 2, 2, 2])], 2, "loads")
    assert totals == [[6, 2], [4, 4]]
    show_bytes([("rank 0", {"yours": 10, "measured": 10})], "bytes")


def test_ep_group_is_the_grid_row():
    """Does distlab's ep_group give each rank the row of ep consecutive ranks it is in?"""
    import torch.distributed as dist

    from distlab import run
    from distlab.expert_parallel import ep_group

    def on_rank(rank, world_size):
        return [dist.get_process_group_ranks(ep_group(ep)) for ep in (1, 2, 4)]

    got = run(on_rank, world_size=4)
    assert got == [[[r], [r - r % 2, r - r % 2 + 1], [0, 1, 2, 3]] for r in range(4)]


def test_the_visible_checks_tell_the_wrong_answers_apart():
    """Does the route picture keep different assignments in token order than in choice order,
    and does the equal-loads batch with lopsided probabilities give 1 for the loss but not for
    E * sum(P**2) (so the visible checks reject both)?"""
    import torch
    from autograder.exercises.expert_parallel import _oracle_route, _oracle_token_order_keep

    picture = torch.full((5, 3), -4.0)
    for token, (first, second) in enumerate([(0, 1), (0, 2), (1, 0), (2, 1), (2, 1)]):
        picture[token, first], picture[token, second] = 3.0, 1.0
    right = _oracle_route(picture, 2, 2)[2]
    assert right == [[True, True], [True, False], [True, False], [True, False], [True, False]]
    assert _oracle_token_order_keep(picture, 2, 2) != right
    experts = torch.arange(8).remainder(4).unsqueeze(1)
    lopsided = torch.zeros(8, 4)
    lopsided[torch.arange(8), experts[:, 0]] = torch.tensor([4.0, 0.5, 0.5, 0.5]).repeat(2)
    loss = reference.reference("balance_loss")
    assert abs(loss(lopsided, experts).item() - 1) < 1e-6
    assert abs(4 * (lopsided.softmax(-1).mean(0) ** 2).sum().item() - 1) > 0.05


def test_the_bytes_check_tells_the_wrong_counts_apart():
    """On the byte check's own routing (4 ranks, 8 experts, k = 2, factor 1.25, seed 3), do
    the counts with dropped assignments, with the rows for a rank's own experts, or with one
    row a token differ from the right dispatch, and the dispatch from the combine (so the
    visible check rejects each)?"""
    from autograder.exercises.expert_parallel import _oracle_bytes

    moe = reference.module(ASSIGNMENT)
    router, _, _, xs = moe.make_moe(8, 16, 4, seed=3)
    cap = moe.capacity(16, 8, 2, 1.25)
    routings = [moe.route_top_k(xs[r] @ router, 2, cap) for r in range(4)]
    lists = ([r[0].tolist() for r in routings], [r[2].tolist() for r in routings])
    assert any(not kept for keep in lists[1] for row in keep for kept in row), "no drop"
    dispatch, combine = _oracle_bytes(*lists, 2, 48)
    assert dispatch != combine
    for wrong in ({"dropped": True}, {"own": True}, {"per_token": True}):
        assert _oracle_bytes(*lists, 2, 48, **wrong)[0] != dispatch, wrong
    for wrong in ({"dropped": True}, {"own": True}):
        assert _oracle_bytes(*lists, 2, 48, **wrong)[1] != combine, wrong
    assert reference.reference("predict_a2a_bytes")(
        [r[0] for r in routings], [r[2] for r in routings], 2, 48) == (dispatch, combine)
