"""08_context_parallel on torchrun: ring attention (contiguous and zig-zag chunks, causal and
not) and Ulysses against attention on the whole sequence, forward and backward, as the
notebook checks them. These checks are copied into the script (torch, dist and the runtime's
names only)."""

import torch

from distlab.export.spec import Exportable


def check_ring_attention(ranks, ring_attention):
    """Batch 2, 3 heads of 8, chunks of 4 positions, float64: each rank's output and q, k, v
    gradients equal attention on the whole sequence, causal and not, with one chunk per rank
    and with the zig-zag pairs (r, 2N - 1 - r)."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    length = 4

    def whole_attention(q, k, v, causal):  # the check is copied alone: its oracle inside
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    for chunks in ([[r] for r in range(n)], [[r, 2 * n - 1 - r] for r in range(n)]):
        for causal in (False, True):
            generator = torch.Generator().manual_seed(len(chunks[0]) + 2 * causal)
            seq = length * n * len(chunks[0])
            whole = [torch.randn(2, 3, seq, 8, generator=generator, dtype=torch.float64)
                     .to(device).requires_grad_() for _ in range(4)]
            want = whole_attention(*whole[:3], causal)
            want.backward(whole[3].detach())

            def mine(x, chunks=chunks):
                return torch.cat([x[..., c * length:(c + 1) * length, :] for c in chunks[rank]],
                                 dim=-2)

            q, k, v = (mine(t.detach()).clone().requires_grad_() for t in whole[:3])
            out = ring_attention(q, k, v, chunks, causal)
            out.backward(mine(whole[3].detach()))
            what = f"chunks {chunks}, causal={causal}: rank {rank}'s"
            assert torch.allclose(out, mine(want.detach()), atol=1e-10), f"{what} output"
            for name, got, w in zip("qkv", (q, k, v), whole[:3], strict=True):
                assert got.grad is not None and torch.allclose(got.grad, mine(w.grad),
                                                               atol=1e-10), (
                    f"{what} gradient of {name}")


def check_ulysses_attention(ranks, ulysses_attention):
    """Batch 2, 2N heads of 8, 4 positions per rank, float64: each rank's output and q, k, v
    gradients equal attention on the whole sequence, causal and not."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    length = 4

    def whole_attention(q, k, v, causal):  # the check is copied alone: its oracle inside
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    for causal in (False, True):
        generator = torch.Generator().manual_seed(7 + causal)
        whole = [torch.randn(2, 2 * n, n * length, 8, generator=generator, dtype=torch.float64)
                 .to(device).requires_grad_() for _ in range(4)]
        want = whole_attention(*whole[:3], causal)
        want.backward(whole[3].detach())
        part = slice(rank * length, (rank + 1) * length)
        q, k, v = (t.detach()[..., part, :].clone().requires_grad_() for t in whole[:3])
        out = ulysses_attention(q, k, v, causal)
        out.backward(whole[3].detach()[..., part, :])
        what = f"causal={causal}: rank {rank}'s"
        assert torch.allclose(out, want.detach()[..., part, :], atol=1e-10), f"{what} output"
        for name, got, w in zip("qkv", (q, k, v), whole[:3], strict=True):
            assert got.grad is not None and torch.allclose(got.grad, w.grad[..., part, :],
                                                           atol=1e-10), (
                f"{what} gradient of {name}")


EXERCISES = (
    Exportable("ring_attention", check_ring_attention, ("ring_attention",)),
    Exportable("ulysses_attention", check_ulysses_attention, ("ulysses_attention",)),
)
