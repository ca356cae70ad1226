"""Shortcuts of notebook 04 (tensor parallelism): blank fills that earn the values without the
idea (the whole weight gathered and the whole matmul done on every rank, the wrong collective
with zero padding, an all-gather and a local sum in place of an all-reduce, a needless
collective, the whole first layer as a broadcast multiply-and-sum, the whole MLP divided by N
before g, an in-place all-reduce in place of g, a prediction measured
by running the layouts), and correct answers written otherwise. Each rank
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


def _region(first: str, last: str) -> str:
    """tp_region's blank: region_in's statement `first` (ending in h = ...) and region_out's
    `last` (ending in y = ...), as two lambdas (the MLP has no biases)."""
    return (f"region_in = lambda x, w: (lambda: ({first.replace('h = ', '')}))(); "
            f"region_out = lambda h, w: (lambda: ({last.replace('y = ', '')}))()")


IN = "h = F.linear(f.apply(x), shard(w, rank, world_size, 0))"
OUT = "y = g.apply(F.linear(h, shard(w, rank, world_size, 1)))"
BROADCAST_FIRST_LAYER = "(f.apply(x)[..., None, :] * w).sum(-1).chunk(world_size, dim=-1)[rank]"
MINE = "mine = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size); "

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
    # the row cut's backward, by hand (x whole on every rank)
    Shortcut("row_parallel_backward",
             {1: "grad_x = grad_y @ " + _gathered("w_shard", 1)},
             "the whole weight all-gathered, dL/dx computed whole on every rank",
             "row-parallel backward"),
    Shortcut("row_parallel_backward",
             {1: "grad_x = torch.cat([grad_y @ w_shard if q == rank else "
                 "torch.zeros_like(x_mine) for q in range(world_size)], dim=1); "
                 "dist.all_reduce(grad_x)"},
             "dL/dx zero-padded and all-reduced", "all_gather"),
    # f and g (the blank is the two backward passes; the forwards are given)
    Shortcut("megatron_f_g",
             {1: "f_backward, g_backward = (lambda grad: (lambda t: ("
                 + _summed_by_gather("t") + ", t)[1])(grad.clone())), (lambda grad: grad)"},
             "f's backward sum from an all-gather", "all_reduce"),
    Shortcut("megatron_f_g",
             {1: "f_backward, g_backward = all_reduce_sum, "
                 "(lambda grad: all_reduce_sum(grad * 0) + grad)"},
             "a needless all-reduce in g's backward", "no communication"),
    # the MLP's two ends (full weights: choosing the part is the exercise; tp_mlp is given)
    Shortcut("tp_region", {1: _region("h = " + BROADCAST_FIRST_LAYER, OUT)},
             "the whole first layer as a broadcast multiply-and-sum, then sliced", "work"),
    Shortcut("tp_region", {1: _region("h = F.linear(f.apply(x), w)",
                                      "y = g.apply(F.linear(h, w) / world_size)")},
             "the whole MLP on every rank, divided by N before g", "FLOPs"),
    Shortcut("tp_region", {1: _region("h = g.apply(F.linear(shard(f.apply(x), rank, world_size, "
                                      "-1), shard(w, rank, world_size, 1)))",
                                      "y = g.apply(F.linear(h, w) / world_size)")},
             "the first layer cut by its inputs: its partial sums all-reduced before GeLU",
             "all_reduce"),
    Shortcut("tp_region", {1: "region_in = lambda x, w: F.linear(f.apply(x), "
                              "shard(w, rank, world_size, 0)); region_out = lambda h, w: "
                              "(lambda y: (dist.all_reduce(y), y)[1])("
                              "F.linear(h, shard(w, rank, world_size, 1)))"},
             "the sum as an in-place all-reduce, not g: backward runs it as the identity",
             "g"),
    # attention (f begins it, region_out ends it; the blank is wqkv's rows)
    Shortcut("tp_attention",
             {1: MINE + "qkv = F.linear(x_in, shard(wqkv, rank, world_size, 0))"},
             "the fused wqkv cut as one block of rows (attention() copied with shard)", "output"),
    Shortcut("tp_attention",
             {1: MINE + "qkv = F.linear(x_in, wqkv[mine].repeat(3, 1))"},
             "the heads' rows of W_q used for k and v too (one third read)", "output"),
    # the bytes, predicted
    Shortcut("mlp_bytes", {1: "yours, rows_twice = 2 * (n - 1) / n * b * d * e, "
                              "2 * (2 * (n - 1) / n * b * d * e)"},
             "the other layout taken as twice yours", "rows"),
    Shortcut("mlp_bytes",
             {1: "yours, rows_twice = [sum(sum(c.sent for c in calls) for calls in "
                 "run(forward_bytes, torch.zeros(b, d, dtype=dtype), torch.zeros(h, d, "
                 "dtype=dtype), torch.zeros(d, h, dtype=dtype), world_size=n)[0][k:k + 1]) "
                 "for dtype in [{1: torch.int8, 2: torch.float16, 4: torch.float32, "
                 "8: torch.float64}[e]] for k in (0, 1)]"},
             "measured by running both layouts at the given sizes", "formula"),
    # sequence parallelism (its operators are given; the blank predicts their costs)
    Shortcut("sp_costs", {1: "sent, held = (n - 1) / n * s * b * d * e, s * b * d * e / n"},
             "only one of the two collectives", "sends"),
    Shortcut("sp_costs", {1: "sent, held = 2 * (n - 1) / n * s * b * d * e, s * b * d * e"},
             "the whole activation normalised on every rank", "normalises"),
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
    Shortcut("megatron_f_g", {1: "f_backward, g_backward = (lambda grad: "
                                 "all_reduce_sum(grad.clone())), torch.clone"},
             "copies for the sum and the identity"),
    Shortcut("tp_region", {1: "region_in = lambda x, w: f.apply(x) @ w[rank * (w.shape[0] "
                              "// world_size):(rank + 1) * (w.shape[0] // world_size)].t(); "
                              "region_out = lambda h, w: "
                              "g.apply(h @ w.chunk(world_size, dim=-1)[rank].t())"},
             "the rows sliced by hand, chunk on the last dimension, the products written out"),
    Shortcut("tp_region", {1: "def region_in(x, w):\n"
                              "    x_in = f.apply(x)\n"
                              "    return F.linear(x_in, w.chunk(world_size)[rank])\n\n"
                              "def region_out(h, w):\n"
                              "    partial = h @ shard(w, rank, world_size, dim=-1).t()\n"
                              "    return g.apply(partial)"},
             "two nested defs over several lines"),
    Shortcut("row_parallel_backward",
             {1: "mine = grad_y @ w_shard; "
                 "stacked = mine.new_empty((world_size * mine.shape[0], mine.shape[1])); "
                 "dist.all_gather_single(stacked, mine.contiguous()); "
                 "grad_x = torch.cat(stacked.chunk(world_size), dim=-1)"},
             "all_gather_single, its blocks put side by side"),
    Shortcut("tp_attention",
             {1: "head_dim = x.shape[-1] // num_heads; "
                 "k = num_heads // world_size * head_dim; mine = slice(rank * k, (rank + 1) * k); "
                 "wq, wk, wv = wqkv.chunk(3); "
                 "qkv = x_in @ torch.cat((wq[mine], wk[mine], wv[mine])).t()"},
             "the band from the heads, each third named"),
    Shortcut("tp_attention",
             {1: "d = wqkv.shape[1]; mine = slice(rank * d // world_size, "
                 "(rank + 1) * d // world_size); "
                 "qkv = F.linear(x_in, wqkv.view(3, d, d)[:, mine].reshape(-1, d))"},
             "a view of the three thirds, sliced at once"),
    Shortcut("column_parallel_forward",
             {1: "stacked = y_mine.new_empty("
                 "(world_size * y_mine.shape[0], *y_mine.shape[1:])); "
                 "dist.all_gather_single(stacked, y_mine.contiguous()); "
                 "y = torch.cat(stacked.chunk(world_size), dim=-1)"},
             "all_gather_single, its blocks put side by side"),
    Shortcut("mlp_bytes", {1: "ring = (n - 1) / n * e; yours, rows_twice = 2 * ring * b * d, "
                              "ring * b * h + ring * b * d"},
             "the ring share first"),
    Shortcut("mlp_bytes", {1: "yours = 2 * (n - 1) * b * d * e / n; "
                              "rows_twice = yours * (h + d) / (2 * d)"},
             "the second layout as a ratio of the first"),
    Shortcut("sp_costs", {1: "share = (n - 1) / n; positions = s / n; "
                             "sent, held = 2 * share * s * b * d * e, positions * b * d * e"},
             "the ring share and the positions named first"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("column_parallel_forward", 1, lambda answer: "dist.all_reduce(y_mine); y = y_mine")
