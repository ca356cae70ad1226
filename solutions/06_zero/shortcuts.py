"""Shortcuts of notebook 06 (ZeRO): blank fills that earn the values without the idea (the
fewest GPUs taken as if every byte shrank, found by calling the table or by a search in floats,
owners given in turn, an owner-masked all-reduce for the owner's broadcast, owners worked out
afresh for each group or from the final loads, ZeRO-2's gradient bytes without the flat buffer
or the slice, a gradient all-reduced and sliced, parameters gathered into a new tensor, a
gathered unit kept or saved, the master's gradient sent through bf16, a plan over its gathered
bytes or all-gathers), and correct answers written otherwise."""

from shortcuts import Shortcut

EVERY_OWNER = ("for group in self.param_groups: owners, loads = assign_params([p.numel() for p "
               "in group[\"params\"]], loads); ")
EACH = "for p, owner in zip(group[\"params\"], owners, strict=True)"

FEWEST = ("fixed = Fraction(psi) * sum(w for w, cut in zip(widths, (stage >= 3, stage >= 2, "
          "stage >= 1), strict=True) if not cut); shared = Fraction(psi) * sum(widths) - fixed; "
          "return (None if budget < fixed else 1) if shared == 0 else (max(1, {n}) "
          "if budget > fixed else None)")
BISECT = ("search = lambda lo, hi: lo if lo >= hi else (search(lo, (lo + hi) // 2) if "
          "fits((lo + hi) // 2) else search((lo + hi) // 2 + 1, hi)); ")
SCATTER = ("self.shard.grad = torch.empty_like(self.shard); dist.reduce_scatter_single("
           "self.shard.grad, flat_grad, op=dist.ReduceOp.AVG)")
STEP_GATHER = "; self.local.step(); dist.all_gather_single(self.flat, self.shard)"
REGATHER = "shard, *inputs = ctx.saved_tensors; full = GatheredUnit.gather_unit(unit, shard); "
GRADS = "grad_inputs, grad_full = unit.gradients(full, inputs, grad_output); "
OUT = "grad_master = torch.empty(unit.layout.size, dtype={dtype}); "
SCATTER_UNIT = ("dist.reduce_scatter_single(grad_master, {grad}, op=dist.ReduceOp.AVG); "
                "grad_master = grad_master.to({back})")
RIGHT_MASTER = (OUT.format(dtype="unit.reduce_dtype")
                + SCATTER_UNIT.format(grad="grad_full.to(unit.reduce_dtype)", back="shard.dtype"))
ASSIGN = "for i in {order}: owners[i] = loads.index({pick}(loads)); loads[owners[i]] += sizes[i]"
HELD = "size = -(-numel // world_size); return {bytes}"


def backward(master=RIGHT_MASTER, regather=REGATHER):
    return regather + GRADS + master


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
                 "Fraction(budget); " + BISECT
                 + "return search(1, 10 ** 12) if fits(10 ** 12) else None"},
             "a binary search over N_d that calls model_state_bytes", "search"),
    Shortcut("fewest_gpus",
             {1: "whole = sum(model_state_bytes(Fraction(psi), 1, stage, widths)); fixed = sum("
                 "model_state_bytes(Fraction(psi), 10 ** 30, stage, widths)); fixed = Fraction("
                 "round(fixed)); shared = whole - fixed; return (None if budget < fixed else 1) "
                 "if shared == 0 else (max(1, math.ceil(shared / (Fraction(budget) - fixed))) "
                 "if budget > fixed else None)"},
             "the table probed at N_d = 1 and at a huge N_d to split it", "probe"),
    Shortcut("fewest_gpus",
             {1: "fits = lambda n: float(psi) * sum(w / (n if cut else 1) for w, cut in zip("
                 "widths, (stage >= 3, stage >= 2, stage >= 1))) <= budget; " + BISECT
                 + "return search(1, 10 ** 30) if fits(10 ** 30) else None"},
             "a search in floating point up to a huge N_d, without the table", "expected None"),
    Shortcut("ShardedOptimizer",
             {1: EVERY_OWNER + "[dist.all_reduce(p.mul_(float(owner == self.rank)), "
                 f"op=dist.ReduceOp.SUM) {EACH}]"},
             "the owner's value by an all-reduce of masked parameters: twice the bytes",
             "sends each updated parameter once"),
    Shortcut("ShardedOptimizer",
             {1: EVERY_OWNER + '[self.__dict__.setdefault("hidden", {}).setdefault(p, '
                 'self.optimizer_cls([{**group, "params": [p]}])).step() '
                 f'{EACH} if owner != self.rank]'},
             "a hidden optimizer per parameter it does not own", "optimizer state"),
    Shortcut("ShardedOptimizer",
             {1: EVERY_OWNER + f"[dist.broadcast(p, src=0) {EACH}]"},
             "every parameter sent from rank 0", "unsharded training gives"),
    Shortcut("ShardedOptimizer",
             {1: EVERY_OWNER.replace("owners, loads = assign_params([p.numel() for p in group"
                                     "[\"params\"]], loads)",
                                     "owners, _ = assign_params([p.numel() for p in group"
                                     "[\"params\"]], [0] * self.world_size)")
                 + f"[dist.broadcast(p, src=owner) {EACH}]"},
             "each group's owners worked out from empty loads, not those add_param_group had",
             "unsharded training gives"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(bytes="size * itemsize")},
             "only the slice a rank keeps after step()", "slice"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(bytes="world_size * size * itemsize")},
             "only the flat gradient, not the slice received beside it", "slice it receives"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(bytes="(numel + numel / world_size) * itemsize")},
             "the flat gradient and the slice without the padding", "every element"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(bytes="(numel + world_size * size + size) * itemsize")},
             "the p.grad counted too, though step() dropped them", "flat gradient"),
    Shortcut("zero2_held_bytes",
             {1: HELD.format(bytes="2 * numel * itemsize // world_size")},
             "section 1's table (gradients partitioned)", "reduce-scatters"),
    Shortcut("Zero2Optimizer",
             {1: "dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG); self.shard.grad = "
                 "self.layout.shard_of(flat_grad).clone()" + STEP_GATHER},
             "all-reduce the full gradient, keep a slice of it", "reduce-scatter"),
    Shortcut("Zero2Optimizer",
             {1: 'setattr(self, "kept", flat_grad); ' + SCATTER + STEP_GATHER},
             "the full gradient kept aside", "1/N of the gradient"),
    Shortcut("Zero2Optimizer",
             {1: SCATTER + "; self.local.step(); [dist.all_reduce(self.flat[r * self.layout.size:"
                 "(r + 1) * self.layout.size].mul_(float(r == self.layout.rank))) for r in "
                 "range(self.layout.world_size)]"},
             "the updated slices spread by all-reduces of a masked buffer", "all-reduce"),
    Shortcut("Zero2Optimizer",
             {1: SCATTER + "; self.local.step(); dist.all_gather_single(torch.empty_like("
                 "self.flat), self.shard)"},
             "the parameters gathered into a new tensor, which updates nothing",
             "unsharded training gives"),
    Shortcut("GatheredUnit",
             {1: "ctx.save_for_backward(shard, *inputs); ctx.full = full",
              2: backward(regather="shard, *inputs = ctx.saved_tensors; full = ctx.full; ")},
             "each gathered unit kept on ctx for the backward", "frees each gathered layer"),
    Shortcut("GatheredUnit",
             {1: "ctx.save_for_backward(full, shard, *inputs)",
              2: backward(regather="full, shard, *inputs = ctx.saved_tensors; ")},
             "the gathered unit saved for the backward", "gathered"),
    Shortcut("GatheredUnit",
             {2: backward(master="dist.all_reduce(grad_full, op=dist.ReduceOp.AVG); "
                                 "grad_master = unit.layout.shard_of(grad_full.to("
                                 "unit.reduce_dtype)).clone().to(shard.dtype)")},
             "the gradient all-reduced in the backward and sliced", "reduce-scatters"),
    Shortcut("GatheredUnit", {1: "ctx.save_for_backward(shard.to(unit.compute_dtype), *inputs)"},
             "a bf16 copy of the slice saved", "copy of a slice"),
    Shortcut("GatheredUnit",
             {2: backward(master=OUT.format(dtype="unit.reduce_dtype") + SCATTER_UNIT.format(
                 grad="grad_full.to(unit.reduce_dtype)", back="unit.compute_dtype"))},
             "the averaged gradient returned in the compute dtype", "through bf16"),
    Shortcut("GatheredUnit",
             {2: backward(master=OUT.format(dtype="grad_full.dtype") + SCATTER_UNIT.format(
                 grad="grad_full", back="shard.dtype"))},
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
             {1: EVERY_OWNER + "[dist.broadcast(tensor=p, src=o) for p, o in zip(group["
                 "\"params\"], owners)]"},
             "the broadcasts written otherwise"),
    Shortcut("zero2_held_bytes",
             {1: "n = math.ceil(numel / world_size); return n * world_size * itemsize + "
                 "n * itemsize"},
             "the ceiling written otherwise"),
    Shortcut("zero2_held_bytes",
             {1: "pad = -numel % world_size; return (numel + pad) * itemsize + (numel + pad) // "
                 "world_size * itemsize"},
             "the padding counted apart"),
    Shortcut("Zero2Optimizer",
             {1: SCATTER + "; self.local.step(); full = torch.empty_like(self.flat); "
                 "dist.all_gather_single(full, self.shard); self.flat.copy_(full)"},
             "gathered, then copied into the buffer"),
    Shortcut("Zero2Optimizer",
             {1: SCATTER + "; self.local.step(); [dist.broadcast(self.flat[r * self.layout.size:"
                 "(r + 1) * self.layout.size], src=r) for r in range(self.layout.world_size)]"},
             "each slice broadcast by its owner"),
    Shortcut("Zero2Optimizer",
             {1: SCATTER.replace("flat_grad, op", "flat_grad.clone(), op") + STEP_GATHER},
             "reduce-scatter of a copy"),
    Shortcut("assign_params",
             {1: ASSIGN.format(order="reversed(sorted(range(len(sizes)), key=lambda i: "
                                     "sizes[i]))", pick="min")},
             "largest first, written otherwise"),
    Shortcut("GatheredUnit", {1: "ctx.save_for_backward(*[shard, *inputs])"},
             "the saved tensors as a list"),
    Shortcut("GatheredUnit",
             {2: backward(master="grad_master = torch.empty_like(shard, dtype=unit.reduce_dtype);"
                                 " dist.reduce_scatter_single(grad_master, grad_full.to("
                                 "unit.reduce_dtype), op=dist.ReduceOp.AVG); grad_master = "
                                 "grad_master.to(shard.dtype)")},
             "the slice's buffer made like the slice"),
    Shortcut("GatheredUnit",
             {2: REGATHER + "grads = unit.gradients(full, inputs, grad_output); "
                 "grad_inputs = grads[0]; grad_full = grads[1]; " + RIGHT_MASTER},
             "the gradients read by index"),
    Shortcut("lm_plan", {1: "units = [*model.blocks]"}, "the blocks unpacked"),
    Shortcut("lm_plan", {1: "units = [*model.blocks, model.norm]"},
             "the last norm a unit too: as many gathers"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("fewest_gpus", 1,
         lambda answer: answer.replace("(Fraction(budget) - fixed)", "Fraction(budget)"))
