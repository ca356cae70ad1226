"""ZeRO-3's plumbing for any module: which parameters each unit shards, and running a module
with parameters it is lent for one call. The gathering, what is saved, and the gradient's
way back to the slices are the notebook's (its autograd Function); nothing here communicates.

    model = shard_units(model, units, function, layout_cls, compute_dtype, reduce_dtype)
    units_of(model)          # its Units: .names, .layout, .shard, ...

A unit is a module or a list of modules (FSDP2 calls them the modules given to
`fully_shard`). Each parameter belongs to the first unit that holds it, and the parameters no
unit holds make one more unit, the root's. A parameter held twice (tied weights: an embedding
and the LM head that reuses it) is flattened once, so both see the same slice, when both
holders are in the same unit (the root's included); a plan that puts them in different units
is refused with a ValueError (the other holder would keep the whole parameter). Each call of a
module that holds the unit's parameters goes through `function.apply(shard, call, *inputs)`,
with `call` (a UnitCall) saying how to run that module on a gathered flat buffer. Frozen
parameters (requires_grad=False) are not flattened: they stay whole on every rank, with no
gradient and no optimizer state, and are used in the compute dtype.
"""

from __future__ import annotations


def _holders(modules):
    """(module, name, parameter) for each parameter the modules hold directly, walking their
    whole subtrees in order."""
    found = []
    for top in modules:
        for module in top.modules():
            for name, param in module._parameters.items():
                if param is not None:
                    found.append((module, name, param))
    return found


class Unit:
    """One ZeRO-3 unit: its trainable parameters flattened once (tied ones once) by
    `layout_cls`, this rank's slice of them (`shard`, the fp32 master), and its modules."""

    def __init__(self, index, members, held, layout_cls, compute_dtype, reduce_dtype,
                 qualified):
        import torch
        from torch import nn

        self.index, self.members = index, members
        self.params, self.slots = [], []  # unique trainable parameters; (module, name, i)
        self.frozen = []  # (module, name, parameter) kept whole
        for module, name, param in held:
            if not param.requires_grad:
                self.frozen.append((module, name, param))
                continue
            i = next((k for k, p in enumerate(self.params) if p is param), None)
            if i is None:
                i = len(self.params)
                self.params.append(param)
            self.slots.append((module, name, i))
        self.names = [qualified[id(p)] for p in self.params]
        self.layout = self.shard = None
        if self.params:
            self.layout = layout_cls([p.shape for p in self.params])
            flat = self.layout.flatten([p.detach() for p in self.params])
            self.shard = nn.Parameter(self.layout.shard_of(flat).clone())  # the full flat goes
        self.compute_dtype = compute_dtype or (held[0][2].dtype if held else torch.float32)
        self.reduce_dtype = reduce_dtype or self.compute_dtype
        for module, name, _ in self.slots:
            module._parameters[name] = None  # the whole parameter goes: only the slice stays
        self._torch = torch

    def call(self, module):
        return UnitCall(self, module)


class UnitCall:
    """One module of a unit, as its Function sees it: `layout`, `compute_dtype`,
    `reduce_dtype` of the unit; run(full, inputs) its forward with the parameters from the
    gathered `full`; gradients(full, inputs, grad_output) the forward again, under autograd,
    and its backward: (the inputs' gradients, the gradient of `full`)."""

    def __init__(self, unit, module):
        self.unit, self.module = unit, module
        self.layout = unit.layout
        self.compute_dtype, self.reduce_dtype = unit.compute_dtype, unit.reduce_dtype
        self.forward = type(module).forward
        inside = {id(m) for m in module.modules()}
        self.slots = [slot for slot in unit.slots if id(slot[0]) in inside]
        self.frozen = [held for held in unit.frozen if id(held[0]) in inside]

    def _lend(self, full):
        """Put views of `full` (and the frozen parameters, in the compute dtype) in the
        module's parameter slots for one call; returns what to put back."""
        views = self.layout.views(full) if self.slots else []
        lent = []
        for module, name, i in self.slots:
            lent.append((module, name, None))
            module._parameters[name] = views[i]
        for module, name, param in self.frozen:
            lent.append((module, name, param))
            module._parameters[name] = param.detach().to(self.compute_dtype)
        return lent

    def run(self, full, inputs):
        """The module's forward on `inputs`, with the parameters from the gathered `full`."""
        lent = self._lend(full)
        try:
            out = self.forward(self.module, *inputs)
        finally:
            for module, name, before in lent:
                module._parameters[name] = before
        if not isinstance(out, self.unit._torch.Tensor):
            raise TypeError(f"{type(self.module).__name__} returned {type(out).__name__}: a "
                            "ZeRO-3 unit's modules must each return one tensor")
        return out

    def gradients(self, full, inputs, grad_output):
        """Recompute the forward under autograd (its activations were not kept), then its
        backward: (a gradient or None per input, the gradient of the flat buffer `full`)."""
        torch = self.unit._torch
        full = full.detach().requires_grad_()
        inputs = [t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs]
        with torch.enable_grad():
            out = self.run(full, inputs)
        wanted = [full] + [t for t in inputs if t.requires_grad]
        grads = torch.autograd.grad(out, wanted, grad_output, allow_unused=True)
        flat_grad = grads[0] if grads[0] is not None else torch.zeros_like(full)
        rest = iter(grads[1:])
        return [next(rest) if t.requires_grad else None for t in inputs], flat_grad


def _inside(module, container):
    return any(module is m for m in container.modules())


def shard_units(model, units, function, layout_cls, compute_dtype=None, reduce_dtype=None):
    """`model`, changed in place into ZeRO-3 units (see the module's docstring): each unit's
    trainable parameters replaced by one slice (a parameter of the model), each call of its
    modules through `function.apply(shard, call, *floating inputs cast to compute_dtype)`."""
    from torch import nn

    units = [[u] if isinstance(u, nn.Module) else list(u) for u in units]
    qualified = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        qualified.setdefault(id(param), name)
    taken, made = set(), []
    for modules in units:
        held = [(m, n, p) for m, n, p in _holders(modules) if id(p) not in taken]
        taken |= {id(p) for _, _, p in held}
        made.append((modules, held))
    rest = [(m, n, p) for m, n, p in _holders([model]) if id(p) not in taken]
    if rest:  # the root's unit: each module that holds one of them is a member
        made.append((list(dict.fromkeys(m for m, _, _ in rest)), rest))
    owner = {id(p): i for i, (_, held) in enumerate(made) for _, _, p in held}
    for module, _, param in _holders([model]):
        i = owner[id(param)]
        if not any(_inside(module, top) for top in made[i][0]):
            raise ValueError(
                f"{qualified[id(param)]} is tied: {type(module).__name__} uses it too, outside "
                f"unit {i}, which shards it; that module would keep the whole parameter, "
                "never averaged: put every module that holds a tied parameter in one unit (or "
                "leave them all to the root's)")
    members = [(m, i) for i, (modules, _) in enumerate(made) for m in modules]
    for module, i in members:
        for other, j in members:
            if other is not module and _inside(other, module):
                raise ValueError(
                    f"{type(module).__name__} (a module of unit {i}) contains "
                    f"{type(other).__name__} (unit {j}): each module of a unit is gathered "
                    "whole for its call, so give the module's children as units instead, or "
                    "move the parameters it holds itself into a child module")
    built = [Unit(i, modules, held, layout_cls, compute_dtype, reduce_dtype, qualified)
             for i, (modules, held) in enumerate(made)]
    for unit in built:
        if unit.shard is not None:
            model.register_parameter(f"zero3_shard_{unit.index}", unit.shard)
        for module in unit.members:
            module.forward = _through(function, unit, module)
    model.zero3_units = built
    return model


def _through(function, unit, module):
    """The module's new forward: its floating inputs cast to the compute dtype, then its unit's
    Function (or, for a unit of frozen parameters only, the plain call)."""
    import torch

    call = unit.call(module)

    def forward(*inputs, **kwargs):
        if kwargs or not all(isinstance(t, torch.Tensor) for t in inputs):
            raise TypeError(f"{type(module).__name__} in a ZeRO-3 unit: call it with tensors "
                            "only, as positional arguments (they go through an autograd "
                            "Function)")
        inputs = [t.to(unit.compute_dtype) if t.is_floating_point() else t for t in inputs]
        if not call.slots:  # frozen parameters only: nothing to gather
            return call.run(None, inputs)
        return function.apply(unit.shard, call, *inputs)
    return forward


def units_of(model) -> list:
    """The Units `shard_units` made of `model`."""
    return model.zero3_units
