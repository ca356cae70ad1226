"""Shortcuts of notebook 04 (tensor parallelism): blank fills that earn the values without the
idea (the whole weight gathered and the whole matmul done on every rank, the wrong collective
with zero padding, an all-gather and a local sum in place of an all-reduce, an all-reduce and a
slice in place of a reduce-scatter), and correct answers written otherwise. Each rank receives
only its own shard of the linear layers' weights, so "use the full weight" must gather it."""

from shortcuts import Shortcut


def _gathered(t: str, dim: int = 0) -> str:
    """An expression: every rank's t, all-gathered and joined along dim (the whole weight)."""
    return (f"(lambda ps: (dist.all_gather(ps, {t}), torch.cat(ps, dim={dim}))[1])"
            f"([torch.empty_like({t}) for _ in range(world_size)])")


def _summed_by_gather(t: str) -> str:
    """A statement-expression: t replaced in place by the sum of every rank's t, computed from
    an all-gather (an all-reduce's values without an all-reduce)."""
    return (f"(lambda ps: (dist.all_gather(ps, {t}), {t}.copy_(torch.stack(ps).sum(0))))"
            f"([torch.empty_like({t}) for _ in range(dist.get_world_size())])")


PADDED = ("torch.cat([x @ w_shard.t() + b_shard if q == rank else "
          "torch.zeros(*x.shape[:-1], w_shard.shape[0], dtype=x.dtype) "
          "for q in range(world_size)], dim=-1)")

SHORTCUTS = [
    # column-parallel forward
    Shortcut("column_parallel_forward",
             {1: f"F.linear(x, {_gathered('w_shard')}, {_gathered('b_shard')})", 2: "pass",
              3: "y_shard"},
             "gather the whole weight, every rank does the whole matmul", "all_gather"),
    Shortcut("column_parallel_forward", {1: PADDED, 2: "dist.all_reduce(y_shard)", 3: "y_shard"},
             "zero-padded columns all-reduced", "all_gather"),
    # row-parallel forward
    Shortcut("row_parallel_forward",
             {1: f"F.linear({_gathered('x_shard', -1)}, {_gathered('w_shard', 1)})", 2: "pass"},
             "all-gather the weight and the input, whole matmul, no all-reduce", "all_reduce"),
    Shortcut("row_parallel_forward", {2: _summed_by_gather("partial")},
             "the partial sums all-gathered and added locally", "all_reduce"),
    # column-parallel backward
    Shortcut("column_parallel_backward",
             {2: f"{_gathered('grad_y_shard', 1)} @ {_gathered('w_shard')}",
              3: "dist.all_reduce(torch.zeros(1, dtype=grad_x.dtype))"},
             "the whole weight gathered, a no-op all-reduce", "all_reduce"),
    Shortcut("column_parallel_backward", {3: _summed_by_gather("grad_x")},
             "the terms of dL/dx all-gathered and added locally", "all_reduce"),
    # row-parallel backward
    Shortcut("row_parallel_backward",
             {2: f"(grad_y @ {_gathered('w_shard', 1)})"
                 f".chunk(world_size, dim=-1)[rank].contiguous()"},
             "the whole weight gathered for dL/dx", "all_gather"),
    Shortcut("row_parallel_backward",
             {3: "[p.copy_(q) for p, q in zip(pieces, (lambda z: (dist.all_reduce(z), "
                 "z.chunk(world_size, dim=-1))[1])(torch.cat([grad_x_shard if k == rank else "
                 "torch.zeros_like(grad_x_shard) for k in range(world_size)], dim=-1)))]"},
             "zero-padded columns of dL/dx all-reduced", "all_gather"),
    # f and g
    Shortcut("megatron_f_g", {3: "(lambda t: (" + _summed_by_gather("t") + ", t)[1])"
                                 "(partial.clone())"},
             "g's sum from an all-gather", "all_reduce"),
    Shortcut("megatron_f_g", {1: "all_reduce_sum(x * 0) + x"},
             "a needless all-reduce in f's forward", "no communication"),
    # the MLP (full weights: choosing the part is the exercise)
    Shortcut("tp_mlp", {2: "F.gelu(F.linear(x, w1, b1))",
                        3: "F.linear(hidden, w2) + b2"},
             "every rank computes the whole MLP", "all_reduce"),
    Shortcut("tp_mlp", {2: "F.gelu(F.linear(f.apply(x), w1, b1))",
                        3: "g.apply(F.linear(hidden, w2) / world_size) + b2"},
             "the whole MLP on every rank, divided by N before g", "FLOPs"),
    # attention
    Shortcut("tp_attention", {1: "slice(0, x.shape[-1])", 2: "wo / world_size"},
             "every rank computes every head", "FLOPs"),
    Shortcut("tp_attention",
             {1: "slice(0, x.shape[-1])",
              2: "wo * (torch.arange(wo.shape[1]) // (wo.shape[1] // world_size) == rank)"},
             "every head computed, the other ranks' masked out", "FLOPs"),
    # sequence parallelism
    Shortcut("sp_all_reduce",
             {1: "(dist.all_reduce(t), part.copy_(t.chunk(world_size)[rank]))",
              2: "total.copy_(t)"},
             "an all-reduce, then a chunk", "reduce_scatter"),
    Shortcut("sp_all_reduce",
             {1: "part.copy_((lambda ps: (dist.all_gather(ps, t), torch.stack(ps).sum(0))[1])"
                 "([torch.empty_like(t) for _ in range(world_size)]).chunk(world_size)[rank])"},
             "every rank's whole tensor all-gathered and summed", "reduce_scatter"),
    Shortcut("sp_f_g", {1: "all_reduce_sum(grad).chunk(dist.get_world_size())"
                           "[dist.get_rank()].contiguous()"},
             "enter's backward as an all-reduce and a slice", "reduce_scatter"),
    Shortcut("sp_f_g", {2: "all_reduce_sum(torch.cat([grad if k == dist.get_rank() else "
                           "torch.zeros_like(grad) for k in range(dist.get_world_size())]))"},
             "leave's backward as an all-reduce of zero-padded rows", "all_gather"),
]

HONEST = [
    Shortcut("column_parallel_forward", {1: "F.linear(x, w_shard, b_shard)",
                                         3: "torch.cat(pieces, dim=x.dim() - 1)"},
             "F.linear and a positive dim"),
    Shortcut("row_parallel_forward", {1: "torch.matmul(x_shard, w_shard.T)",
                                      2: "dist.all_reduce(partial)", 3: "bias + partial"},
             "matmul, the default op, the bias first"),
    Shortcut("column_parallel_backward", {1: "(x.t() @ grad_y_shard).t()",
                                          3: "dist.all_reduce(grad_x)"},
             "the transpose of the other product"),
    Shortcut("row_parallel_backward", {3: "dist.all_gather(pieces, grad_x_shard.contiguous())"},
             "a contiguous copy gathered"),
    Shortcut("megatron_f_g", {1: "x.clone()", 4: "grad.clone()"}, "copies for the identities"),
    Shortcut("tp_mlp", {1: "shard(w2, rank, world_size, dim=-1)",
                        3: "g.apply(hidden @ w2_shard.t()) + b2"},
             "the last dimension, the product written out"),
    Shortcut("tp_attention", {1: "slice(rank * x.shape[-1] // world_size, "
                                 "(rank + 1) * x.shape[-1] // world_size)"},
             "the rows from the width"),
    Shortcut("sp_all_reduce", {1: "dist.reduce_scatter_single(part, t)"}, "the default op"),
    Shortcut("sp_f_g", {1: "scatter_rows(grad.clone())", 2: "gather_rows(grad.contiguous())"},
             "copies through the helpers"),
]
