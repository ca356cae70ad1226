"""Shortcuts of notebook 07 (DP x TP x PP): blank fills that earn the values without the idea
(every TP rank computing the whole block, gradients averaged over the world or the TP group,
blocks left as FSDP roots or gathered together, fc2's bias inside g, the tied weight's
gradients summed over the wrong ranks, the replicated parameters divided by TP, ZeRO-1
ignored, the fewest stages before the least model parallelism, ties left to row order), and
correct answers written otherwise."""

from shortcuts import Shortcut

SHORTCUTS = [
    Shortcut("TPBlock", {1: "x + F.linear(h, self.w2) + self.b2"},
             "g left out: each rank's partial sum taken for the whole", "the output"),
    Shortcut("TPBlock", {1: "x + self.g.apply(F.linear(h, self.w2, self.b2))"},
             "fc2's bias added before g, so once per TP rank", "fc2.bias"),
    Shortcut("TPBlock", {1: "x + self.g.apply(F.linear(h, self.w2, self.b2)) - "
                            "(dist.get_world_size() - 1) * self.b2"},
             "fc2's bias added on every rank, then taken off the world's count", "fc2.bias"),
    Shortcut("train_3d", {1: "dist.all_reduce(param.grad); param.grad /= dist.get_world_size()"},
             "the bug report's line kept: gradients averaged over the world", "world"),
    Shortcut("shard_2d", {2: "list(model)"}, "every block left an FSDP root, whole from "
                                             "forward to backward", "root"),
    Shortcut("shard_2d", {2: "[model]"}, "the whole model one FSDP unit, every block gathered "
                                         "at once", "in one unit"),
    Shortcut("shard_2d", {2: "[model[0], model]"}, "one block a unit, the others left to the "
                                                   "root, whole from forward to backward",
             "root"),
    Shortcut("shard_2d", {1: '{"fc1": RowwiseParallel(), "fc2": ColwiseParallel()}'},
             "the two linears' splits swapped", "features"),
    Shortcut("train_3d", {1: 'dist.all_reduce(param.grad, group=groups["tp"]); '
                          'param.grad /= n_d'},
             "the gradient averaged over the TP group (a grid with TP > 1)", "in its TP group"),
    Shortcut("tied_groups", {1: "[[g[0] for g in group_ranks(shape, 0)] + "
                                "[g[-1] for g in group_ranks(shape, 0)]]"},
             "every first- and last-stage rank in one group", "other copy of its own pipeline"),
    Shortcut("tied_groups", {1: "group_ranks(shape, 0)"},
             "whole pipelines, middle stages included", "hold no copy"),
    Shortcut("group_bytes", {1: "stage_blocks * (2 * hidden * ff + ff + 3 * hidden) / tp * "
                                "itemsize"},
             "every parameter divided by TP, 02's way", "DP bytes"),
    Shortcut("layout_memory", {1: "16 * psi / (tp * pp)"}, "ZeRO-1 ignored",
             "bytes per GPU"),
    Shortcut("layout_memory", {1: "(4 + 12 / dp) * psi / (tp * pp)"},
             "Adam's state split over DP even without ZeRO-1", "bytes per GPU"),
    Shortcut("choose_layout", {1: "lambda layout: (layout[2], -layout[1])"},
             "the fewest stages first, TP widened even where no model parallelism is needed",
             "model parallelism"),
    Shortcut("choose_layout", {1: "lambda layout: layout[1] * layout[2]"},
             "the least model parallelism, ties left to the order of the rows",
             "fewer pipeline stages"),
]

HONEST = [
    Shortcut("group_ranks", {1: "tuple(c for i, c in enumerate(coords) if i != dim)"},
             "the other coordinates, by enumerate"),
    Shortcut("TPBlock", {1: "x + self.b2 + self.g.apply(F.linear(h, self.w2))"},
             "the bias first"),
    Shortcut("train_3d", {1: 'dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, '
                             'group=groups.get("dp"))'},
             "the average by ReduceOp.AVG"),
    Shortcut("shard_2d", {1: 'dict(fc2=RowwiseParallel(), fc1=ColwiseParallel())',
                          2: "list(model) + [model]"}, "the plan by dict(), the units by "
                                                       "list concatenation"),
    Shortcut("tied_groups", {1: "[[g[0], g[-1]] for g in group_ranks(shape, 0)]"},
             "first and last of each pipeline, twice the same rank with one stage"),
    Shortcut("choose_layout", {1: "lambda layout: (-layout[0], layout[2])"},
             "the most replicas, then the fewest stages"),
]
