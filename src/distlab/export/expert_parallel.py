"""09_expert_parallel on torchrun: the MoE layer with expert parallelism (dispatch and combine
with all_to_all_single) against one process holding every expert, forward and backward, as the
notebook checks it. This check is copied into the script (torch, dist and the runtime's names
only). The layer's index bookkeeping runs on the CPU, so the check gives it a gloo group (made
beside NCCL where the world is on GPUs)."""

import torch
import torch.distributed as dist

from distlab.export.spec import Exportable


def check_ep_moe(ranks, ep_moe, route_top_k):
    """2 experts a rank, k = 2, a capacity factor of 1 (some assignments dropped), float64:
    each rank's output and the gradients of its tokens and its experts equal one process's."""
    import math

    rank, n = ranks.rank, ranks.world_size
    group = dist.new_group(backend="gloo")  # CPU tensors on any world
    hidden, ffn, local, tokens, k = 6, 8, 2, 9, 2
    experts = n * local
    cap = math.ceil(1.0 * k * tokens / experts)
    generator = torch.Generator().manual_seed(0)
    router = torch.randn(hidden, experts, generator=generator, dtype=torch.float64)
    w1 = torch.randn(experts, hidden, ffn, generator=generator, dtype=torch.float64) / 2
    w2 = torch.randn(experts, ffn, hidden, generator=generator, dtype=torch.float64) / 2
    xs = torch.randn(n, tokens, hidden, generator=generator, dtype=torch.float64)

    def expert(x, a, b):
        return torch.nn.functional.gelu(x @ a) @ b

    def one_process(x, w1, w2):  # the check is copied alone: its oracle inside
        chosen, gates, keep = route_top_k(x @ router, k, cap)
        rows = [torch.zeros(hidden, dtype=x.dtype) for _ in range(len(x))]
        for t, s in keep.nonzero().tolist():
            e = chosen[t, s]
            rows[t] = rows[t] + gates[t, s] * expert(x[t], w1[e], w2[e])
        return torch.stack(rows)

    mine = slice(rank * local, (rank + 1) * local)
    x = xs[rank].clone().requires_grad_()
    a, b = (w[mine].clone().requires_grad_() for w in (w1, w2))
    out = ep_moe(x, router, a, b, k, cap, group=group)
    out.pow(2).sum().backward()
    whole1, whole2, every = (t.clone().requires_grad_() for t in (w1, w2, xs))
    outs = [one_process(every[q], whole1, whole2) for q in range(n)]
    sum(o.pow(2).sum() for o in outs).backward()
    assert torch.allclose(out, outs[rank].detach(), atol=1e-10), (
        f"rank {rank}: the layer's output differs from one process's")
    assert torch.allclose(x.grad, every.grad[rank], atol=1e-10), (
        f"rank {rank}: the tokens' gradient differs from one process's")
    assert torch.allclose(a.grad, whole1.grad[mine], atol=1e-10) and torch.allclose(
        b.grad, whole2.grad[mine], atol=1e-10), (
        f"rank {rank}: its experts' gradients differ from one process's")


EXERCISES = (
    Exportable("ep_moe", check_ep_moe, ("ep_moe", "route_top_k")),
)
