"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
state kept on every rank, an owner-masked all-reduce for the owner's broadcast, a gradient
all-reduced and sliced, a gathered layer kept from forward to backward, the master's gradient
sent through bf16), and correct answers written otherwise."""

from shortcuts import Shortcut

ALL_REDUCE_THEN_SLICE = ("(dist.all_reduce({grad}, op=dist.ReduceOp.AVG), "
                         "{layout}.shard_of({grad}))[1]")
REGATHER = "shard, *inputs = ctx.saved_tensors; full = {gather}"
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
    Shortcut("ShardedOptimizer",
             {2: "dist.all_reduce(p.mul_(float(self.owner[p] == self.rank)), "
                 "op=dist.ReduceOp.SUM)"},
             "the owner's value by an all-reduce of masked parameters: twice the bytes",
             "sends each updated parameter once"),
    Shortcut("FlatShard", {1: "self.numel"}, "every slice the whole buffer", "padded"),
    Shortcut("Zero2Optimizer",
             {2: ALL_REDUCE_THEN_SLICE.format(layout="self.layout", grad="flat_grad")},
             "all-reduce the full gradient, keep a slice of it", "reduce-scatter"),
    Shortcut("Zero2Optimizer",
             {2: "(dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), "
                 "self.layout.shard_of(flat_grad).clone())[1]"},
             "all-reduce, then copy the slice", "no all-reduce"),
    Shortcut("Zero2Optimizer",
             {2: '(setattr(self, "kept", flat_grad), self.layout.reduce_scatter(flat_grad))[1]'},
             "the full gradient kept aside", "1/N of the gradient"),
    Shortcut("Zero2Optimizer",
             {1: "[self.flat]",
              2: '(dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), setattr(self.flat, "grad",'
                 ' flat_grad), self.layout.shard_of(flat_grad))[2]', 3: "None"},
             "DDP in disguise: every rank steps the whole buffer", "reduce-scatter"),
    Shortcut("GatheredUnit", {2: "ctx.save_for_backward(full, *inputs)",
                              3: "full, *inputs = ctx.saved_tensors; shard = full"},
             "the gathered unit saved for the backward", "slice, not the whole layer"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard.to(unit.compute_dtype)); ctx.kept = full"},
             "the gathered unit kept on ctx", "frees each gathered layer"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard.to(unit.compute_dtype)); ctx.kept = full",
              3: REGATHER.format(gather="ctx.kept")},
             "the kept copy used in the backward, no re-gather", "ZeRO-3"),
    Shortcut("GatheredUnit",
             {4: ALL_REDUCE_THEN_SLICE.format(layout="unit.layout", grad="grad_full")
                 + ".to(shard.dtype)"},
             "the gradient all-reduced in the backward and sliced", "reduce-scatters"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard).to(unit.compute_dtype)",
              3: REGATHER.format(gather="unit.layout.gather(shard).to(unit.compute_dtype)")},
             "gathered in fp32, cast after: the right copy, twice the bytes", "before it travels"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard.data.copy_(shard.to(unit.compute_dtype)).to("
                 "unit.compute_dtype))"},
             "the fp32 master rounded to bf16 in place", "master slice"),
    Shortcut("GatheredUnit", {2: "ctx.save_for_backward(shard.to(unit.compute_dtype), *inputs)"},
             "a bf16 copy of the slice saved: the master's gradient goes through bf16",
             "through bf16"),
    Shortcut("GatheredUnit",
             {4: "unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype))"
                 ".to(unit.compute_dtype)"},
             "the averaged gradient returned in the compute dtype", "through bf16"),
]

HONEST = [
    Shortcut("ShardedOptimizer",
             {1: "self.rank == owner", 2: "dist.broadcast(tensor=p, src=self.owner[p])"},
             "the owner test and the broadcast written otherwise"),
    Shortcut("Zero2Optimizer", {3: "self.flat.copy_(self.layout.gather(self.shard))"},
             "gathered, then copied into the buffer"),
    Shortcut("Zero2Optimizer", {3: SLICES_BROADCAST}, "each slice broadcast by its owner"),
    Shortcut("Zero2Optimizer", {2: "self.layout.reduce_scatter(flat_grad.clone())"},
             "reduce-scatter of a copy"),
    Shortcut("GatheredUnit", {2: "ctx.save_for_backward(shard.detach(), *inputs)"},
             "a detached save"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard.detach().to(unit.compute_dtype))",
              3: REGATHER.format(gather="unit.layout.gather(shard.detach().to("
                                        "unit.compute_dtype))")},
             "gathered from a detached slice"),
    Shortcut("GatheredUnit",
             {3: "saved = ctx.saved_tensors; shard, inputs = saved[0], saved[1:]; "
                 "full = unit.layout.gather(shard.to(unit.compute_dtype))"},
             "the saved tensors read by index"),
]
