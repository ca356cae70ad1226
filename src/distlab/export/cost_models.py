"""02_cost_models on torchrun: the speed challenge's fast_all_reduce, checked against
dist.all_reduce and scored as in the notebook (distlab.challenge): the runtime's `race`, your
busbw over the library's. These checks are copied into the script (torch, dist and the
runtime's names only)."""

import torch
import torch.distributed as dist

from distlab.export.runtime import allreduce_factor, race
from distlab.export.spec import Exportable


def check_fast_all_reduce(ranks, fast_all_reduce):
    """Your all-reduce against dist.all_reduce on each rank's own random tensor (a length that
    is no multiple of N and one shorter than N), then raced against it on --bytes of float32:
    median of --repeats paired runs."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    for length in (1001, 3):
        x = torch.randn(length, generator=torch.Generator().manual_seed(rank)).to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        fast_all_reduce(x)
        assert torch.allclose(x, expected, rtol=1e-4, atol=1e-4), (
            f"length {length}: rank {rank}'s result differs from dist.all_reduce's")
    x = torch.randn(max(ranks.nbytes // 4, n), device=device)
    mine, library, score = race(fast_all_reduce, x, ranks.repeats, ranks.synchronize)
    nbytes, factor = x.numel() * 4, allreduce_factor(n)
    ranks.say(f"  race at {nbytes / 2**20:.2f} MiB on {n} ranks ({ranks.backend}), median of "
              f"{ranks.repeats} paired runs: yours {mine * 1e3:.3f} ms, busbw "
              f"{nbytes / mine * factor / 1e9:.3f} GB/s; dist.all_reduce {library * 1e3:.3f} "
              f"ms, busbw {nbytes / library * factor / 1e9:.3f} GB/s; score {score:.2f}")


EXERCISES = (
    Exportable("fast_all_reduce", check_fast_all_reduce, ("fast_all_reduce",)),
)
