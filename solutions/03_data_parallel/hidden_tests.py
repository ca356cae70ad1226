"""Hidden tests of notebook 03 (data parallel): every training exercise against single-process
training on the concatenated batch, computed here, outside the ranks (under the judge the
learner's code runs there).

Every test runs its cases on one set of 4 processes: a case of world size m (1-4) gets a
default process group of its own on the first m of them, with a short timeout, and the others
sit it out. One set of ranks for all world sizes keeps a test fast (the launcher forks a new
set for every world size; here a case costs a FileStore rendezvous), and a FileStore barrier
between cases stops every rank at the first case that fails. Models are float64, so that
single-process training and its data-parallel twin agree to ~1e-12 and any real difference
shows. The ranks update the weights with the small optimizers below (SGD, AdamW): the same
arithmetic as torch.optim's (tested), on both sides.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import (
    PG_TIMEOUT_S,
    calls_of,
    check_close,
    describe,
    each_case,
    first_rank_failure,
    fmt,
    on_ranks,
    rank_failure,
    recording,
    rendezvous_file,
    trusted_globals,
)

RANKS = 4  # processes per test; a case of world size m uses the first m
BARRIER_S = 60.0  # between cases; a stuck collective gives up after PG_TIMEOUT_S long before
RTOL, ATOL = 1e-7, 1e-9  # float64 training, 3 steps: the same to ~1e-12 when right
# The process groups of a test's cases, destroyed when the next test starts on these ranks. A
# gloo group's destructor joins its worker threads while holding the GIL, and a worker that is
# still releasing a finished collective's tensors (whose Python objects are gone) needs the
# GIL: destroyed at once, a group can deadlock its rank. By the next test the workers are idle.
_GROUPS: list = []


# ---------------------------------------------------------------- models, optimizers


_NET_CLASS: dict = {}  # the Net class, made once per process (not functools.cache: a cache
# pickles by name, and the judge ships the harness by value to a runner that cannot import this)


def _net_class():
    if "Net" not in _NET_CLASS:
        _NET_CLASS["Net"] = _make_net_class()
    return _NET_CLASS["Net"]


def _make_net_class():
    import torch
    from torch import nn

    class Net(nn.Module):
        """Linear layers (float64) with tanh between them, an input-scaling buffer; optionally
        layer 2 sharing layer 1's weight (tied) and some frozen parameters."""

        def __init__(self, spec):
            super().__init__()
            sizes = spec["sizes"]
            self.register_buffer("scale", 0.5 + torch.rand(sizes[0], dtype=torch.float64))
            self.layers = nn.ModuleList(nn.Linear(a, b, dtype=torch.float64)
                                        for a, b in zip(sizes, sizes[1:], strict=False))
            if spec.get("tied"):
                self.layers[2].weight = self.layers[1].weight
            for index, which in spec.get("frozen", []):
                getattr(self.layers[index], which).requires_grad_(False)

        def forward(self, x):
            x = x * self.scale
            for layer in self.layers[:-1]:
                x = torch.tanh(layer(x))
            return self.layers[-1](x)

    return Net


def _net(spec: dict, seed: int):
    import torch

    torch.manual_seed(seed)
    return _net_class()(spec)


def _spec(rng, tied: bool = True, frozen: bool = True) -> dict:
    """A random small model: d_in -> h -> h -> h -> c (layers 1 and 2 are h x h, so they can
    share a weight), sometimes a wider last hidden layer."""
    d_in, h, c = (int(v) for v in rng.integers((2, 3, 2), (7, 8, 5)))
    sizes = [d_in, h, h, h, c]
    if rng.random() < 0.5:
        sizes.insert(4, int(rng.integers(h + 1, 12)))
    chosen = []
    if frozen:
        options = [(0, "weight"), (0, "bias"), (len(sizes) - 2, "bias")]
        chosen = [options[int(i)] for i in rng.choice(3, size=int(rng.integers(1, 3)),
                                                      replace=False)]
    return {"sizes": sizes, "tied": bool(tied and rng.random() < 0.7), "frozen": chosen,
            "seed": int(rng.integers(1 << 30))}


class _Optimizer:
    """SGD or AdamW (torch.optim's arithmetic; decoupled weight decay 0.01) with the
    zero_grad() and step() of a torch optimizer."""

    def __init__(self, kind: str, params, lr: float):
        self.kind, self.lr, self.params = kind, lr, list(params)
        self.t, self.m, self.v = 0, {}, {}

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        import torch

        self.t += 1
        with torch.no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                if self.kind == "SGD":
                    p -= self.lr * p.grad
                    continue
                m = self.m.setdefault(p, torch.zeros_like(p))
                v = self.v.setdefault(p, torch.zeros_like(p))
                p.mul_(1 - self.lr * 0.01)
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                denom = (v.sqrt() / math.sqrt(1 - 0.999**self.t)).add_(1e-8)
                p.addcdiv_(m, denom, value=-self.lr / (1 - 0.9**self.t))


def _batches(rng, spec: dict, m: int, steps: int) -> list:
    """Per step (xs, ys): one float64 input tensor and one label tensor per rank."""
    import torch

    size = int(rng.integers(2, 6))
    return [([torch.from_numpy(rng.standard_normal((size, spec["sizes"][0]))) for _ in range(m)],
             [torch.from_numpy(rng.integers(0, spec["sizes"][-1], size)) for _ in range(m)])
            for _ in range(steps)]


def _uneven_batches(rng, spec: dict, m: int, steps: int) -> list:
    """As _batches, but the ranks' shards differ in size (when m > 1), as a global batch that
    the world size does not divide gives them."""
    import torch

    batches = []
    for _ in range(steps):
        sizes = [int(v) for v in rng.integers(2, 7, m)]
        while m > 1 and len(set(sizes)) == 1:
            sizes = [int(v) for v in rng.integers(2, 7, m)]
        batches.append(([torch.from_numpy(rng.standard_normal((n, spec["sizes"][0])))
                         for n in sizes],
                        [torch.from_numpy(rng.integers(0, spec["sizes"][-1], n))
                         for n in sizes]))
    return batches


def _single_process(spec: dict, batches: list, kind: str, lr: float) -> list:
    """The oracle: rank 0's model trained in one process on each step's concatenated batch;
    every parameter after each step."""
    import torch
    import torch.nn.functional as F

    model = _net(spec, spec["seed"])
    optimizer = _Optimizer(kind, model.parameters(), lr)
    history = []
    for xs, ys in batches:
        F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append([p.detach().clone() for p in model.parameters()])
    return history


def _oracle_broadcast(module) -> None:
    """A correct broadcast_parameters: the DDP exercises use it, so a mistake in that exercise
    costs its own points only."""
    import itertools

    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            dist.broadcast(tensor, src=0)



# ---------------------------------------------------------------- cases on 4 processes


def _store_path(tag) -> str:
    return rendezvous_file(f"dp-{tag}")


@contextlib.contextmanager
def _case_group(rank: int, m: int, index: int):
    """The default process group of one case: world size m, waits that give up after
    PG_TIMEOUT_S."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{_store_path(index)}", rank=rank,
                            world_size=m, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    _GROUPS.append(dist.group.WORLD)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _cases_harness(rank, n, fn, run_case, cases):
    """Run the cases of one test on n processes: case k on its first cases[k]["world_size"],
    through run_case (one of the *_case functions below: a test's harness names its own, so
    the judge ships no other with it, and no stand-in another one uses).
    Returns, per case this rank took part in, ("ok", value) or (kind, text); None for a case
    it sat out; stops on every rank after the first case that failed on any."""
    import torch.distributed as dist

    _GROUPS.clear()
    coordinator = dist.FileStore(_store_path("barrier"), n)
    results = []
    try:
        for index, case in enumerate(cases):
            m = case["world_size"]
            entry = None
            if rank < m:
                entry = _one_case(rank, m, fn, run_case, case, index)
            results.append(entry)
            coordinator.set(f"{index}/{rank}", "fail" if entry and entry[0] != "ok" else "ok")
            keys = [f"{index}/{r}" for r in range(n)]
            coordinator.wait(keys, datetime.timedelta(seconds=BARRIER_S))
            if any(coordinator.get(key) == b"fail" for key in keys):
                break
    finally:
        coordinator.set(f"exit/{rank}", "")
        if rank == 0:  # the last to use the store, so it removes the files
            coordinator.wait([f"exit/{r}" for r in range(n)],
                             datetime.timedelta(seconds=BARRIER_S))
            for tag in [*range(len(results)), "barrier"]:
                with contextlib.suppress(OSError):
                    os.remove(_store_path(tag))
    return results


def _one_case(rank, m, fn, run_case, case, index):
    """One case on this rank: ("ok", what it produced), or how it failed."""
    if run_case is _ddp_train_case:  # the learner's function makes its own group
        try:
            return "ok", run_case(rank, m, fn, case, index)
        except Exception as err:  # noqa: BLE001 - the learner's code failed: the verdict
            return rank_failure(err, "raised")
    try:
        with _case_group(rank, m, index):
            try:
                return "ok", run_case(rank, m, fn, case)
            except Exception as err:  # noqa: BLE001 - the learner's code failed: the verdict
                return rank_failure(err, "raised")
    except Exception as err:  # noqa: BLE001 - the group failed, after another rank's error
        return rank_failure(err, "broken")


def _sync_case(rank, m, fn, case):
    """Per step: the parameters, and what this rank sent in the step (the recorder)."""
    model = _net(case["spec"], case["spec"]["seed"])  # the same start on every rank
    history = []
    for xs, ys in case["batches"]:
        with recording(flops=False, saved=False) as rec:
            fn(model, xs[rank], ys[rank], case["lr"])
        history.append({"params": [p.detach().clone() for p in model.parameters()],
                        "sent": rec.summary()})
    return history


def _broadcast_case(rank, m, fn, case):
    import itertools

    model = _net(case["spec"], case["spec"]["seed"] + rank)  # a different start on each rank
    with recording(flops=False, saved=False) as rec:
        fn(model)
    return {"state": [t.detach().clone()
                      for t in itertools.chain(model.parameters(), model.buffers())],
            "sent": rec.summary()}


def _torch_ddp_alive(model) -> str:
    """PyTorch's own DDP wrapped around any parameter of `model` in this process (the
    DistributedDataParallel and its Reducer): its class name, or '' when none."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    mine = {id(p) for p in model.parameters()}
    found = set()
    for obj in gc.get_objects():
        if type(obj) is not DistributedDataParallel and not isinstance(
                obj, DistributedDataParallel):
            continue
        if any(id(p) in mine for p in obj.module.parameters()):
            found.add(type(obj).__name__)
    return ", ".join(sorted(found))


def _wrapper_case(rank, m, cls, case):
    """Train with the learner's DDP class. Per step: the parameters; every collective of the
    step as the recorder saw it (each route to it), and how many had started when backward
    returned; the dist.all_reduce calls that backward waited for (blocking, or waited in a
    hook); and whether PyTorch's DDP runs in this process."""
    import time

    import torch.nn.functional as F

    from distlab.data_parallel import watch_all_reduce

    model = _net(case["spec"], case["spec"]["seed"] + rank)  # apart: the class must broadcast
    extra = () if case["bucket_mb"] is None else (case["bucket_mb"],)
    steps = []
    with trusted_globals(cls, broadcast_parameters=_oracle_broadcast), \
            watch_all_reduce(defer=True) as log:  # results land only at wait()
        ddp = cls(model, *extra)
        if getattr(ddp, "module", None) is not model:
            raise AttributeError("the wrapper's .module is not the model it was given")
        position = {id(p): i for i, p in enumerate(q for q in model.parameters()
                                                     if q.requires_grad)}
        try:  # the buckets as positions among the trainable parameters, if it has buckets
            buckets = [[position.get(id(p), -1) for p in b] for b in ddp.buckets]
        except Exception:  # noqa: BLE001 - none, or not lists of parameters
            buckets = None
        optimizer = _Optimizer(case["optimizer"], model.parameters(), case["lr"])
        for xs, ys in case["batches"]:
            if hasattr(ddp, "on_train_batch_start"):
                ddp.on_train_batch_start()
            log.clear()
            with recording(flops=False, saved=False) as rec:
                loss = F.cross_entropy(ddp(xs[rank]), ys[rank]) / m  # arrives scaled
                forward = len(rec.calls)
                loss.backward()
                returned = time.perf_counter()
                started = len(rec.calls)
                ddp.finish_gradient_synchronization()
            blocked = [call["bytes"] for call in log.calls
                       if call["start"] <= returned and (
                           not call["async"] or (call["waited"] is not None
                                                 and call["waited"] <= returned))]
            unwaited = [call["bytes"] for call in log.calls
                        if call["async"] and call["waited"] is None]
            optimizer.step()
            optimizer.zero_grad()
            steps.append({"params": [p.detach().clone() for p in model.parameters()],
                          "sent": rec.summary(), "in_forward": forward,
                          "during_backward": started, "blocked": blocked,
                          "unwaited": unwaited, "buckets": buckets,
                          "torch_ddp": _torch_ddp_alive(model)})
    return steps


def _accumulate_case(rank, m, fn, case):
    """The learner's accumulated_step on torch DDP, next to a twin DDP that runs one plain
    backward per step: bucket all-reduces per step, and how many one backward makes."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distlab.data_parallel import count_bucket_all_reduces

    model = _net(case["spec"], case["spec"]["seed"])
    ddp = DDP(model)
    calls = count_bucket_all_reduces(ddp)
    twin = DDP(_net(case["spec"], case["spec"]["seed"]))
    twin_calls = count_bucket_all_reduces(twin)
    optimizer = _Optimizer(case["optimizer"], model.parameters(), case["lr"])
    steps = []
    for micro_batches in case["steps"]:
        before, twin_before = len(calls), len(twin_calls)
        fn(ddp, optimizer, [(xs[rank], ys[rank]) for xs, ys in micro_batches])
        xs, ys = micro_batches[0]
        F.cross_entropy(twin(xs[rank]), ys[rank]).backward()
        twin.zero_grad()
        steps.append({"params": [p.detach().clone() for p in model.parameters()],
                      "calls": len(calls) - before, "per_backward": len(twin_calls) - twin_before})
    return steps


def _ddp_train_case(rank, m, fn, case, index):
    """The learner's ddp_train on a model and data set of ours. Its init_process_group gets
    this case's rendezvous and the short timeout."""
    import torch.distributed as dist
    from torch.utils.data import TensorDataset

    from distlab.intercept import intercepting

    def on_the_case_store(_name, real):
        def init_process_group(backend=None, *args, **kwargs):
            kwargs.pop("store", None)
            kwargs.update(init_method=f"file://{_store_path(index)}",
                          timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
            real(backend, **kwargs)
            _GROUPS.append(dist.group.WORLD)
        return init_process_group

    model = _net(case["spec"], case["spec"]["seed"])
    try:
        with intercepting(["init_process_group"], on_the_case_store):
            fn(rank, m, model, TensorDataset(case["x"], case["y"]), epochs=case["epochs"],
               batch_size=case["batch_size"], lr=case["lr"])
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return [p.detach().clone() for p in model.parameters()]


# One harness per test: what the judge ships with a test's requests is its harness and what
# that uses, so the harness of broadcast_parameters must not reach _wrapper_case's stand-in
# (_oracle_broadcast, a correct broadcast_parameters).
def _sync_harness(rank, n, fn, cases):
    return _cases_harness(rank, n, fn, _sync_case, cases)


def _broadcast_harness(rank, n, fn, cases):
    return _cases_harness(rank, n, fn, _broadcast_case, cases)


def _wrapper_harness(rank, n, cls, cases):
    return _cases_harness(rank, n, cls, _wrapper_case, cases)


def _accumulate_harness(rank, n, fn, cases):
    return _cases_harness(rank, n, fn, _accumulate_case, cases)


def _ddp_train_harness(rank, n, fn, cases):
    return _cases_harness(rank, n, fn, _ddp_train_case, cases)


def _check_params(got: list, want: list, where: str, rank: int, names: list,
                  rtol: float = RTOL, atol: float = ATOL) -> None:
    if not isinstance(got, list) or len(got) != len(want):
        raise AssertionError(f"{where}: rank {rank}: the model lost or gained parameters")
    for name, g, w in zip(names, got, want, strict=True):
        check_close(g.numpy(), w.numpy(), f"{where}: rank {rank}",
                    f"{name} (expected: single-process training on the whole batch)",
                    rtol=rtol, atol=atol)


def _param_names(spec: dict) -> list[str]:
    return [name for name, _ in _net(spec, 0).named_parameters()]


def _world_sizes(rng) -> list[int]:
    """2 first (the smallest case that can be wrong), then 4, 3, 1 in random order."""
    return [2] + [int(m) for m in rng.permutation([4, 3, 1])]


# ---------------------------------------------------------------- section 1


@exercise
def sync_sgd_step(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    cases = []
    for m in _world_sizes(rng):
        spec = _spec(rng, frozen=False)
        cases.append({"world_size": m, "spec": spec, "lr": float(rng.uniform(0.1, 0.5)),
                      "batches": _uneven_batches(rng, spec, m, 3)})
    for case, entries in each_case(_sync_harness, fn, RANKS, cases):
        m, spec = case["world_size"], case["spec"]
        where = f"world_size={m}, lr={case['lr']:.3g}"
        entries = entries[:m]  # the ranks in the case
        first_rank_failure(where, entries)
        oracle = _single_process(spec, case["batches"], "SGD", case["lr"])
        grad_bytes = sum(8 * p.numel() for p in _net(spec, 0).parameters())
        for step, want in enumerate(oracle):
            sizes = [len(y) for y in case["batches"][step][1]]
            for rank, (_, history) in enumerate(entries):
                here = f"{where}, step {step + 1}"
                _check_sync_budget(history[step]["sent"], grad_bytes, m,
                                   f"{here}: rank {rank}")
                try:
                    # a float32 count (torch.tensor's default) rounds the shard's share at
                    # ~1e-7; a wrong weighting is off by percents
                    _check_params(history[step]["params"], want, here, rank, _param_names(spec),
                                  rtol=1e-5, atol=1e-7)
                except AssertionError as err:
                    raise AssertionError(
                        f"{err}. The ranks' shards held {sizes} samples: the whole batch's "
                        "mean loss weights every sample the same, so each rank's shard counts "
                        "by its size, not as 1/world_size") from None


def _check_sync_budget(sent: dict, grad_bytes: int, m: int, here: str) -> None:
    """Synchronous SGD sends each gradient once, by all-reduce (the given sum), plus at most one
    all-reduce of one number (the global batch's size): nothing else, nothing more."""
    if m == 1:
        return
    reduced = calls_of(sent, "all_reduce")
    small = [c for c in reduced if c["bytes"] <= 8]
    others = [c for c in sent["calls"] if c["kind"] != "all_reduce"]
    if others or len(small) > 1 or sum(c["bytes"] for c in reduced) - sum(
            c["bytes"] for c in small) != grad_bytes:
        raise AssertionError(f"{here} sent {describe(sent)}; the step needs one all-reduce of "
                             f"every gradient, {grad_bytes} B in all (each tied weight once), "
                             "plus at most one all-reduce of one number per step, and no other "
                             "collective")


@exercise
def broadcast_parameters(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    cases = [{"world_size": m, "spec": _spec(rng)} for m in _world_sizes(rng)]
    for case, entries in each_case(_broadcast_harness, fn, RANKS, cases):
        m, spec = case["world_size"], case["spec"]
        where = f"world_size={m}, every rank's model built from its own seed"
        entries = entries[:m]  # the ranks in the case
        first_rank_failure(where, entries)
        model = _net(spec, spec["seed"])
        names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
        want = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
        state_bytes = sum(8 * t.numel() for t in want)
        listed = list(model.state_dict().values())  # a tied weight under each of its names
        most, most_calls = sum(8 * t.numel() for t in listed), len(listed)
        for rank, (_, got) in enumerate(entries):
            state, sent = got["state"], got["sent"]
            if len(state) != len(want):
                raise AssertionError(f"{where}: rank {rank}: the model lost or gained tensors")
            for name, g, w in zip(names, state, want, strict=True):
                kind = "buffer" if name in dict(model.named_buffers()) else "parameter"
                check_close(g.numpy(), w.numpy(), f"{where}: rank {rank}",
                            f"{kind} {name} (expected: rank 0's)", rtol=0, atol=0)
            cast = sum(c["bytes"] for c in calls_of(sent, "broadcast"))
            if m > 1 and not (state_bytes <= cast <= most and len(calls_of(sent)) ==
                              len(calls_of(sent, "broadcast")) <= most_calls):
                raise AssertionError(
                    f"{where}: rank {rank} sent {describe(sent)}; the model's state, its "
                    f"parameters and buffers with each tied tensor once, is {len(want)} "
                    f"tensors of {state_bytes} B: one broadcast of each, once (a tied "
                    "weight under each of its names at most)")


# ---------------------------------------------------------------- section 2


def _ddp_oracle(case: dict, m: int, drop_last: bool = False) -> list:
    """Single-process SGD on the batches DDP's ranks draw together: each epoch, every rank's
    DistributedSampler (shuffled, padded or with the remainder dropped, epoch set) cut into
    batches; step i is batch i of every rank, concatenated."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data.distributed import DistributedSampler

    model = _net(case["spec"], case["spec"]["seed"])
    optimizer = _Optimizer("SGD", model.parameters(), case["lr"])
    size, batch = len(case["y"]), case["batch_size"]
    for epoch in range(case["epochs"]):
        orders = []
        for rank in range(m):
            sampler = DistributedSampler(range(size), num_replicas=m, rank=rank,
                                         drop_last=drop_last)
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        for start in range(0, len(orders[0]), batch):
            rows = torch.tensor([i for order in orders for i in order[start:start + batch]])
            F.cross_entropy(model(case["x"][rows]), case["y"][rows]).backward()
            optimizer.step()
            optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@exercise
def ddp_train(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    cases = []
    for m in [3] + [int(v) for v in rng.permutation([4, 2, 1])]:
        spec = _spec(rng, tied=False, frozen=False)
        size = int(rng.integers(3, 6)) * m + (int(rng.integers(1, m)) if m > 1 else 0)
        cases.append({"world_size": m, "spec": spec, "epochs": 2,
                      "batch_size": int(rng.integers(2, 4)), "lr": float(rng.uniform(0.2, 0.5)),
                      "x": torch.from_numpy(rng.standard_normal((size, spec["sizes"][0]))),
                      "y": torch.from_numpy(rng.integers(0, spec["sizes"][-1], size))})
    for case, entries in each_case(_ddp_train_harness, fn, RANKS, cases):
        m, size = case["world_size"], len(case["y"])
        uneven = f" (not a multiple of {m})" if size % m else ""
        where = (f"world_size={m}, {size} samples{uneven}, batch_size={case['batch_size']}, "
                 f"epochs={case['epochs']}")
        entries = entries[:m]  # the ranks in the case
        first_rank_failure(where, entries)
        names = _param_names(case["spec"])
        padded = _ddp_oracle(case, m)
        dropped = _ddp_oracle(case, m, drop_last=True) if size % m else padded
        for rank, (_, params) in enumerate(entries):
            try:  # padded (the sampler's default) or with the remainder dropped: both right
                _check_params(params, padded, where, rank, names)
            except AssertionError:
                if dropped is padded:
                    raise
                _check_params(params, dropped, where + ", drop_last=True", rank, names)


# ---------------------------------------------------------------- section 3


def _trainable_numels(spec: dict) -> list[int]:
    """Elements of each parameter an all-reduce must cover, in model.parameters() order."""
    return [p.numel() for p in _net(spec, 0).parameters() if p.requires_grad]


def _bucket_numels(numels: list[int], limit_bytes: float, itemsize: int = 8) -> list[int]:
    """The buckets of section 3c (PyTorch's Reducer's size rule): parameters from last to
    first, a bucket closed as soon as its size reaches the limit (the parameter that reaches
    it is in the bucket)."""
    buckets, current, size = [], 0, 0
    for n in reversed(numels):
        current += n
        size += n * itemsize
        if size >= limit_bytes:
            buckets.append(current)
            current, size = 0, 0
    return buckets + ([current] if current else [])


def _check_boundaries(buckets, spec: dict, limit_bytes: float, where: str) -> None:
    """A rank's buckets (positions among the case's trainable parameters, model order) against
    the rule of section 3c, bucket by bucket: every parameter once, backward's order, no
    bucket that could have closed earlier, none closed before it reached the cap."""
    numels = _trainable_numels(spec)
    if buckets is None:
        raise AssertionError(f"{where}: self.buckets is not a list of lists of the model's "
                             "parameters")
    flat = [i for bucket in buckets for i in bucket]
    if sorted(flat) != list(range(len(numels))) or not all(buckets):
        raise AssertionError(f"{where}: fill_buckets' buckets do not hold every trainable "
                             "parameter exactly once")
    if flat != list(range(len(numels)))[::-1]:
        raise AssertionError(f"{where}: fill_buckets' parameters, bucket after bucket, are "
                             "not in the order backward makes the gradients ready (3a), so a "
                             "bucket waits for gradients that come late")
    for number, bucket in enumerate(buckets):
        size = 8 * sum(numels[i] for i in bucket)  # float64
        if size - 8 * numels[bucket[-1]] >= limit_bytes:
            raise AssertionError(f"{where}: bucket {number} holds {len(bucket)} parameters; "
                                 "without its last one it already held the cap: it is larger "
                                 "than it needs to be, and its all-reduce goes later")
        if size < limit_bytes and number < len(buckets) - 1:
            raise AssertionError(f"{where}: bucket {number} holds less than the cap and is not "
                                 "the last: more all-reduces (more alphas) than needed")


def _telling_limit(numels: list[int], rng) -> float | None:
    """A bucket limit (bytes) under which buckets filled first-to-last would differ from
    last-to-first, or None."""
    limits = [8 * n + 4 for n in sorted(set(np.cumsum(numels).tolist() + numels))]
    rng.shuffle(limits)
    for limit in limits:
        backward = sorted(_bucket_numels(numels, limit))
        forward = sorted(_bucket_numels(list(reversed(numels)), limit))
        if backward != forward:
            return float(limit)
    return None


def _wrapper_cases(rng, buckets: bool) -> list:
    cases = []
    for index, m in enumerate(_world_sizes(rng)):
        spec, limit = _spec(rng), None
        numels = _trainable_numels(spec)
        if buckets:
            limit = _telling_limit(numels, rng) if index == 0 else None
            while index == 0 and limit is None:
                spec = _spec(rng)
                numels = _trainable_numels(spec)
                limit = _telling_limit(numels, rng)
            exact = np.cumsum(numels[::-1])[:-1]  # a bucket that reaches the cap exactly
            limit = limit or float([4, 8 * int(rng.choice(exact)) if len(exact) else 4,
                                    8 * int(rng.integers(min(numels), sum(numels)))][index % 3])
        cases.append({"world_size": m, "spec": spec, "lr": float(rng.uniform(0.05, 0.3)),
                      "optimizer": "SGD" if index % 2 == 0 else "AdamW",
                      "bucket_mb": None if limit is None else limit / 2**20,
                      "batches": _batches(rng, spec, m, 3)})
    return cases


def _check_wrapper(cls, rng, buckets: bool) -> None:
    import torch

    from distlab import require_filled

    require_filled(cls)
    cases = _wrapper_cases(rng, buckets)
    for case, entries in each_case(_wrapper_harness, cls, RANKS, cases):
        m, spec = case["world_size"], case["spec"]
        where = f"world_size={m}, {case['optimizer']}"
        if buckets:
            where += f", bucket_size_mb={case['bucket_mb']:.3g}"
        entries = entries[:m]  # the ranks in the case
        first_rank_failure(where, entries)
        oracle = _single_process(spec, case["batches"], case["optimizer"], case["lr"])
        numels = _trainable_numels(spec)
        expected = sorted(_bucket_numels(numels, case["bucket_mb"] * 2**20) if buckets
                          else numels)
        if buckets:  # the boundaries first: they name the idea
            _check_boundaries(entries[0][1][0]["buckets"], spec, case["bucket_mb"] * 2**20,
                              where)
        for rank, (_, steps) in enumerate(entries):  # the idea first: it names what is wrong
            for step, record in enumerate(steps):
                _check_step_communication(record, expected, buckets, m,
                                          f"{where}, step {step + 1}: rank {rank}")
        for step in range(len(oracle)):  # apart from each other: the results never landed
            first = entries[0][1][step]["params"]
            for rank, (_, steps) in enumerate(entries[1:], start=1):
                if any(not torch.allclose(a, b, rtol=1e-5, atol=1e-7)
                       for a, b in zip(first, steps[step]["params"], strict=False)):
                    raise AssertionError(f"{where}, step {step + 1}: ranks 0 and {rank} hold "
                                         "different weights after the step: the optimizer "
                                         "read gradients other than the all-reduced ones (the "
                                         "result must get back into every .grad)")
        for step, want in enumerate(oracle):
            here = f"{where}, step {step + 1}"
            for rank, (_, steps) in enumerate(entries):
                try:
                    _check_params(steps[step]["params"], want, here, rank, _param_names(spec))
                except AssertionError as error:
                    raise AssertionError(f"{error}\nThe loss each rank backpropagates is "
                                         "already its share of the whole batch's mean (as "
                                         "in section 1): combined over the ranks, the "
                                         "gradients must give the whole batch's") from None


def _check_step_communication(record: dict, expected: list, buckets: bool, m: int,
                              here: str) -> None:
    """One rank's step against the idea: its own hooks start one asynchronous all-reduce per
    bucket (per parameter) during backward, of that bucket's size; nothing else is sent."""
    if record["torch_ddp"]:
        raise AssertionError(f"{here}: PyTorch's own DistributedDataParallel runs on this rank "
                             "and does the gradient synchronization: the hooks and the "
                             "all-reduces are the exercise")
    calls = record["sent"]["calls"]
    others = [c for c in calls if c["kind"] != "all_reduce"]
    if others:
        raise AssertionError(f"{here}: the step sent {describe(record['sent'])}; averaging "
                             "gradients needs all-reduces only (the state was broadcast at "
                             "construction)")
    got = sorted(c["bytes"] // 8 for c in calls)
    what = ("one message per bucket, buckets filled in the order backward makes the gradients "
            "ready" if buckets else "one per trainable parameter, each tied one once")
    if got != expected:
        raise AssertionError(f"{here} all-reduced tensors of {fmt(got, 12)} elements; "
                             f"expected {fmt(expected, 12)} ({what})")
    if record["in_forward"]:
        raise AssertionError(f"{here}: {record['in_forward']} all-reduce(s) ran in forward, "
                             "before any gradient existed")
    if m > 1 and record["during_backward"] != len(got):
        unit = "bucket" if buckets else "parameter"
        raise AssertionError(f"{here}: {record['during_backward']} of its {len(got)} "
                             "all-reduces had started when backward returned: no overlap "
                             f"with backward. Each {unit}'s should start during backward, "
                             "from its gradient hook, as soon as its gradients are complete")
    if m > 1 and record["blocked"]:
        raise AssertionError(f"{here}: backward waited for {len(record['blocked'])} "
                             "all-reduce(s) of its own hooks to finish: no overlap. Backward "
                             "could have gone on computing while the gradients travelled")
    if m > 1 and record["unwaited"]:
        raise AssertionError(f"{here}: {len(record['unwaited'])} asynchronous all-reduce(s) "
                             "were never waited for before optimizer.step(): the step read "
                             "gradients whose all-reduce had not landed")


@exercise
def DDPIndividualParameters(cls, rng):  # registered under the class's name
    _check_wrapper(cls, rng, buckets=False)


@exercise
def DDPBucketed(cls, rng):  # registered under the class's name
    _check_wrapper(cls, rng, buckets=True)


# ---------------------------------------------------------------- section 4


@exercise
def accumulated_step(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    cases = []
    for index, m in enumerate(_world_sizes(rng)):
        spec = _spec(rng, tied=False, frozen=False)
        k = [3, 4, 2, 1][index]
        batches, steps = [], []
        for _ in range(2):  # micro-batches of unequal sizes, the same sizes on every rank
            sizes = [int(v) for v in rng.integers(1, 6, k)]
            while k > 1 and len(set(sizes)) == 1:
                sizes = [int(v) for v in rng.integers(1, 6, k)]
            xs = [[torch.from_numpy(rng.standard_normal((n, spec["sizes"][0]))) for n in sizes]
                  for _ in range(m)]
            ys = [[torch.from_numpy(rng.integers(0, spec["sizes"][-1], n)) for n in sizes]
                  for _ in range(m)]
            steps.append([([xs[r][j] for r in range(m)], [ys[r][j] for r in range(m)])
                          for j in range(k)])
            batches.append(([t for row in xs for t in row], [t for row in ys for t in row]))
        cases.append({"world_size": m, "k": k, "spec": spec,
                      "optimizer": "SGD" if index % 2 == 0 else "AdamW",
                      "lr": float(rng.uniform(0.1, 0.4)), "steps": steps,
                      "whole": [(xs, ys) for xs, ys in batches]})
    for case in cases:  # what goes to the ranks: the micro-batches only
        whole = case.pop("whole")
        case["oracle"] = _single_process(case["spec"], whole, case["optimizer"], case["lr"])
    shipped = [{k: v for k, v in c.items() if k != "oracle"} for c in cases]
    for case, (_, entries) in zip(cases, each_case(_accumulate_harness, fn, RANKS, shipped),
                                  strict=True):
        m, k = case["world_size"], case["k"]
        sizes = "" if k == 1 else " of unequal sizes"
        where = f"world_size={m}, {k} micro-batches{sizes} per step, {case['optimizer']}"
        entries = entries[:m]  # the ranks in the case
        first_rank_failure(where, entries)
        for step, want in enumerate(case["oracle"]):
            here = f"{where}, step {step + 1}"
            for rank, (_, steps) in enumerate(entries):
                try:
                    _check_params(steps[step]["params"], want, here, rank,
                                  _param_names(case["spec"]))
                except AssertionError as error:
                    raise AssertionError(f"{error}\nEvery sample of the step must weigh the "
                                         "same in the mean: look at which backward "
                                         "communicates, and at what each micro-batch's loss "
                                         "weighs") from None
        for rank, (_, steps) in enumerate(entries):
            for step, record in enumerate(steps):
                if record["calls"] != record["per_backward"]:
                    raise AssertionError(
                        f"{where}, step {step + 1}: rank {rank}: DDP all-reduced "
                        f"{record['calls']} bucket(s) in the step; one backward's worth is "
                        f"{record['per_backward']}")


# ---------------------------------------------------------------- section 5


def _ps_harness(rank, n, cls, cases):
    """Replay each case's arrival order on the learner's server; a worker's gradient is
    computed when it pushes (while the others were pushing), from what it pulled."""
    import torch

    results = []
    for case in cases if rank == 0 else []:  # one rank is enough; the others keep the set warm
        try:
            server = cls(case["params"].clone(), case["lr"])
            held, versions, returned, history = {}, [], [], []
            for kind, worker in case["events"]:
                if kind == "pull":
                    weights, version = server.pull()
                    held[worker] = (weights, version)
                    versions.append(int(version))
                else:
                    weights, version = held[worker]
                    grad = case["H"][worker] @ weights - case["c"][worker]
                    returned.append(int(server.push(grad, version)))
                    history.append(torch.as_tensor(server.params).detach().clone())
            results.append(("ok", {"versions": versions, "returned": returned,
                                   "recorded": [int(s) for s in server.staleness],
                                   "history": history, "version": int(server.version)}))
        except Exception as err:  # noqa: BLE001 - the learner's code failed: the verdict
            results.append(rank_failure(err, "raised"))
            break
    return results


def _arrivals(rng, workers: int, rounds: int) -> list:
    """A random arrival order: each worker pulls, pushes, pulls, ... `rounds` times."""
    left = {w: 2 * rounds for w in range(workers)}
    events = []
    while any(left.values()):
        w = int(rng.choice([w for w, k in left.items() if k]))
        events.append(("pull" if left[w] % 2 == 0 else "push", w))
        left[w] -= 1
    return events


def _ps_replay(case: dict) -> dict:
    """The oracle, in numpy: snapshots on pull, staleness = updates since the pull."""
    w = case["params"].numpy().copy()
    H = [h.numpy() for h in case["H"]]
    c = [v.numpy() for v in case["c"]]
    version, held = 0, {}
    out = {"versions": [], "staleness": [], "history": []}
    for kind, worker in case["events"]:
        if kind == "pull":
            held[worker] = (w.copy(), version)
            out["versions"].append(version)
        else:
            snapshot, pulled = held[worker]
            out["staleness"].append(version - pulled)
            w = w - case["lr"] * (H[worker] @ snapshot - c[worker])
            version += 1
            out["history"].append(w.copy())
    return out


@exercise
def ParameterServer(cls, rng):  # registered under the class's name
    import torch

    from distlab import require_filled

    require_filled(cls)
    cases = []
    for workers in (2, 1, 3, 4):
        d = int(rng.integers(2, 5))
        H = []
        for _ in range(workers):
            a = rng.standard_normal((d, d))
            H.append(torch.from_numpy(a @ a.T / d + 0.5 * np.eye(d)))
        cases.append({"workers": workers, "events": _arrivals(rng, workers, 3),
                      "params": torch.from_numpy(rng.standard_normal(d)),
                      "lr": float(rng.uniform(0.05, 0.3)), "H": H,
                      "c": [torch.from_numpy(rng.standard_normal(d)) for _ in range(workers)]})
    results = on_ranks(_ps_harness, cls, RANKS, cases)[0]
    for index, case in enumerate(cases):
        names = "ABCD"
        story = " ".join(f"{names[w]}:{kind}" for kind, w in case["events"])
        where = f"{case['workers']} worker(s), arrivals {story}"
        if index >= len(results):
            return
        if results[index][0] != "ok":
            raise AssertionError(f"{where}: {results[index][1]}")
        got, want = results[index][1], _ps_replay(case)
        if got["versions"] != want["versions"]:
            raise AssertionError(f"{where}: the pulls returned versions {got['versions']}, "
                                 f"expected {want['versions']} (the updates applied so far)")
        for push, (mine, right) in enumerate(zip(got["returned"], want["staleness"],
                                                 strict=True)):
            if mine != right:
                raise AssertionError(f"{where}: push {push + 1} returned staleness {mine}, "
                                     f"expected {right}")
        if got["recorded"] != want["staleness"]:
            raise AssertionError(f"{where}: .staleness is {got['recorded']}, expected "
                                 f"{want['staleness']}")
        for push, (mine, right) in enumerate(zip(got["history"], want["history"], strict=True)):
            check_close(mine.numpy(), right, f"{where}: after push {push + 1}",
                        "the server's weights", rtol=1e-9, atol=1e-12)
        if got["version"] != len(want["history"]):
            raise AssertionError(f"{where}: .version is {got['version']} after "
                                 f"{len(want['history'])} pushes")


# ---------------------------------------------------------------- section 3d


TIMELINE_SIZES = (256, 1024, 1024, 1024, 10)  # the notebook's timeline model, float32
ARITHMETIC = ("BinOp", "UnaryOp", "Constant", "List", "Tuple", "Load", "Add", "Sub", "Mult",
              "Pow", "FloorDiv", "Div", "USub", "UAdd", "Return", "Expr", "Assign", "Store",
              "Name", "FunctionDef", "arguments", "Module")


@exercise
def predicted_all_reduces(fn, rng):  # noqa: ARG001 - one fixed case
    import ast
    import inspect
    import textwrap

    from distlab import require_filled

    require_filled(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        tree = None
    if tree is not None:
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) \
            else []
        odd = sorted({type(node).__name__ for stmt in body for node in ast.walk(stmt)
                      if type(node).__name__ not in ARITHMETIC})
        if odd:
            raise AssertionError("the prediction runs code (" + ", ".join(odd) + "): a "
                                 "prediction is numbers written from 3c's rules, "
                                 "arithmetic on the layer sizes only")
    names = getattr(getattr(fn, "__code__", None), "co_names", ())
    if names:
        raise AssertionError("the prediction uses " + ", ".join(names) + ": a prediction is "
                             "numbers and arithmetic on the layer sizes only")
    numels = []
    for a, b in zip(TIMELINE_SIZES, TIMELINE_SIZES[1:], strict=False):
        numels += [a * b, b]
    want = _bucket_numels(numels, 2 * 2**20, itemsize=4)
    got = fn()
    if not isinstance(got, list | tuple) or [int(v) for v in got] != want:
        raise AssertionError(f"you predict all-reduces of {got!r:.120} elements; that is not "
                             "what 3c's rules give on this model (neither the count nor the "
                             "sizes are shown): go back to 3c's rules")
