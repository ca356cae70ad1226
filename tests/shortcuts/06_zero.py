"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
fewest GPUs taken as if every byte shrank, an owner-masked all-reduce for the owner's
broadcast, a gradient all-reduced and sliced, a gathered layer kept from forward to
backward, the master's gradient sent through bf16), and correct answers written otherwise."""

from shortcuts import Shortcut

ALL_REDUCE_THEN_SLICE = ("(dist.all_reduce({grad}, op=dist.ReduceOp.AVG), "
                         "{layout}.shard_of({grad}))[1]")
REGATHER = "shard, *inputs = ctx.saved_tensors; full = {gather}"
SLICES_BROADCAST = ("[dist.broadcast(self.flat[r * self.layout.size:(r + 1) * self.layout.size],"
                    " src=r) for r in range(self.layout.world_size)]")

FEWEST = ("fixed = Fraction(psi) * sum(w for w, cut in zip(widths, (stage >= 3, stage >= 2, "
          "stage >= 1), strict=True) if not cut); shared = Fraction(psi) * sum(widths) - fixed; "
          "return (None if budget < fixed else 1) if shared == 0 else (max(1, {n}) "
          "if budget > fixed else None)")
STEP_GATHER = "; self.local.step(); self.layout.gather(self.shard, out=self.flat)"
SHORTCUTS = [
    Shortcut("fewest_gpus", {1: FEWEST.format(n="math.ceil(shared / Fraction(budget))")},
             "every byte taken to shrink with N_d", "only the partitioned bytes shrink"),
    Shortcut("fewest_gpus", {1: FEWEST.format(n="int(shared / (Fraction(budget) - fixed))")},
             "the quotient rounded down", "over the budget"),
    Shortcut("fewest_gpus",
             {1: FEWEST.format(n="math.ceil((shared + fixed) / Fraction(budget))")},
             "the whole states divided by the budget", "only the partitioned bytes shrink"),
    Shortcut("fewest_gpus",
             {1: FEWEST.replace("(stage >= 3, stage >= 2, stage >= 1)", "(False, stage >= 2, "
                                "stage >= 1)").format(n="math.ceil(shared / (Fraction(budget)"
                                                        " - fixed))")},
             "the parameters never partitioned", "fit already"),
    Shortcut("ShardedOptimizer",
             {1: 'self.__dict__.setdefault("hidden", {}).setdefault(p, self.optimizer_cls('
                 '[{**group, "params": [p]}])).step() if self.owner[p] != self.rank else None'},
             "a hidden optimizer per parameter it does not own", "optimizer state"),
    Shortcut("ShardedOptimizer",
             {1: "dist.all_reduce(p.mul_(float(self.owner[p] == self.rank)), "
                 "op=dist.ReduceOp.SUM)"},
             "the owner's value by an all-reduce of masked parameters: twice the bytes",
             "sends each updated parameter once"),
    Shortcut("FlatShard", {1: "self.numel"}, "every slice the whole buffer", "padded"),
    Shortcut("FlatShard",
             {2: "self.rank * (self.numel // self.world_size):"
                 "(self.rank + 1) * (self.numel // self.world_size)"},
             "slices cut as if there were no padding", "slice"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = " + ALL_REDUCE_THEN_SLICE.format(layout="self.layout",
                                                                     grad="flat_grad")
                 + STEP_GATHER},
             "all-reduce the full gradient, keep a slice of it", "reduce-scatter"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = (dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG), "
                 "self.layout.shard_of(flat_grad).clone())[1]" + STEP_GATHER},
             "all-reduce, then copy the slice", "no all-reduce"),
    Shortcut("Zero2Optimizer",
             {1: 'self.shard.grad = (setattr(self, "kept", flat_grad), '
                 'self.layout.reduce_scatter(flat_grad))[1]' + STEP_GATHER},
             "the full gradient kept aside", "1/N of the gradient"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = self.layout.reduce_scatter(flat_grad); self.local.step(); "
                 "[dist.all_reduce(self.flat[r * self.layout.size:(r + 1) * self.layout.size]"
                 ".mul_(float(r == self.layout.rank))) for r in range(self.layout.world_size)]"},
             "the updated slices spread by all-reduces of a masked buffer", "all-reduce"),
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
    Shortcut("fewest_gpus", {1: FEWEST.format(n="-(-shared // (Fraction(budget) - fixed))")},
             "ceiling by floor division"),
    Shortcut("ShardedOptimizer", {1: "dist.broadcast(tensor=p, src=self.owner[p])"},
             "the broadcast written otherwise"),
    Shortcut("FlatShard", {2: "self.size * self.rank:self.size * self.rank + self.size"},
             "the bounds written otherwise"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = self.layout.reduce_scatter(flat_grad); self.local.step(); "
                 "self.flat.copy_(self.layout.gather(self.shard))"},
             "gathered, then copied into the buffer"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = self.layout.reduce_scatter(flat_grad); self.local.step(); "
                 + SLICES_BROADCAST},
             "each slice broadcast by its owner"),
    Shortcut("Zero2Optimizer",
             {1: "self.shard.grad = self.layout.reduce_scatter(flat_grad.clone())" + STEP_GATHER},
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
