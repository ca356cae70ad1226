"""Notebook 03 (data parallel): its model and data, instruments for the ranks, its pictures.

    model = mlp()                               # a 784-256-10 MLP (MNIST-sized inputs)
    model = toy_model(seed=rank)                # a small 16-input, 4-class model
    dataset = synthetic_digits(1000)            # 784 features, 10 classes, learnable
    with watch_all_reduce() as log:             # on a rank: every dist.all_reduce, timed
        ...
    log.numels()                                # elements of each call, in launch order
    calls = count_bucket_all_reduces(ddp)       # on a rank: torch DDP's bucket all-reduces
    check_params_in_sync(model)                 # on a rank: all_gather each parameter, compare
    show_timeline(records)                      # backward and each all-reduce, per rank
    show_loss_curves({"sync, 4 workers": losses, ...})

Nothing here trains, averages or buckets anything: that is the notebook's work. The ranks
import this module (for the model and the instruments), so matplotlib is imported only where a
picture is drawn: importing it on 4 fresh ranks would cost seconds.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

from distlab.intercept import intercepting


def mlp(sizes=(784, 256, 10), seed: int = 0) -> nn.Sequential:
    """Linear layers with ReLU between them (default: 784-256-10), seeded."""
    torch.manual_seed(seed)
    layers = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class ToyNet(nn.Module):
    """16 -> 32 -> 32 -> 32 -> 4 with tanh; the input is scaled by `scale`, layer 0's weight
    is frozen, and layers 1 and 2 share one weight matrix."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", 0.5 + torch.rand(16))
        self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 32),
                                     nn.Linear(32, 4)])
        self.layers[2].weight = self.layers[1].weight
        self.layers[0].weight.requires_grad_(False)

    def forward(self, x):
        x = x * self.scale
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))
        return self.layers[-1](x)


def toy_model(seed: int = 0) -> ToyNet:
    torch.manual_seed(seed)
    return ToyNet()


def synthetic_digits(n: int = 1000, features: int = 784, classes: int = 10,
                     seed: int = 0) -> TensorDataset:
    """n random inputs labelled by a fixed random linear teacher: a stand-in for MNIST that a
    model can learn (the teacher is the same for every n and seed)."""
    teacher = torch.randn(features, classes, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, features, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x @ teacher).argmax(dim=1))


def flat_params(module) -> torch.Tensor:
    """Every parameter of `module`, flattened into one detached vector (each tied one once)."""
    return torch.cat([p.detach().flatten() for p in module.parameters()])


# ---------------------------------------------------------------- instruments (on a rank)

# The collectives of the last check_params_in_sync, kept until the next one. A collective
# holds its tensors, and releasing tensors made in Python takes the GIL. If gloo's worker
# thread held the last reference, it would need the GIL while the main thread, destroying the
# group right after the check, holds it and waits for that worker: a deadlock.
_checked: list = []


def check_params_in_sync(module) -> None:
    """On a rank: all_gather every parameter and raise AssertionError unless every rank holds
    exactly this rank's values."""
    world_size = dist.get_world_size()
    _checked.clear()
    for name, param in module.named_parameters():
        gathered = [torch.empty_like(param) for _ in range(world_size)]
        work = dist.all_gather(gathered, param.detach(), async_op=True)
        work.wait()
        _checked.append(work)
        differ = [r for r, theirs in enumerate(gathered) if not torch.equal(theirs, param)]
        assert not differ, f"{name} differs between ranks: rank(s) {differ} hold other values"


class AllReduceLog:
    """What watch_all_reduce saw on this rank: one dict per call (numel, bytes, async, start,
    end, and with defer=True waited: when its work was first waited for; times from
    time.perf_counter, which all processes of a machine share)."""

    def __init__(self):
        self.calls: list[dict] = []

    def clear(self) -> None:
        self.calls.clear()

    def numels(self) -> list[int]:
        return [call["numel"] for call in self.calls]

    def total_bytes(self) -> int:
        return sum(call["bytes"] for call in self.calls)

    def spans(self) -> list[tuple[float, float, int]]:
        """(launched, finished, bytes) of every call that has finished."""
        return [(c["start"], c["end"], c["bytes"]) for c in self.calls if c["end"] is not None]


class _Deferred:
    """An async all-reduce whose result reaches the caller's tensor only in wait(), as on a GPU,
    where it lands later, on another stream: code that reads the tensor without waiting sees
    its own, unreduced values every time instead of only when it is unlucky."""

    def __init__(self, work, result: torch.Tensor, target: torch.Tensor, call: dict):
        self._work, self._result, self._target, self._call = work, result, target, call

    def wait(self, *args, **kwargs) -> bool:
        if self._call.get("waited") is None:
            self._call["waited"] = time.perf_counter()
        self._work.wait(*args, **kwargs)
        with torch.no_grad():
            self._target.copy_(self._result)
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self):
        return self._work.get_future()


@contextlib.contextmanager
def watch_all_reduce(defer: bool = False):
    """Within the block, every dist.all_reduce on this rank is logged (yields an AllReduceLog).
    defer=True: an async one's result lands in its tensor only when its work is waited for."""
    log = AllReduceLog()

    def watched(_name, real):
        def all_reduce(tensor, *args, **kwargs):
            async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
            call = {"numel": tensor.numel(), "bytes": tensor.numel() * tensor.element_size(),
                    "async": bool(async_op), "start": time.perf_counter(), "end": None,
                    "waited": None}
            log.calls.append(call)
            if not async_op:
                out = real(tensor, *args, **kwargs)
                call["end"] = time.perf_counter()
                return out
            result = tensor.detach().clone() if defer else tensor
            work = real(result, *args, **kwargs)
            work.get_future().then(lambda _: call.__setitem__("end", time.perf_counter()))
            return _Deferred(work, result, tensor, call) if defer else work
        return all_reduce

    with intercepting(["all_reduce"], watched):
        yield log


def count_bucket_all_reduces(ddp_model) -> list[int]:
    """Make torch DDP report each bucket it all-reduces: returns a list that grows by the
    bucket's element count at every bucket all-reduce (averaged, as DDP's own default)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls: list[int] = []

    def hook(state, bucket):
        calls.append(bucket.buffer().numel())
        return default_hooks.allreduce_hook(state, bucket)

    ddp_model.register_comm_hook(None, hook)
    return calls


# ---------------------------------------------------------------- pictures


def overlap_fraction(record: dict) -> float:
    """The share of one rank's all-reduce time that ran while its backward was still running.
    record: {"backward": (start, end), "all_reduces": [(start, end, bytes), ...]}."""
    begin, end = record["backward"]
    spans = sorted((s, e) for s, e, _ in record["all_reduces"])
    busy = hidden = 0.0
    reach = -np.inf
    for s, e in spans:  # the union of the spans, so concurrent calls count once
        s = max(s, reach)
        if e > s:
            busy += e - s
            hidden += max(0.0, min(e, end) - max(s, begin))
            reach = e
    return hidden / busy if busy else 0.0


def show_timeline(records: list, title: str = "one training step"):
    """records[r]: rank r's {"backward": (t0, t1), "wait": (t1, t2), "all_reduces":
    [(start, end, bytes), ...]} from time.perf_counter(). Draws one row per rank: backward,
    the wait for communication, and each all-reduce, in ms from the earliest event."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    t0 = min(min(r["backward"][0], *(s for s, _, _ in r["all_reduces"])) for r in records)
    fig, ax = plt.subplots(figsize=(10, 1.6 + 1.2 * len(records)))
    colours = plt.get_cmap("tab10")
    for rank, record in enumerate(records):
        y = len(records) - 1 - rank
        b0, b1 = record["backward"]
        ax.barh(y + 0.2, (b1 - b0) * 1e3, left=(b0 - t0) * 1e3, height=0.4, color="tab:blue",
                label="backward" if rank == 0 else None)
        w0, w1 = record.get("wait", (b1, b1))
        ax.barh(y + 0.2, (w1 - w0) * 1e3, left=(w0 - t0) * 1e3, height=0.4, color="lightgrey",
                hatch="//", label="waiting for the all-reduces" if rank == 0 else None)
        lane = 0.5 / max(len(record["all_reduces"]), 1)  # one lane per all-reduce: they queue
        for k, (s, e, _nbytes) in enumerate(record["all_reduces"]):
            middle = y - 0.05 - (k + 0.5) * lane
            ax.barh(middle, (e - s) * 1e3, left=(s - t0) * 1e3, height=lane * 0.9,
                    color=colours(k % 10), edgecolor="black", linewidth=0.5)
    ax.set_yticks(range(len(records)), [f"rank {r}" for r in reversed(range(len(records)))])
    ax.set_xlabel("ms; below each rank's backward: its all-reduces, from start to finish, "
                  "one lane each")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=8)
    fig.tight_layout()
    shares = ", ".join(f"rank {r}: {overlap_fraction(rec):.0%}" for r, rec in enumerate(records))
    count = len(records[0]["all_reduces"])
    _show(fig, f"Timeline of {title} on {len(records)} ranks: per rank a bar for backward and "
          f"one bar per all-reduce ({count} on rank 0); the share of all-reduce time that "
          f"overlaps backward is {shares}.")


def show_loss_curves(curves: dict, xlabel: str = "updates of the model",
                     title: str = "loss on the whole data set", log: bool = True):
    """One line per entry of curves ({label: [loss, ...]}), against its index."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    fig, ax = plt.subplots(figsize=(8, 4))
    for label, losses in curves.items():
        ax.plot(range(len(losses)), losses, label=label,
                linestyle="--" if label.startswith("sync") else "-")
    if log:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel="loss", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    ends = "; ".join(f"{label}: {losses[-1]:.3g}" for label, losses in curves.items())
    _show(fig, f"Line plot of {title} against {xlabel}, one line per run. Final losses: {ends}.")


def show_sampler(table: list, num_samples: int, title: str = "who gets which sample"):
    """table[e][r]: the sample indices rank r gets in epoch e (a sampler's output). One row per
    epoch; a sample's cell is coloured by the rank that gets it, with its position in that
    rank's order written in it; a sample given to two ranks (padding) is outlined."""
    import matplotlib.pyplot as plt

    from distlab.collectives import _show

    epochs, ranks = len(table), len(table[0])
    fig, axes = plt.subplots(epochs, 1, figsize=(min(1 + 0.5 * num_samples, 12), 1 + epochs),
                             squeeze=False)
    cmap = plt.get_cmap("tab10")
    for e, (ax, row) in enumerate(zip(axes[:, 0], table, strict=True)):
        owners: dict[int, list] = {}
        for r, indices in enumerate(row):
            for position, index in enumerate(indices):
                owners.setdefault(int(index), []).append((r, position))
        for index in range(num_samples):
            got = owners.get(index, [])
            colour = cmap(got[0][0] % 10) if got else "white"
            ax.add_patch(plt.Rectangle((index, 0), 1, 1, facecolor=colour, alpha=0.6,
                                       edgecolor="black" if len(got) > 1 else "white",
                                       linewidth=2.5 if len(got) > 1 else 1))
            ax.text(index + 0.5, 0.5, "/".join(f"r{r}.{p}" for r, p in got), ha="center",
                    va="center", fontsize=7)
        ax.set(xlim=(0, num_samples), ylim=(0, 1))
        ax.set_yticks([0.5], [f"epoch {e}"])
        ax.set_xticks(np.arange(num_samples) + 0.5, range(num_samples))
        ax.tick_params(length=0)
    axes[0, 0].set_title(f"{title} (cell: rank.position; outlined: padding, given twice)")
    fig.tight_layout()
    words = "; ".join(f"epoch {e}: " + ", ".join(f"rank {r} gets {list(map(int, ix))}"
                                                 for r, ix in enumerate(row))
                      for e, row in enumerate(table))
    _show(fig, f"Samples 0 to {num_samples - 1} coloured by the rank ({ranks} ranks) that gets "
          f"them, one row per epoch: {words}.")
