"""01_collectives on torchrun: hello_allreduce and ring_allreduce_p2p, checked as in the
notebook and timed against dist.all_reduce. These checks are copied into the script (torch,
dist and the runtime's names only)."""

import torch
import torch.distributed as dist

from distlab.export.runtime import allreduce_factor
from distlab.export.spec import Exportable


def check_hello_allreduce(ranks, hello_allreduce):
    """The notebook's check: every rank returns 1 + 2 + ... + N."""
    total = hello_allreduce(ranks.rank, ranks.world_size)
    expected = ranks.world_size * (ranks.world_size + 1) / 2
    assert total == expected, (f"rank {ranks.rank} returned {total}, expected 1 + ... + "
                               f"{ranks.world_size} = {expected}")


def check_ring_allreduce_p2p(ranks, ring_allreduce_p2p):
    """The notebook's check: your ring next to dist.all_reduce on each rank's own random
    tensor, sum and mean, a length that is no multiple of N and one shorter than N; then both
    timed on --bytes of float32."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    for op in ("sum", "mean"):
        for length in (1001, 3):
            generator = torch.Generator().manual_seed(rank)
            x = torch.randn(length, generator=generator, device="cpu").to(device)
            expected = x.clone()
            dist.all_reduce(expected)  # the default reduction adds
            if op == "mean":
                expected /= n
            mine = ring_allreduce_p2p(rank, n, x.clone(), op=op)
            assert torch.allclose(mine, expected, rtol=1e-5, atol=1e-5), (
                f"op={op!r}, length {length}: rank {rank}'s result differs from dist.all_reduce's")
    x = torch.ones(max(ranks.nbytes // 4, n), device=device)
    ranks.bandwidth("your ring_allreduce_p2p", lambda: ring_allreduce_p2p(rank, n, x),
                    x.numel() * 4, allreduce_factor(n))
    ranks.bandwidth("dist.all_reduce        ", lambda: dist.all_reduce(x), x.numel() * 4,
                    allreduce_factor(n))


EXERCISES = (
    Exportable("hello_allreduce", check_hello_allreduce, ("hello_allreduce",),
               joins_group_itself=True),
    Exportable("ring_allreduce_p2p", check_ring_allreduce_p2p, ("ring_allreduce_p2p",)),
)
