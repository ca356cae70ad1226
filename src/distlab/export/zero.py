"""06_zero on torchrun: ShardedOptimizer (ZeRO-1, with the learner's assign_params) against
the optimizer it wraps, as the notebook checks it. This check is copied into the script
(torch, dist and the runtime's names only)."""

import torch
import torch.distributed as dist

from distlab.export.spec import Exportable


def check_ShardedOptimizer(ranks, ShardedOptimizer):  # noqa: N802, N803 - the exercise's name
    """3 AdamW steps of a small float64 model, each rank on its 1/N of the batch, gradients
    averaged with dist.all_reduce: every rank's parameters equal AdamW's on the whole batch in
    one process, and each parameter's optimizer state is held by one rank only."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    kwargs = {"lr": 0.05, "weight_decay": 0.1}

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4),
                                   torch.nn.Tanh(), torch.nn.Linear(4, 3)).to(device,
                                                                                torch.float64)

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(4 * n, 6, generator=generator, dtype=torch.float64, device="cpu").to(device)
    y = torch.randn(4 * n, 3, generator=generator, dtype=torch.float64, device="cpu").to(device)
    mine, oracle = model(), model()
    sharded = ShardedOptimizer(mine.parameters(), torch.optim.AdamW, **kwargs)
    adamw = torch.optim.AdamW(oracle.parameters(), **kwargs)
    for step in range(3):
        sharded.zero_grad()
        torch.nn.functional.mse_loss(mine(x.chunk(n)[rank]), y.chunk(n)[rank]).backward()
        for p in mine.parameters():  # DDP's part, as the notebook's check does it
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        sharded.step()
        adamw.zero_grad()
        torch.nn.functional.mse_loss(oracle(x), y).backward()
        adamw.step()
        gap = max((a - b).abs().max().item()
                  for a, b in zip(mine.parameters(), oracle.parameters(), strict=True))
        assert gap < 1e-10, (f"step {step + 1}: rank {rank}'s parameters differ from AdamW's "
                             f"on the whole batch by {gap:.1e}")
    held = torch.tensor([float(len(sharded.local.state))], device=device)
    dist.all_reduce(held, op=dist.ReduceOp.SUM)
    count = len(list(mine.parameters()))
    assert held.item() == count, (f"the ranks hold optimizer state for {held.item():.0f} "
                                  f"parameters in all: each of the {count} has one owner")


EXERCISES = (
    Exportable("ShardedOptimizer", check_ShardedOptimizer, ("ShardedOptimizer",)),
)
