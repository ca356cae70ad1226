"""Shortcuts of notebook 07 (DP x TP x PP): blank fills that earn the values without the idea
(f before the LayerNorm or left out, g left out, fc2's bias summed by g, the stages numbered
by global rank or along the DP or TP group, the replica's rows not cut or counted from the
global rank, the FSDP units without a root around the blocks or one unit for all, the tied
weight's two uses averaged or the whole pipeline taken for the embedding group, 02's four TP
all-reduces a layer, the replicated parameters divided by TP, ZeRO-1 ignored, the fewest
stages or TP up to a server before the least model parallelism, ties left to row order), and
correct answers written otherwise."""

from shortcuts import Shortcut

ROWS = ('; d, n_d = dist.get_rank(groups["dp"]), dist.get_world_size(groups["dp"]); '
        'xs, ys = x.chunk(n_d)[d].chunk(micro_batches), y.chunk(n_d)[d].chunk(micro_batches)')
RET = "; return x + self.g.apply(F.linear(h, self.w2)) + self.b2"  # the rest of a TPBlock forward

SHORTCUTS = [
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.norm(self.f.apply(x)), self.w1, "
                            "self.b1))" + RET},
             "f before the LayerNorm (notebook 04's place, on the layer's input): the norm's "
             "weight and bias get this rank's features' share of their gradient", "LayerNorm"),
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.norm(x), self.w1, self.b1))" + RET},
             "f left out: the input's gradient is this rank's share", "the input's gradient"),
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.norm(x), self.w1, self.b1)) + "
                            "0 * self.f.apply(x).sum()" + RET},
             "f called on the input where it changes nothing", "the input's gradient"),
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); "
                            "return x + F.linear(h, self.w2) + self.b2"},
             "g left out: this rank's partial sum taken for the output", "g forward"),
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1, self.b1)); "
                            "return x + self.g.apply(F.linear(h, self.w2, self.b2))"},
             "fc2's bias added before g's sum, so once per TP rank", "once per TP rank"),
    Shortcut("train_3d", {1: "pipeline = list(range(dist.get_world_size())); p = dist.get_rank(); "
                          "xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)"},
             "the bug report's line kept: the stages numbered by global rank", "pipeline"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups["dp"]); '
                          'p = pipeline.index(dist.get_rank())' + ROWS},
             "the DP group taken for the pipeline", "pipeline"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups["tp"]); '
                          'p = pipeline.index(dist.get_rank())' + ROWS},
             "the TP group taken for the pipeline (rank ± 1 on the grid)", "pipeline"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups["pp"]); '
                          'p = pipeline.index(dist.get_rank()); '
                          'xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)'},
             "every replica on the whole batch", "its DP group"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups["pp"]); '
                          'p = pipeline.index(dist.get_rank()); d, n_d = dist.get_rank() % '
                          'dist.get_world_size(groups["dp"]), dist.get_world_size(groups["dp"]); '
                          'xs, ys = x.chunk(n_d)[d].chunk(micro_batches), '
                          'y.chunk(n_d)[d].chunk(micro_batches)'},
             "the replica counted from the global rank", "its DP group"),
    Shortcut("shard_2d", {1: "list(model)"},
             "a unit per block and no unit around them: every block a root, kept whole from "
             "its forward to its backward", "root"),
    Shortcut("shard_2d", {1: "[model]"},
             "the whole model one unit: every block whole at once", "several blocks in one unit"),
    Shortcut("sync_tied", {1: 'dist.all_reduce(grad, group=groups["tied"]); '
                              'grad /= dist.get_world_size(groups["tied"])'},
             "the two uses averaged like replicas", "different uses"),
    Shortcut("sync_tied", {1: 'dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=groups["tied"])'},
             "the two uses averaged like replicas, by ReduceOp.AVG", "different uses"),
    Shortcut("sync_tied", {1: 'dist.all_reduce(grad, group=groups["pp"])'},
             "the whole pipeline for the embedding group (right with 2 stages only)",
             "world_size=6"),
    Shortcut("sync_tied", {1: 'dist.all_reduce(grad); grad /= dist.get_world_size() / 2'},
             "every copy summed over the world", "world_size="),
    Shortcut("group_bytes", {1: '4 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * '
                                "itemsize"},
             "notebook 02's 4 TP all-reduces a layer, for a block of an MLP only", "TP bytes"),
    Shortcut("group_bytes", {1: '2 * (dims["blocks"] // pp) * (rows // dp) * seq * hidden * '
                                "itemsize * micro_batches"},
             "the replica's rows counted once per micro-batch", "TP bytes"),
    Shortcut("group_bytes", {1: "2 * (rows // dp) * seq * hidden * itemsize"},
             "one block a stage (the 2 messages of one block)", "TP bytes"),
    Shortcut("group_bytes", {1: '2 * (dims["blocks"] // pp) * (rows // dp) * seq * ff // tp * '
                                "itemsize"},
             "the messages as wide as this rank's ff features", "TP bytes"),
    Shortcut("group_bytes", {2: 'dims["blocks"] // pp * (2 * hidden * ff + ff + 3 * hidden) / '
                                "tp * itemsize"},
             "every parameter divided by TP, 02's way", "DP bytes"),
    Shortcut("layout_memory", {1: "16 * psi / (tp * pp)"}, "ZeRO-1 ignored",
             "bytes per GPU"),
    Shortcut("layout_memory", {1: "(4 + 12 / dp) * psi / (tp * pp)"},
             "Adam's state split over DP even without ZeRO-1", "bytes per GPU"),
    Shortcut("choose_layout", {1: "lambda layout: (layout[2], -layout[1])"},
             "the fewest stages first, TP widened even where no model parallelism is needed",
             "model parallelism"),
    Shortcut("choose_layout", {1: "lambda layout: (-layout[1] if layout[1] * layout[2] > 1 "
                                  "else 0, layout[2])"},
             "TP up to a server first, then PP, once the model needs model parallelism "
             "(takeaway #1 read alone)", "96 GPUs"),
    Shortcut("choose_layout", {1: "lambda layout: layout[1] * layout[2]"},
             "the least model parallelism, ties left to the order of the rows",
             "fewer pipeline stages"),
]

HONEST = [
    Shortcut("group_ranks", {1: "tuple(c for i, c in enumerate(coords) if i != dim)"},
             "the other coordinates, by enumerate"),
    Shortcut("TPBlock", {1: "h = F.gelu(F.linear(self.f.apply(self.norm(x)), self.w1) + "
                            "self.b1)" + RET},
             "the bias added outside F.linear"),
    Shortcut("TPBlock", {1: "return x + self.g.apply(F.linear(F.gelu(F.linear(self.f.apply("
                            "self.norm(x)), self.w1, self.b1)), self.w2)) + self.b2"},
             "the forward as one expression"),
    Shortcut("train_3d", {1: 'pipeline = dist.get_process_group_ranks(groups.get("pp")); '
                             'p = dist.get_rank(groups.get("pp"))' + ROWS},
             "the stage by dist.get_rank of the PP group"),
    Shortcut("shard_2d", {1: "list(model) + [model]"}, "the units by list concatenation"),
    Shortcut("sync_tied", {1: 'dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=groups["tied"])'},
             "the sum named"),
    Shortcut("group_bytes", {1: 'dims["blocks"] // pp * 2 * micro_batches * '
                                "(rows // dp // micro_batches) * seq * hidden * itemsize"},
             "per micro-batch, times the micro-batches"),
    Shortcut("choose_layout", {1: "lambda layout: (-layout[0], layout[2])"},
             "the most replicas, then the fewest stages"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("train_3d", 1, lambda answer: "pipeline = list(range(dist.get_world_size())); "
                                         "p = dist.get_rank(); xs, ys = x.chunk(micro_batches), "
                                         "y.chunk(micro_batches)")
