"""05_pipeline_parallel on torchrun: run_stage with the learner's 1F1B order, against the
unsplit model, as the notebook checks it. This check is copied into the script (torch, dist
and the runtime's names only)."""

import torch

from distlab.export.spec import Exportable


def check_run_stage(ranks, run_stage, one_f_one_b_order):
    """One training step of N stages (one per rank), 2N micro-batches in your 1F1B order:
    every stage's gradients and the losses equal the unsplit model's, and no stage holds more
    micro-batches than 1F1B allows (stage s: N - s)."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    stages, microbatches, width, rows = n, 2 * n, 8, 4

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[
            torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
            for _ in range(stages)]).to(device)

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(microbatches * rows, width, generator=generator, device="cpu").to(device)
    y = torch.randn(microbatches * rows, width, generator=generator, device="cpu").to(device)
    unsplit = model()
    torch.nn.functional.mse_loss(unsplit(x), y).backward()
    expected_losses = [torch.nn.functional.mse_loss(unsplit(a), b).item()
                       for a, b in zip(x.split(rows), y.split(rows), strict=True)]
    stage = model()[rank]
    order = one_f_one_b_order(stages, microbatches)
    inputs = list(x.split(rows)) if rank == 0 else None
    targets = list(y.split(rows)) if rank == n - 1 else None
    losses, peak = run_stage(rank, n, stage, order[rank], inputs, targets, (rows, width))
    for got, want in zip(stage.parameters(), unsplit[rank].parameters(), strict=True):
        assert got.grad is not None and torch.allclose(got.grad, want.grad, atol=1e-6), (
            f"stage {rank}'s gradients differ from the unsplit model's")
    if rank == n - 1:
        assert torch.allclose(torch.tensor(losses), torch.tensor(expected_losses),
                              atol=1e-6), "the micro-batch losses differ from the unsplit model's"
    assert peak <= min(stages - rank, microbatches), (
        f"stage {rank} held {peak} micro-batches at once; 1F1B holds at most {stages - rank}")


EXERCISES = (
    Exportable("run_stage", check_run_stage, ("run_stage", "one_f_one_b_order")),
)
