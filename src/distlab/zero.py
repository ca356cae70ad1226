"""ZeRO: count what the ranks hold and what they send, and draw it.

    with count_collectives() as counter:     # on a rank: each call of the collectives in
        ...                                  # COUNTED is recorded with the bytes it moves
    counter.calls                            # [("all_reduce", 4096), ("broadcast", 512), ...]
    counter.live_gathered_bytes()            # all_gather outputs still alive (not yet freed)
    counter.peak_gathered_bytes              # the most that were alive at once

    tensor_bytes(tensors)                    # bytes of their storages, each storage once
    live_bytes(*exclude)                     # bytes of every tensor alive in this process
    grads_at_first_collective(model, opt)    # opt.step(); the gradient bytes alive as it
                                             # starts its first counted collective
    state_bytes(optimizer)                   # bytes of the optimizer's state tensors
    trace_gathered(model, x, counter)        # gathered bytes alive after each layer's F and B
    sent_per_rank(calls, world_size)         # bytes one rank sends for counter.calls (rings)
    show_memory(model_state_bytes)           # bars per stage, with sliders, for your formula
    show_assignment(sizes, owners, n)        # which rank owns which parameter
    show_measured(measured, modelled)        # measured bytes per rank next to the formula
    show_live(traces)                        # trace_gathered's curves, side by side

Memory is counted from live tensors, not from an allocator: a CPU has no allocator statistics.
Nothing here shards anything: the sharding is yours. (matplotlib is
imported by the drawing functions only: the counting runs on ranks, which should not pay for it.)
"""

from __future__ import annotations

import contextlib
import inspect
import weakref

import numpy as np

from distlab.intercept import intercepting

PARTS = ("params", "grads", "optimizer")
COLOURS = {"params": "tab:blue", "grads": "tab:orange", "optimizer": "tab:green"}
# the collectives counted (the torch.distributed calls this notebook uses; a list form such
# as dist.all_gather, point-to-point calls and the *_object calls are not), and which of their
# arguments holds the whole message
_FULL_ARGUMENT = {"all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor",
                  "all_gather_single": "output_tensor", "reduce_scatter_single": "input"}


COUNTED = tuple(_FULL_ARGUMENT)


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


class CollectiveCounter:
    """What the collectives of one rank moved: `calls` is a list of (name, bytes of the whole
    message), e.g. the full output of an all-gather and the full input of a reduce-scatter."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self._gathered: list[weakref.ref] = []
        self.peak_gathered_bytes = 0

    def record(self, name: str, whole) -> None:
        self.calls.append((name, _nbytes(whole)))
        if name == "all_gather_single":
            self._gathered.append(weakref.ref(whole))
            self.peak_gathered_bytes = max(self.peak_gathered_bytes, self.live_gathered_bytes())

    def live_gathered_bytes(self) -> int:
        """Bytes of the all-gathered buffers that something (a variable, autograd) still keeps."""
        alive = [ref() for ref in self._gathered]
        return sum(t.untyped_storage().nbytes() for t in alive if t is not None)

    def bytes_by_collective(self) -> dict:
        totals: dict = {}
        for name, nbytes in self.calls:
            totals[name] = totals.get(name, 0) + nbytes
        return totals


@contextlib.contextmanager
def count_collectives(before_each=None):
    """On a rank: count every call of the collectives in COUNTED (made through the
    `torch.distributed` module) until the block ends; before_each(name), if given, is called
    as each call starts (e.g. to count the bytes alive then)."""
    import torch

    counter = CollectiveCounter()

    def counting(name, real):
        signature = inspect.signature(real)

        def call(*args, **kwargs):
            if before_each is not None:
                before_each(name)
            bound = signature.bind(*args, **kwargs)
            whole = bound.arguments[_FULL_ARGUMENT[name]]
            if name == "all_gather_single" and not bound.arguments.get("async_op"):
                # gloo may hold on to the tensors of a finished call for a while: let it hold a
                # copy, so that only the caller's references keep `whole` alive
                bound.arguments["output_tensor"] = torch.empty_like(whole)
                out = real(*bound.args, **bound.kwargs)
                whole.copy_(bound.arguments["output_tensor"])
            else:
                out = real(*args, **kwargs)
            counter.record(name, whole)
            return out
        return call

    with intercepting(_FULL_ARGUMENT, counting):
        yield counter


def tensor_bytes(tensors) -> int:
    """Bytes of the storages behind `tensors` (None skipped), each storage once, at its size."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def live_bytes(*exclude) -> int:
    """Bytes of every tensor storage alive in this process (each once), but those behind the
    tensors in `exclude`; garbage collected first, and counted until the count holds still
    (gloo's thread lets go of a finished call's tensors a moment after the call returns)."""
    from distlab.memory import settled_bytes

    return settled_bytes(*(t for t in exclude if t is not None))


def grads_at_first_collective(model, optimizer):
    """Call optimizer.step() (a backward has just filled the p.grads of `model`); return the
    bytes of gradients alive as step() starts its first collective of COUNTED: the p.grads
    still alive and every tensor made since step() began, but the state of `optimizer.local`
    (a wrapped optimizer's; `optimizer.state` if it has no `local`). None if step() made none
    of those collectives."""
    import torch

    inner = getattr(optimizer, "local", optimizer)
    grads = tensor_bytes(p.grad for p in model.parameters())  # first: seen by gc then
    others = live_bytes() - grads  # what is alive besides the gradients
    seen = []

    def first(_name):
        if not seen:
            state = [v for st in inner.state.values() for v in st.values()
                     if isinstance(v, torch.Tensor)]
            seen.append(live_bytes(*state) - (others - tensor_bytes(state)))

    with count_collectives(before_each=first):
        optimizer.step()
    return seen[0] if seen else None


# bytes one rank sends per byte of a call's whole message, with notebook 01's rings
_RING_FACTOR = {"all_reduce": 2, "reduce_scatter_single": 1, "all_gather_single": 1,
                "broadcast": 1, "reduce": 1}


def sent_per_rank(calls, world_size: int) -> float:
    """Bytes one rank sends for these (name, message bytes) calls, with ring algorithms
    (a broadcast pipelined round the ring: on average per rank)."""
    n = world_size
    return sum(_RING_FACTOR[name] * (n - 1) / n * nbytes for name, nbytes in calls)


def state_bytes(optimizer) -> int:
    """Bytes of every tensor in `optimizer.state` (momenta, variances, step counters)."""
    import torch

    return tensor_bytes(value for state in optimizer.state.values() for value in state.values()
                        if isinstance(value, torch.Tensor))


def trace_gathered(model, x, counter) -> list[tuple[str, int]]:
    """One forward and backward of `model` (an nn.Sequential) on x: (event, gathered bytes
    still alive) after the forward (F0, F1, ...) and the backward (..., B1, B0) of each layer
    that has parameters."""
    trace = []
    handles = []
    # a layer that holds parameters; in a ZeRO-3 unit its slots are there, empty (None)
    layers = [layer for layer in model if layer._parameters or any(True for _ in
                                                                   layer.parameters())]
    for index, layer in enumerate(layers):
        def after_forward(module, inputs, output, index=index):
            trace.append((f"F{index}", counter.live_gathered_bytes()))
            if inputs[0].requires_grad:  # its gradient is ready once this layer's B is done
                inputs[0].register_hook(
                    lambda grad: trace.append((f"B{index}", counter.live_gathered_bytes())))
        handles.append(layer.register_forward_hook(after_forward))
    try:
        out = model(x.detach().requires_grad_())
        out.square().mean().backward()
    finally:
        for handle in handles:
            handle.remove()
    return trace


def _gb(value: float) -> str:
    return f"{value / 1e9:.3g} GB" if value >= 1e8 else f"{value / 1e6:.3g} MB"


def draw_memory(parts_per_stage: list, title: str, chosen: int | None = None):
    """Stacked bars, one per stage: parts_per_stage[s] = (params, grads, optimizer) bytes."""
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(7, 3.2))
    largest = max(sum(float(v) for v in parts) for parts in parts_per_stage)
    unit, scale = ("GB", 1e9) if largest >= 1e8 else ("MB", 1e6)
    bottoms = np.zeros(len(parts_per_stage))
    for k, part in enumerate(PARTS):
        values = np.array([float(parts[k]) for parts in parts_per_stage])
        ax.bar(range(len(values)), values / scale, bottom=bottoms / scale, color=COLOURS[part],
               label=part)
        bottoms += values
    for stage, total in enumerate(bottoms):
        ax.text(stage, total / scale, _gb(total), ha="center", va="bottom",
                fontweight="bold" if stage == chosen else "normal")
    ax.set_xticks(range(len(parts_per_stage)),
                  ["0: DDP", "1: P_os", "2: P_os+g", "3: P_os+g+p"][:len(parts_per_stage)])
    ax.set_ylabel(f"{unit} per GPU")
    ax.set_ylim(0, max(bottoms.max() / scale, 1e-9) * 1.15)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig, bottoms


def show_memory(model_state_bytes, psi: float = 7.5e9, n_d: int = 64, widths=(2, 2, 12)):
    """Model-state bytes per GPU for stages 0-3, from `model_state_bytes(psi, n_d, stage,
    widths)`; sliders for Ψ (billions), N_d, the byte widths and the stage to highlight."""
    from distlab.collectives import _show

    def draw(psi_billions=psi / 1e9, n_d=n_d, p=widths[0], g=widths[1], k=widths[2], stage=3):
        parts = [model_state_bytes(psi_billions * 1e9, n_d, s, (p, g, k)) for s in range(4)]
        fig, totals = draw_memory(parts, f"Ψ = {psi_billions:g} B parameters on N_d = {n_d} "
                                  f"GPUs, ({p} + {g} + {k}) bytes per parameter", stage)
        _show(fig, f"Model states per GPU, Ψ = {psi_billions:g} billion, N_d = {n_d}, widths "
              f"{p}+{g}+{k} bytes: " + ", ".join(f"stage {s}: {_gb(t)}"
                                                  for s, t in enumerate(totals)))

    try:
        import ipywidgets as widgets
    except ImportError:
        return draw()
    widgets.interact(
        draw, psi_billions=widgets.FloatLogSlider(value=psi / 1e9, base=10, min=-3, max=3,
                                                  description="Ψ (billions)"),
        n_d=widgets.IntSlider(value=n_d, min=1, max=1024, description="N_d"),
        p=widgets.IntSlider(value=widths[0], min=1, max=8, description="param bytes"),
        g=widgets.IntSlider(value=widths[1], min=1, max=8, description="grad bytes"),
        k=widgets.IntSlider(value=widths[2], min=0, max=24, description="K (optimizer)"),
        stage=widgets.IntSlider(value=3, min=0, max=3, description="stage"))
    return None


def show_assignment(sizes: list, owners: list, world_size: int, names=None):
    """Each rank's parameters as one stacked bar: who owns what, and how much."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    names = names or [f"p{i}" for i in range(len(sizes))]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.5 * world_size))
    cmap = plt.get_cmap("tab20")
    loads = [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda i: owners[i]):
        rank = owners[i]
        ax.barh(rank, sizes[i], left=loads[rank], color=cmap(i % 20), edgecolor="white")
        ax.text(loads[rank] + sizes[i] / 2, rank, names[i], ha="center", va="center", fontsize=7)
        loads[rank] += sizes[i]
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.invert_yaxis()
    ax.set_xlabel("elements owned")
    ax.set_title(f"{len(sizes)} parameters on {world_size} ranks; loads {loads}", fontsize=10)
    fig.tight_layout()
    _show(fig, f"Parameters assigned to {world_size} ranks: " + "; ".join(
        f"rank {r} owns " + (", ".join(names[i] for i in range(len(sizes)) if owners[i] == r)
                             or "nothing") + f" ({loads[r]} elements)"
        for r in range(world_size)))


def show_measured(measured: list, modelled: list, title: str):
    """Per stage, the bytes measured on one rank (left bar) beside the formula's (right)."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for offset, rows, hatch in ((-0.2, measured, ""), (0.2, modelled, "//")):
        bottoms = np.zeros(len(rows))
        for k, part in enumerate(PARTS):
            values = np.array([float(row[k]) / 1e6 for row in rows])
            ax.bar(np.arange(len(rows)) + offset, values, 0.38, bottom=bottoms, hatch=hatch,
                   color=COLOURS[part], label=part if offset < 0 else None, edgecolor="white")
            bottoms += values
    ax.set_xticks(range(len(measured)), [f"stage {s}\nmeasured | formula"
                                         for s in range(len(measured))], fontsize=8)
    ax.set_ylabel("MB per rank")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"stage {s}: measured {_gb(sum(m))}, formula {_gb(sum(f))}"
        for s, (m, f) in enumerate(zip(measured, modelled, strict=True))))


def show_live(traces: dict, title: str):
    """Gathered bytes alive after each layer's forward (F) and backward (B), one line each."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(7, 3))
    for label, trace in traces.items():
        ax.plot([event for event, _ in trace], [b / 1e3 for _, b in trace], marker="o",
                label=label)
    ax.set_ylabel("gathered kB alive")
    ax.set_xlabel("after the forward (F) or backward (B) of layer i")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _show(fig, f"{title}: " + "; ".join(
        f"{label}: " + ", ".join(f"{event} {b / 1e3:.3g} kB" for event, b in trace)
        for label, trace in traces.items()))
