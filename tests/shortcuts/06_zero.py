"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
state kept on every rank, a gradient all-reduced and sliced, a gathered layer kept from forward
to backward), and correct answers written otherwise."""

from shortcuts import Shortcut

ALL_REDUCE_THEN_SLICE = ("(dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), "
                         "{layout}.shard_of(flat_grad))[1]")
KEEP_A_COPY = 'layout.views((setattr(ctx, "kept", layout.gather(shard).clone()), ctx.kept)[1])'
SLICES_BROADCAST = ("[dist.broadcast(self.flat[r * self.layout.size:(r + 1) * self.layout.size],"
                    " src=r) for r in range(self.layout.world_size)]")

SHORTCUTS = [
    Shortcut("ShardedOptimizer", {1: "True"},
             "every rank steps and keeps the state of every parameter", "owner"),
    Shortcut("ShardedOptimizer", {1: "True", 2: "None"},
             "plain DDP: no owners, no broadcast", "owner"),
    Shortcut("ShardedOptimizer",
             {2: 'self.__dict__.setdefault("hidden", {}).setdefault(p, self.optimizer_cls('
                 '[{**group, "params": [p]}])).step() if self.owner[p] != self.rank else None'},
             "a hidden optimizer per parameter it does not own", "optimizer state"),
    Shortcut("FlatShard", {1: "self.numel"}, "every slice the whole buffer", "padded"),
    Shortcut("FlatShard", {2: "0:self.size"}, "every rank takes slice 0", "slice"),
    Shortcut("Zero2Optimizer", {3: ALL_REDUCE_THEN_SLICE.format(layout="self.layout")},
             "all-reduce the full gradient, keep a slice of it", "reduce-scatter"),
    Shortcut("Zero2Optimizer",
             {3: "(dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), "
                 "self.layout.shard_of(flat_grad).clone())[1]"},
             "all-reduce, then copy the slice", "no all-reduce"),
    Shortcut("Zero2Optimizer",
             {3: '(setattr(self, "kept", flat_grad), self.layout.reduce_scatter(flat_grad))[1]'},
             "the full gradient kept aside", "1/N of the gradient"),
    Shortcut("Zero2Optimizer",
             {1: "[self.flat]",
              3: '(dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), setattr(self.flat, "grad",'
                 ' flat_grad), self.layout.shard_of(flat_grad))[2]', 4: "None"},
             "DDP in disguise: every rank steps the whole buffer", "reduce-scatter"),
    Shortcut("GatheredLinear",
             {2: "ctx.save_for_backward(x, layout.gather(shard))", 3: "layout.views(shard)"},
             "the gathered layer saved for the backward", "slice, not the whole layer"),
    Shortcut("GatheredLinear", {1: KEEP_A_COPY},
             "a copy of the gathered layer kept on ctx", "frees each gathered layer"),
    Shortcut("GatheredLinear", {1: KEEP_A_COPY, 3: "layout.views(ctx.kept)"},
             "the kept copy used in the backward, no re-gather", "ZeRO-3"),
    Shortcut("GatheredLinear", {4: ALL_REDUCE_THEN_SLICE.format(layout="layout")},
             "the gradient all-reduced in the backward and sliced", "reduce-scatters"),
]

HONEST = [
    Shortcut("ShardedOptimizer",
             {1: "self.rank == owner", 2: "dist.broadcast(tensor=p, src=self.owner[p])"},
             "the owner test and the broadcast written otherwise"),
    Shortcut("Zero2Optimizer", {4: "self.flat.copy_(self.layout.gather(self.shard))"},
             "gathered, then copied into the buffer"),
    Shortcut("Zero2Optimizer", {4: SLICES_BROADCAST}, "each slice broadcast by its owner"),
    Shortcut("Zero2Optimizer", {3: "self.layout.reduce_scatter(flat_grad.clone())"},
             "reduce-scatter of a copy"),
    Shortcut("GatheredLinear", {2: "ctx.save_for_backward(x.detach(), shard.detach())"},
             "detached saves"),
    Shortcut("GatheredLinear", {1: "layout.views(layout.gather(shard.detach()))",
                                3: "[t.clone() for t in layout.views(layout.gather(shard))]"},
             "gathered from a detached slice; copies freed after the backward"),
]
