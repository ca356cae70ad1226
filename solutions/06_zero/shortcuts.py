"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
fewest GPUs taken as if every byte shrank, owners given in turn, an owner-masked all-reduce for
the owner's broadcast, ZeRO-2's bytes without the padding, a gradient all-reduced and sliced, a
gathered unit kept or saved, the master's gradient sent through bf16, a plan over its gathered
bytes or all-gathers), and correct answers written otherwise."""

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
REGATHER = "shard, *inputs = ctx.saved_tensors; full = GatheredUnit.gather_unit(unit, shard); "
BACKWARD = (REGATHER + "grad_inputs, grad_full = unit.gradients(full, inputs, grad_output); "
            "grad_master = {master}")
RIGHT_MASTER = "unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"
ASSIGN = "for i in {order}: owners[i] = loads.index({pick}(loads)); loads[owners[i]] += sizes[i]"


def backward(master=RIGHT_MASTER):
    return BACKWARD.format(master=master)


SHORTCUTS = [
    Shortcut("assign_params",
             {1: ASSIGN.format(order="range(len(sizes))", pick="min")},
             "in turn, each to the least-loaded rank", "a reference rule's fullest rank"),
    Shortcut("assign_params",
             {1: ASSIGN.format(order="sorted(range(len(sizes)), key=lambda i: sizes[i])",
                               pick="min")},
             "smallest first", "a reference rule's fullest rank"),
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
    Shortcut("fewest_gpus",
             {1: "fits = lambda n: sum(model_state_bytes(Fraction(psi), n, stage, widths)) <= "
                 "Fraction(budget); search = lambda lo, hi: lo if lo >= hi else (search(lo, "
                 "(lo + hi) // 2) if fits((lo + hi) // 2) else search((lo + hi) // 2 + 1, hi)); "
                 "return search(1, 10 ** 12) if fits(10 ** 12) else None"},
             "a binary search over N_d that calls model_state_bytes", "search over N_d"),
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
    Shortcut("GatheredUnit",
             {1: "ctx.save_for_backward(shard, *inputs); ctx.full = full",
              2: "shard, *inputs = ctx.saved_tensors; full = ctx.full; grad_inputs, grad_full = "
                 "unit.gradients(full, inputs, grad_output); grad_master = unit.layout."
                 "reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"},
             "each gathered unit kept on ctx for the backward", "frees each gathered layer"),
    Shortcut("GatheredUnit",
             {1: "ctx.save_for_backward(full, shard, *inputs)",
              2: "full, shard, *inputs = ctx.saved_tensors; grad_inputs, grad_full = "
                 "unit.gradients(full, inputs, grad_output); grad_master = unit.layout."
                 "reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"},
             "the gathered unit saved for the backward", "gathered"),
    Shortcut("GatheredUnit",
             {2: backward(master=ALL_REDUCE_THEN_SLICE.format(layout="unit.layout",
                                                              grad="grad_full")
                          + ".to(shard.dtype)")},
             "the gradient all-reduced in the backward and sliced", "reduce-scatters"),
    Shortcut("GatheredUnit", {1: "ctx.save_for_backward(shard.to(unit.compute_dtype), *inputs)"},
             "a bf16 copy of the slice saved", "copy of a slice"),
    Shortcut("GatheredUnit",
             {2: backward(master="unit.layout.reduce_scatter(grad_full.to(unit.reduce_dtype))"
                                 ".to(unit.compute_dtype)")},
             "the averaged gradient returned in the compute dtype", "through bf16"),
    Shortcut("GatheredUnit",
             {2: backward(master="unit.layout.reduce_scatter(grad_full).to(shard.dtype)")},
             "the gradient reduced in the compute dtype, not the reduce dtype", "reduce dtype"),
    Shortcut("lm_plan", {1: "units = []"},
             "no units: everything left to the root", "bytes of gathered parameters alive"),
    Shortcut("lm_plan", {1: "units = [model.blocks]"},
             "all blocks as one unit (a ModuleList is never called)", "fails"),
    Shortcut("lm_plan",
             {1: "units = [m for m in model.blocks.modules() if isinstance(m, nn.Linear)]"},
             "each linear of the blocks a unit: more gathers", "all-gathers in a step"),
    Shortcut("lm_plan", {1: "units = [m for m in model.modules() if isinstance(m, nn.Linear)]"},
             "each linear a unit, the tied head too", "tied"),
    Shortcut("lm_plan", {1: "units = [*model.blocks, model.head]"},
             "the tied head a unit apart from its embedding", "tied"),
    Shortcut("lm_plan", {1: "units = list(model.blocks)[:1]"},
             "one block a unit, the others left to the root", "bytes of gathered parameters"),
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
    Shortcut("assign_params",
             {1: ASSIGN.format(order="reversed(sorted(range(len(sizes)), key=lambda i: "
                                     "sizes[i]))", pick="min")},
             "largest first, written otherwise"),
    Shortcut("GatheredUnit", {1: "ctx.save_for_backward(*[shard, *inputs])"},
             "the saved tensors as a list"),
    Shortcut("GatheredUnit",
             {2: "shard, *inputs = ctx.saved_tensors; full = torch.empty(unit.layout.size * "
                 "unit.layout.world_size, dtype=unit.compute_dtype); dist.all_gather_single("
                 "full, shard.detach().to(unit.compute_dtype)); grad_inputs, grad_full = "
                 "unit.gradients(full, inputs, grad_output); grad_master = unit.layout."
                 "reduce_scatter(grad_full.to(unit.reduce_dtype)).to(shard.dtype)"},
             "the raw collective in the backward"),
    Shortcut("GatheredUnit",
             {2: REGATHER + "grads = unit.gradients(full, inputs, grad_output); "
                 "grad_inputs = grads[0]; "
                 "grad_master = unit.layout.reduce_scatter(grads[1].to(unit.reduce_dtype))"
                 ".to(shard.dtype)"},
             "the gradients read by index"),
    Shortcut("lm_plan", {1: "units = [*model.blocks]"}, "the blocks unpacked"),
    Shortcut("lm_plan", {1: "units = [*model.blocks, model.norm]"},
             "the last norm a unit too: as many gathers"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("fewest_gpus", 1,
         lambda answer: answer.replace("(Fraction(budget) - fixed)", "Fraction(budget)"))
