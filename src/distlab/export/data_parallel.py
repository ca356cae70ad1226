"""03_data_parallel on torchrun: sync_sgd_step and DDPBucketed against one process training
on the whole batch, as the notebook checks them; DDPBucketed's step timed. These checks are
copied into the script (torch, dist and the runtime's names only)."""

import torch
import torch.distributed as dist

from distlab.export.runtime import allreduce_factor
from distlab.export.spec import Exportable


def check_sync_sgd_step(ranks, sync_sgd_step):
    """3 steps of synchronous SGD, each rank on its 1/N of every global batch, against
    torch.optim.SGD in this process on the whole batches (float64: rounding hides nothing)."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device

    def model():
        torch.manual_seed(0)  # every replica starts equal
        return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(),
                                   torch.nn.Linear(16, 4)).to(device, torch.float64)

    generator = torch.Generator().manual_seed(1)
    mine, oracle = model(), model()
    sgd = torch.optim.SGD(oracle.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4 * n, 20, generator=generator, dtype=torch.float64,
                        device="cpu").to(device)
        y = torch.randint(0, 4, (4 * n,), generator=generator, device="cpu").to(device)
        sync_sgd_step(mine, x.tensor_split(n)[rank], y.tensor_split(n)[rank], 0.1)
        sgd.zero_grad()
        torch.nn.functional.cross_entropy(oracle(x), y).backward()
        sgd.step()
        gap = max((a - b).abs().max().item()
                  for a, b in zip(mine.parameters(), oracle.parameters(), strict=True))
        assert gap < 1e-10, (f"step {step + 1}: rank {rank}'s weights differ from "
                             f"single-process SGD on the whole batch by {gap:.1e}")


def check_DDPBucketed(ranks, DDPBucketed):  # noqa: N802 - named after the exercise
    """Replicas that start apart (DDPBucketed broadcasts rank 0's), a bucket per parameter and
    one bucket for the whole model, 3 SGD steps against one process on the whole batch; then
    one training step timed, --bytes of gradients in 2 MiB buckets."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device

    def model(seed, width=16):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(),
                                   torch.nn.Linear(width, 4)).to(device)

    def train_step(ddp, optimizer, x, y):
        ddp.on_train_batch_start()
        (torch.nn.functional.cross_entropy(ddp(x), y) / n).backward()  # 3b's loop: scaled
        ddp.finish_gradient_synchronization()
        optimizer.step()
        optimizer.zero_grad()

    for bucket_size_mb in (1e-6, 100):
        ddp = DDPBucketed(model(seed=rank), bucket_size_mb=bucket_size_mb)
        oracle = model(seed=0)
        optimizer = torch.optim.SGD(ddp.module.parameters(), lr=0.1)
        sgd = torch.optim.SGD(oracle.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(1)
        for step in range(3):
            x = torch.randn(4 * n, 16, generator=generator, device="cpu").to(device)
            y = torch.randint(0, 4, (4 * n,), generator=generator, device="cpu").to(device)
            train_step(ddp, optimizer, x.tensor_split(n)[rank], y.tensor_split(n)[rank])
            torch.nn.functional.cross_entropy(oracle(x), y).backward()
            sgd.step()
            sgd.zero_grad()
            gap = max((a - b).abs().max().item() for a, b in
                      zip(ddp.module.parameters(), oracle.parameters(), strict=True))
            assert gap < 1e-5, (f"bucket_size_mb={bucket_size_mb:g}, step {step + 1}: rank "
                                f"{rank}'s weights differ from one process on the whole "
                                f"batch by {gap:.1e}")
    width = max(int((ranks.nbytes / 4) ** 0.5), 4)  # a width x width layer: --bytes of grads
    ddp = DDPBucketed(model(seed=0, width=width), bucket_size_mb=2)
    optimizer = torch.optim.SGD(ddp.module.parameters(), lr=0.01)
    x = torch.randn(32, width, device=device)
    y = torch.randint(0, 4, (32,), device=device)
    grad_bytes = sum(p.numel() * p.element_size() for p in ddp.module.parameters())
    ranks.bandwidth("one DDPBucketed step (forward + backward + gradient sync, 2 MiB buckets)",
                    lambda: train_step(ddp, optimizer, x, y), grad_bytes, allreduce_factor(n))
    dist.barrier()


EXERCISES = (
    Exportable("sync_sgd_step", check_sync_sgd_step, ("sync_sgd_step",)),
    Exportable("DDPBucketed", check_DDPBucketed, ("DDPBucketed",)),
)
