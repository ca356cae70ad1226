"""Shortcuts of notebook 04 (tensor parallelism): blank fills that earn the values without the
idea (the whole weight gathered and the whole matmul done on every rank, the wrong collective
with zero padding, an all-gather and a local sum in place of an all-reduce, an all-reduce and a
slice in place of a reduce-scatter, an in-place all-reduce where g belongs, the whole first
layer as a broadcast multiply-and-sum), and correct answers written otherwise. Each rank
receives only its own shard of the linear layers' weights, so "use the full weight" must gather
it."""

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


def _padded(t: str) -> str:
    """Every rank's t at its own place along the last dimension, zeros elsewhere."""
    return (f"torch.cat([{t} if q == rank else torch.zeros_like({t}) "
            "for q in range(world_size)], dim=-1)")


MLP_CUTS = ("w1_mine, b1_mine, w2_mine = shard(w1, rank, world_size, dim=0), "
            "shard(b1, rank, world_size, dim=0), shard(w2, rank, world_size, dim=1); ")

BROADCAST_FIRST_LAYER = ("F.gelu(((f.apply(x)[..., None, :] * w1).sum(-1) + b1)"
                         ".chunk(world_size, dim=-1)[rank])")

SHORTCUTS = [
    # the weight cut by rows
    Shortcut("column_parallel_forward",
             {1: f"y = F.linear(x, {_gathered('w_shard')}, {_gathered('b_shard')})"},
             "gather the whole weight, every rank does the whole matmul", "all_gather"),
    Shortcut("column_parallel_forward", {1: f"y = {_padded('y_mine')}; dist.all_reduce(y)"},
             "zero-padded columns all-reduced", "all_gather"),
    # the weight cut by columns
    Shortcut("row_parallel_forward",
             {1: f"y = F.linear({_gathered('x_shard', -1)}, {_gathered('w_shard', 1)}, bias)"},
             "all-gather the weight and the input, whole matmul, no all-reduce", "all_reduce"),
    Shortcut("row_parallel_forward",
             {1: f"partial = F.linear(x_shard, w_shard); {_summed_by_gather('partial')}; "
                 "y = partial + bias"},
             "the partial sums all-gathered and added locally", "all_reduce"),
    # their backward
    Shortcut("column_parallel_backward",
             {1: f"grad_x = {_gathered('grad_y_shard', 1)} @ {_gathered('w_shard')}"},
             "the whole weight and dL/dy gathered, dL/dx recomputed whole", "all_reduce"),
    Shortcut("column_parallel_backward",
             {1: "grad_x = grad_y_shard @ w_shard; " + _summed_by_gather("grad_x")},
             "the terms of dL/dx all-gathered and added locally", "all_reduce"),
    Shortcut("row_parallel_backward", {1: f"grad_x = grad_y @ {_gathered('w_shard', 1)}"},
             "the whole weight gathered for dL/dx", "all_gather"),
    Shortcut("row_parallel_backward",
             {1: f"grad_x = {_padded('grad_x')}; dist.all_reduce(grad_x)"},
             "zero-padded columns of dL/dx all-reduced", "all_gather"),
    # f and g
    Shortcut("megatron_f_g",
             {1: "f_backward, g_backward = (lambda grad: (lambda t: (" + _summed_by_gather("t")
                 + ", t)[1])(grad.clone())), (lambda grad: grad)"},
             "f's backward sum from an all-gather", "all_reduce"),
    Shortcut("megatron_f_g",
             {1: "f_backward, g_backward = all_reduce_sum, (lambda grad: all_reduce_sum(grad * 0) "
                 "+ grad)"},
             "a needless all-reduce in g's backward", "no communication"),
    # the MLP (full weights: choosing the part is the exercise)
    Shortcut("tp_mlp", {1: MLP_CUTS + "hidden = F.gelu(F.linear(f.apply(x), w1_mine, b1_mine)); "
                           "y = all_reduce_sum(F.linear(hidden, w2_mine)) + b2"},
             "an in-place all-reduce where g belongs (backward as the identity, with a warning)",
             "autograd"),
    Shortcut("tp_mlp", {1: MLP_CUTS + "hidden = " + BROADCAST_FIRST_LAYER
                           + "; y = g.apply(F.linear(hidden, w2_mine)) + b2"},
             "the whole first layer as a broadcast multiply-and-sum, then sliced", "work"),
    Shortcut("tp_mlp", {1: "y = F.linear(F.gelu(F.linear(x, w1, b1)), w2) + b2"},
             "every rank computes the whole MLP", "all_reduce"),
    Shortcut("tp_mlp", {1: "y = g.apply(F.linear(F.gelu(F.linear(f.apply(x), w1, b1)), w2) "
                           "/ world_size) + b2"},
             "the whole MLP on every rank, divided by N before g", "FLOPs"),
    Shortcut("tp_mlp", {1: "w1_mine, b1_mine = shard(w1, rank, world_size, dim=1), b1; "
                           "hidden = F.gelu(g.apply(F.linear(shard(f.apply(x), rank, world_size, "
                           "dim=-1), w1_mine)) + b1_mine); y = F.linear(hidden, w2) + b2"},
             "the first layer cut by its inputs: its partial sums all-reduced before GeLU",
             "all_reduce"),
    # attention
    Shortcut("tp_attention",
             {1: "xf = f.apply(x); q, k, v = (split_heads(F.linear(xf, w), num_heads) for w in "
                 "(wq, wk, wv)); y = g.apply(F.linear(merge_heads(attend(q, k, v)), wo) "
                 "/ world_size) + bo"},
             "every rank computes every head", "FLOPs"),
    Shortcut("tp_attention",
             {1: "xf = f.apply(x); q, k, v = (split_heads(F.linear(xf, w), num_heads) for w in "
                 "(wq, wk, wv)); y = g.apply(F.linear(merge_heads(attend(q, k, v)), wo * "
                 "(torch.arange(wo.shape[1]) // (wo.shape[1] // world_size) == rank))) + bo"},
             "every head computed, the other ranks' masked out", "FLOPs"),
    Shortcut("tp_attention",
             {1: "rows = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] "
                 "// world_size); xf = f.apply(x); q, k, v = (split_heads(F.linear(xf, w[rows]), "
                 "num_heads // world_size) for w in (wq, wk, wv)); "
                 "y = all_reduce_sum(F.linear(merge_heads(attend(q, k, v)), wo[:, rows])) + bo"},
             "an in-place all-reduce where g belongs", "autograd"),
    # the bytes, predicted
    Shortcut("mlp_bytes", {1: "yours, rows_twice = 2 * (n - 1) / n * b * d * s, "
                              "2 * (2 * (n - 1) / n * b * d * s)"},
             "the other layout taken as twice yours", "rows"),
    # sequence parallelism
    Shortcut("sp_all_reduce",
             {1: "dist.all_reduce(t); part.copy_(t.chunk(world_size)[rank]); total.copy_(t)"},
             "an all-reduce, then a chunk", "reduce_scatter"),
    Shortcut("sp_all_reduce",
             {1: "part.copy_((lambda ps: (dist.all_gather(ps, t), torch.stack(ps).sum(0))[1])"
                 "([torch.empty_like(t) for _ in range(world_size)]).chunk(world_size)[rank]); "
                 "dist.all_gather_single(total, part)"},
             "every rank's whole tensor all-gathered and summed", "reduce_scatter"),
    Shortcut("sp_f_g", {1: "enter_backward, leave_backward = (lambda grad: all_reduce_sum(grad)"
                           ".chunk(dist.get_world_size())[dist.get_rank()].contiguous()), "
                           "gather_rows"},
             "enter's backward as an all-reduce and a slice", "reduce_scatter"),
    Shortcut("sp_f_g", {1: "enter_backward, leave_backward = scatter_rows, (lambda grad: "
                           "all_reduce_sum(torch.cat([grad if k == dist.get_rank() else "
                           "torch.zeros_like(grad) for k in range(dist.get_world_size())])))"},
             "leave's backward as an all-reduce of zero-padded rows", "all_gather"),
]

HONEST = [
    Shortcut("column_parallel_forward",
             {1: "pieces = [torch.zeros_like(y_mine) for _ in range(world_size)]; "
                 "dist.all_gather(pieces, y_mine.contiguous()); "
                 "y = torch.cat(pieces, dim=x.dim() - 1)"},
             "zeros for the slots, a positive dim"),
    Shortcut("row_parallel_forward",
             {1: "partial = torch.matmul(x_shard, w_shard.T); dist.all_reduce(partial); "
                 "y = bias + partial"},
             "matmul, the default op, the bias first"),
    Shortcut("column_parallel_backward",
             {1: "grad_x = torch.matmul(grad_y_shard, w_shard); "
                 "dist.all_reduce(grad_x, op=dist.ReduceOp.SUM)"},
             "matmul, the op spelled out"),
    Shortcut("row_parallel_backward",
             {1: "pieces = [torch.empty_like(grad_x) for _ in range(world_size)]; "
                 "dist.all_gather(pieces, grad_x.contiguous()); grad_x = torch.cat(pieces, dim=1)"},
             "a contiguous copy gathered, a positive dim"),
    Shortcut("megatron_f_g", {1: "f_backward, g_backward = (lambda grad: all_reduce_sum("
                                 "grad.clone())), torch.clone"},
             "copies for the sum and the identity"),
    Shortcut("tp_mlp", {1: "w1_mine, b1_mine = w1.chunk(world_size, dim=0)[rank], "
                           "b1.chunk(world_size)[rank]; w2_mine = shard(w2, rank, world_size, "
                           "dim=-1); hidden = F.gelu(F.linear(f.apply(x), w1_mine, b1_mine)); "
                           "y = g.apply(hidden @ w2_mine.t()) + b2"},
             "chunk, the last dimension, the product written out"),
    Shortcut("tp_mlp", {1: "k = w1.shape[0] // world_size; part = slice(rank * k, (rank + 1) * k); "
                           "hidden = F.gelu(f.apply(x) @ w1[part].t() + b1[part]); "
                           "y = b2 + g.apply(hidden @ w2[:, part].t())"},
             "the rows sliced by hand, the product written out"),
    Shortcut("tp_attention",
             {1: "head_dim = x.shape[-1] // num_heads; mine = num_heads // world_size; "
                 "rows = slice(rank * mine * head_dim, (rank + 1) * mine * head_dim); "
                 "xf = f.apply(x); q, k, v = (split_heads(F.linear(xf, w[rows]), mine) for w in "
                 "(wq, wk, wv)); out = merge_heads(attend(q, k, v)); "
                 "y = g.apply(out @ wo[:, rows].t()) + bo"},
             "the rows from the heads, the product written out"),
    Shortcut("mlp_bytes", {1: "ring = (n - 1) / n * s; yours, rows_twice = 2 * ring * b * d, "
                              "ring * b * h + ring * b * d"},
             "the ring share first"),
    Shortcut("sp_all_reduce",
             {1: "dist.reduce_scatter_single(part, t); dist.all_gather_single(total, part)"},
             "the default op"),
    Shortcut("sp_f_g", {1: "enter_backward, leave_backward = (lambda grad: scatter_rows("
                           "grad.clone())), (lambda grad: gather_rows(grad.contiguous()))"},
             "copies through the helpers"),
]
