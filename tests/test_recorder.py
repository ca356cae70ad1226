"""Does the recorder see a rank's communication by every route a learner could take, its matmul
FLOPs, what autograd saves, and what stays alive, so a hidden test can hold the idea's budget?"""

import torch

import distlab
from autograder.exercises.recorder import calls_of, describe, live_tensor_bytes, recording


def every_route(rank, world_size):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as functional

    t = torch.ones(4)
    group = dist.group.WORLD
    routes = {}
    for name, call in (
            ("module function", lambda: dist.all_reduce(t)),
            ("group method", lambda: group.allreduce([t]).wait()),
            ("backend method", lambda: group._get_backend(torch.device("cpu"))
             .allreduce([t]).wait()),
            ("functional", lambda: functional.all_reduce(t, "sum", group) + 0)):
        with recording(flops=False) as rec:
            call()
        routes[name] = rec.summary()
    return routes


def test_a_collective_is_seen_however_it_is_reached():
    """Is an all-reduce recorded once, with its bytes and group, whether it is called as
    dist.all_reduce, as the group's method, on the gloo backend object or functionally?"""
    for routes in distlab.run(every_route, world_size=2):
        for name, summary in routes.items():
            assert [(c["kind"], c["bytes"], c["group_size"]) for c in summary["calls"]] == \
                [("all_reduce", 16, 2)], name


def in_subgroups(rank, world_size):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as functional

    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    mine = evens if rank % 2 == 0 else odds
    t = torch.ones(2)
    with recording(flops=False) as rec:
        dist.all_reduce(t, group=mine)
        mine.allreduce([t]).wait()
        mine._get_backend(torch.device("cpu")).allreduce([t]).wait()
        functional.all_reduce(t, "sum", mine) + 0
        dist.all_reduce(t)
    return rec.summary()


def test_a_collective_names_the_members_of_its_group():
    """Is each call recorded with the global ranks of its group, by every route, so that two
    groups of the same size (a DP and a TP group) can be told apart?"""
    for rank, summary in enumerate(distlab.run(in_subgroups, world_size=4)):
        mine = [0, 2] if rank % 2 == 0 else [1, 3]
        assert [c["ranks"] for c in summary["calls"]] == [mine] * 4 + [[0, 1, 2, 3]], rank


def p2p_and_sharded(rank, world_size):
    import torch.distributed as dist

    with recording(flops=False) as rec:
        buffer = torch.zeros(6)
        request = dist.isend(buffer, (rank + 1) % world_size)
        dist.recv(torch.empty(6), (rank - 1) % world_size)
        request.wait()
        out = torch.empty(3 * world_size)
        dist.all_gather_into_tensor(out, torch.ones(3))
        dist.reduce_scatter_tensor(torch.empty(3), torch.ones(3 * world_size))
    return rec.summary()


def test_point_to_point_and_sharded_collectives_count_their_bytes():
    """Do isend and recv record their peer and bytes, an all-gather its full output and a
    reduce-scatter its full input?"""
    for rank, summary in enumerate(distlab.run(p2p_and_sharded, world_size=3)):
        [send], [recv] = calls_of(summary, "send"), calls_of(summary, "recv")
        assert (send["bytes"], send["peer"]) == (24, (rank + 1) % 3)
        assert (recv["bytes"], recv["peer"]) == (24, (rank - 1) % 3)
        assert [c["bytes"] for c in calls_of(summary, "all_gather", "reduce_scatter")] == [36, 36]
        assert describe(summary).startswith("1 send (24 B), 1 recv (24 B)")


def test_flops_and_saved_bytes():
    """Are a matmul's forward and backward FLOPs counted, and the tensors autograd saves?"""
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 4, requires_grad=True)
    with recording() as rec:
        (x @ w).sum().backward()
    assert rec.flops == 3 * 2 * 8 * 16 * 4  # forward, and the two gradients
    assert rec.saved_bytes == (8 * 16 + 16 * 4) * 4
    assert describe(rec.summary()) == "no communication"


def test_live_bytes_see_a_hidden_tensor():
    """Does live_tensor_bytes count a tensor however it is kept (here in a closure), and leave
    out the ones it is told to exclude?"""
    before = live_tensor_bytes()
    hidden = torch.zeros(1000)
    keep = (lambda: hidden)  # noqa: E731 - held only by the closure
    assert live_tensor_bytes() - before >= 4000
    assert live_tensor_bytes(hidden) - before < 4000
    assert keep() is hidden
