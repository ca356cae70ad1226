"""Shortcuts of notebook 07 (DP x TP x PP): blank fills that earn the values without the idea
(every TP rank computing the whole block, every replica the whole batch, gradients averaged
over the world, the replicated parameters divided by TP), and correct answers written
otherwise."""

from shortcuts import Shortcut

SHORTCUTS = [
    Shortcut("TPBlock", {1: "(block.fc1.weight, block.fc1.bias)", 2: "block.fc2.weight",
                         3: "x + F.linear(h, self.w2) + self.b2"},
             "every TP rank computes the whole block", "holds parameters of shapes"),
    Shortcut("TPBlock", {3: "x + self.g.apply(F.linear(h, self.w2, self.b2)) - "
                            "(dist.get_world_size() - 1) * self.b2"},
             "fc2's bias added on every rank, then taken off the world's count", "fc2.bias"),
    Shortcut("train_2d", {2: "None"}, "gradients averaged over the world", "world"),
    Shortcut("train_2d", {1: "(0, 1)"}, "every replica trains on the whole batch",
             "share of training"),
    Shortcut("train_3d", {2: "torch.zeros_like(inputs[m])"},
             "no gradient goes back to the earlier stages", "single-process SGD"),
    Shortcut("group_bytes", {1: "stage_blocks * (sharded + replicated) / tp * itemsize"},
             "every parameter divided by TP, 02's way", "DP bytes"),
    Shortcut("layout_memory", {1: "16 * psi / (tp * pp)"}, "ZeRO-1 ignored",
             "bytes per GPU"),
]

HONEST = [
    Shortcut("mesh_coords",
             {1: "tuple(torch.arange(math.prod(shape)).reshape(shape).eq(rank).nonzero()[0]"
                 ".tolist())"}, "the coordinates looked up in torch.arange's grid"),
    Shortcut("group_ranks", {1: "tuple(c for i, c in enumerate(coords) if i != dim)"},
             "the other coordinates, by enumerate"),
    Shortcut("TPBlock", {1: "(block.fc1.weight[part, :], block.fc1.bias[part])",
                         2: "block.fc2.weight.T[part].T"}, "the parts taken otherwise"),
    Shortcut("train_2d", {1: '(groups["dp"].rank(), groups["dp"].size())',
                          2: 'groups.get("dp")'}, "the group's own rank and size methods"),
    Shortcut("train_3d", {1: 'groups.get("pp")'}, "the pipeline's group by get"),
]
