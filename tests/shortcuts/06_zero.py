"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
fewest GPUs taken as if every byte shrank, an owner-masked all-reduce for the owner's
broadcast, ZeRO-2's bytes without the padding, a gradient all-reduced and sliced, a gathered
unit kept from forward to backward, the master's gradient sent through bf16), and correct
answers written otherwise."""

from shortcuts import Shortcut

ALL_REDUCE_THEN_SLICE = ("(dist.all_reduce({grad}, op=dist.ReduceOp.AVG), "
                         "{layout}.shard_of({grad}))[1]")
SLICES_BROADCAST = ("[dist.broadcast(self.flat[r * self.layout.size:(r + 1) * self.layout.size],"
                    " src=r) for r in range(self.layout.world_size)]")
EVERY_PARAM = "for group in self.param_groups for p in group[\"params\"]"

FEWEST = ("fixed = Fraction(psi) * sum(w for w, cut in zip(widths, (stage >= 3, stage >= 2, "
          "stage >= 1), strict=True) if not cut); shared = Fraction(psi) * sum(widths) - fixed; "
          "return (None if budget < fixed else 1) if shared == 0 else (max(1, {n}) "
          "if budget > fixed else None)")
HELD = "size = {size}; return {params}, {grads}, {state}"
STEP_GATHER = "; self.local.step(); self.layout.gather(self.shard, out=self.flat)"
GATHER = "full = unit.layout.gather({copy})"
SAVE = "ctx.save_for_backward({saved}, *inputs)"
BACKWARD = ("shard, *inputs = ctx.saved_tensors; full = {full}; grad_inputs, grad_full = "
            "unit.gradients(full, inputs, grad_output); grad_master = {master}")
CAST = "shard.to(unit.compute_dtype)"
RIGHT_FULL = f"unit.layout.gather({CAST})"
RIGHT_MASTER = "unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"
POLICY = "MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=reduce_dtype)"


def forward(copy=CAST, saved="shard", extra=""):
    return GATHER.format(copy=copy) + "; " + SAVE.format(saved=saved) + extra


def backward(full=RIGHT_FULL, master=RIGHT_MASTER):
    return BACKWARD.format(full=full, master=master)


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
             {1: "self.local.step(); [dist.all_reduce(p.mul_(float(self.owner[p] == self.rank)),"
                 f" op=dist.ReduceOp.SUM) {EVERY_PARAM}]"},
             "the owner's value by an all-reduce of masked parameters: twice the bytes",
             "sends each updated parameter once"),
    Shortcut("ShardedOptimizer",
             {1: 'self.local.step(); [self.__dict__.setdefault("hidden", {}).setdefault(p, '
                 'self.optimizer_cls([{**group, "params": [p]}])).step() for group in '
                 'self.param_groups for p in group["params"] if self.owner[p] != self.rank]'},
             "a hidden optimizer per parameter it does not own", "optimizer state"),
    Shortcut("ShardedOptimizer",
             {1: f"self.local.step(); [dist.broadcast(p, src=0) {EVERY_PARAM}]"},
             "every parameter sent from rank 0", "unsharded training gives"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(size="numel / world_size", params="itemsize * numel",
                             grads="itemsize * size", state="itemsize * per_element * size")},
             "the padding left out", "padding included"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(size="-(-numel // world_size)", params="itemsize * size",
                             grads="itemsize * size", state="itemsize * per_element * size")},
             "the parameters taken as sharded too (stage 3)", "parameters"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(size="-(-numel // world_size)", params="itemsize * size * "
                             "world_size", grads="itemsize * size", state="itemsize * "
                             "per_element * numel / world_size")},
             "the state without the padding of the last slice", "optimizer state"),
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
    Shortcut("GatheredUnit", {1: forward(saved="full"),
                              2: backward(full="full").replace("shard, *inputs", "full, *inputs")
                              .replace(".to(shard.dtype)", ".to(full.dtype)")},
             "the gathered unit saved for the backward", "not the whole"),
    Shortcut("GatheredUnit", {1: forward(extra="; ctx.kept = full")},
             "the gathered unit kept on ctx", "frees each gathered layer"),
    Shortcut("GatheredUnit", {1: forward(extra="; ctx.kept = full"),
                              2: backward(full="ctx.kept")},
             "the kept copy used in the backward, no re-gather", "ZeRO-3"),
    Shortcut("GatheredUnit",
             {2: backward(master=ALL_REDUCE_THEN_SLICE.format(layout="unit.layout",
                                                              grad="grad_full")
                          + ".to(shard.dtype)")},
             "the gradient all-reduced in the backward and sliced", "reduce-scatters"),
    Shortcut("GatheredUnit",
             {1: "full = unit.layout.gather(shard).to(unit.compute_dtype); " + SAVE.format(
                 saved="shard"),
              2: backward(full="unit.layout.gather(shard).to(unit.compute_dtype)")},
             "gathered in fp32, cast after: the right copy, twice the bytes", "before it travels"),
    Shortcut("GatheredUnit",
             {1: forward(copy="shard.data.copy_(shard.to(unit.compute_dtype)).to("
                              "unit.compute_dtype)")},
             "the fp32 master rounded to bf16 in place", "master slice"),
    Shortcut("GatheredUnit", {1: forward(saved=CAST)},
             "a bf16 copy of the slice saved: the master's gradient goes through bf16",
             "through bf16"),
    Shortcut("GatheredUnit",
             {2: backward(master="unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype))"
                                 ".to(unit.compute_dtype)")},
             "the averaged gradient returned in the compute dtype", "through bf16"),
    Shortcut("GatheredUnit",
             {2: backward(master="unit.layout.reduce_scatter(grad_full).to(shard.dtype)")},
             "the gradient reduced in the compute dtype, not the reduce dtype", "reduce dtype"),
    Shortcut("lm_plan", {1: f"[], {POLICY}"},
             "no units: everything left to the root", "outside the blocks"),
    Shortcut("lm_plan", {1: f"[model.blocks], {POLICY}"},
             "all blocks as one unit", "more than one block"),
    Shortcut("lm_plan", {1: f"[m for m in model.modules() if isinstance(m, nn.Linear)], {POLICY}"},
             "each linear a unit: more gathers", "fewer all-gathers"),
    Shortcut("lm_plan", {1: f"[*model.blocks, model.embed, model.norm], {POLICY}"},
             "the embedding and the last norm as units too: more gathers", "fewer all-gathers"),
    Shortcut("lm_plan", {1: "list(model.blocks), MixedPrecisionPolicy(param_dtype=compute_dtype)"},
             "no reduce dtype: gradients reduced in the compute dtype", "reduce dtype"),
    Shortcut("lm_plan", {1: "list(model.blocks), MixedPrecisionPolicy(param_dtype=reduce_dtype, "
                            "reduce_dtype=compute_dtype)"},
             "the two dtypes swapped", "compute dtype"),
    Shortcut("lm_plan", {1: "list(model.blocks), MixedPrecisionPolicy(reduce_dtype=reduce_dtype)"},
             "the parameters gathered in their own dtype", "compute dtype"),
]

HONEST = [
    Shortcut("fewest_gpus", {1: FEWEST.format(n="-(-shared // (Fraction(budget) - fixed))")},
             "ceiling by floor division"),
    Shortcut("ShardedOptimizer",
             {1: "self.local.step(); [dist.broadcast(tensor=p, src=owner) for p, owner in "
                 "self.owner.items()]"},
             "the broadcasts written otherwise"),
    Shortcut("zero2_held_bytes",
             {1: "n = math.ceil(numel / world_size); return n * world_size * itemsize, "
                 "n * itemsize, n * per_element * itemsize"},
             "the ceiling written otherwise"),
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
    Shortcut("GatheredUnit", {1: forward(saved="shard.detach()")}, "a detached save"),
    Shortcut("GatheredUnit",
             {1: forward(copy="shard.detach().to(unit.compute_dtype)"),
              2: backward(full="unit.layout.gather(shard.detach().to(unit.compute_dtype))")},
             "gathered from a detached slice"),
    Shortcut("GatheredUnit",
             {2: "saved = ctx.saved_tensors; shard, inputs = saved[0], saved[1:]; "
                 "full = unit.layout.gather(shard.to(unit.compute_dtype)); grad_inputs, "
                 "grad_full = unit.gradients(full, inputs, grad_output); grad_master = "
                 "unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"},
             "the saved tensors read by index"),
    Shortcut("GatheredUnit",
             {1: SAVE.format(saved="shard") + "; " + GATHER.format(copy=CAST)},
             "saved first, then gathered"),
    Shortcut("lm_plan", {1: "[*model.blocks], MixedPrecisionPolicy(compute_dtype, reduce_dtype)"},
             "positional dtypes"),
    Shortcut("lm_plan", {1: "list(model.blocks), MixedPrecisionPolicy(param_dtype=compute_dtype, "
                            "reduce_dtype=reduce_dtype or compute_dtype)"},
             "the reduce dtype spelled out when None"),
]
