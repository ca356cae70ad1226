"""Shortcuts of notebook 07 (DP x TP x PP): blank fills that earn the values without the idea
(every TP rank computing the whole block, a replica counted from the global rank, gradients
averaged over the world, blocks left as FSDP roots, no gradient back through the pipeline,
the replicated parameters divided by TP, ZeRO-1 ignored, the fewest stages before the least
model parallelism), and correct answers written otherwise."""

from shortcuts import Shortcut

SHORTCUTS = [
    Shortcut("TPBlock", {1: "block.fc1.weight, block.fc1.bias, block.fc2.weight",
                         2: "x + F.linear(h, self.w2) + self.b2"},
             "every TP rank computes the whole block", "holds parameters of shapes"),
    Shortcut("TPBlock", {2: "x + self.g.apply(F.linear(h, self.w2, self.b2)) - "
                            "(dist.get_world_size() - 1) * self.b2"},
             "fc2's bias added on every rank, then taken off the world's count", "fc2.bias"),
    Shortcut("train_2d", {2: 'dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)'},
             "gradients averaged over the world", "world"),
    Shortcut("train_2d", {1: "(0, 1)"}, "every replica trains on the whole batch",
             "DP group"),
    Shortcut("train_2d", {1: '(dist.get_rank() // dist.get_world_size(groups["tp"]), '
                             'dist.get_world_size() // dist.get_world_size(groups["tp"]))'},
             "the replica counted from the global rank (right only with one pipeline stage)",
             "not a count from its global rank"),
    Shortcut("shard_2d", {2: "pass"}, "every block left an FSDP root, whole from forward to "
                                      "backward", "root"),
    Shortcut("shard_2d", {1: '{"fc1": RowwiseParallel(), "fc2": ColwiseParallel()}'},
             "the two linears' splits swapped", "features"),
    Shortcut("train_3d", {3: "dist.send(torch.zeros_like(inputs[m]), pipeline[p - 1])"},
             "no gradient goes back to the earlier stages", "single-process SGD"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups["dp"]); '
                             "p = pipeline.index(dist.get_rank())"},
             "the pipeline taken from the DP group", "neighbour stages"),
    Shortcut("group_bytes", {1: "stage_blocks * (2 * hidden * ff + ff + 3 * hidden) / tp * "
                                "itemsize"},
             "every parameter divided by TP, 02's way", "DP bytes"),
    Shortcut("layout_memory", {1: "16 * psi / (tp * pp)"}, "ZeRO-1 ignored",
             "bytes per GPU"),
    Shortcut("choose_layout", {1: "lambda layout: (layout[2], -layout[1])"},
             "the fewest stages first, TP widened even where no model parallelism is needed",
             "model parallelism"),
]

HONEST = [
    Shortcut("mesh_coords",
             {1: "tuple(torch.arange(math.prod(shape)).reshape(shape).eq(rank).nonzero()[0]"
                 ".tolist())"}, "the coordinates looked up in torch.arange's grid"),
    Shortcut("group_ranks", {1: "tuple(c for i, c in enumerate(coords) if i != dim)"},
             "the other coordinates, by enumerate"),
    Shortcut("TPBlock", {1: "block.fc1.weight[part, :], block.fc1.bias[part], "
                            "block.fc2.weight.T[part].T"}, "the parts taken otherwise"),
    Shortcut("train_2d", {1: '(groups["dp"].rank(), groups["dp"].size())',
                          2: 'dist.all_reduce(p.grad, group=groups.get("dp")); p.grad /= n_d'},
             "the group's own rank and size methods, a sum then a division"),
    Shortcut("shard_2d", {1: 'dict(fc2=RowwiseParallel(), fc1=ColwiseParallel())',
                          2: "fully_shard(model)"}, "the plan by dict(), the root on the "
                                                    "default mesh"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups.get("pp")); '
                             'p = dist.get_rank(groups["pp"])'},
             "the pipeline's group by get, the stage as the rank in it"),
    Shortcut("choose_layout", {1: "lambda layout: (-layout[0], layout[2])"},
             "the most replicas, then the fewest stages"),
]
