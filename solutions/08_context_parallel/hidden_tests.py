"""Hidden tests of notebook 08 (context parallelism): the online-softmax state after every
block against softmax over the keys seen, RingPass's backward by its messages, ring attention
and Ulysses on real ranks against single-process attention (values and gradients), with each
rank's messages, the key/value blocks it holds at once and its matmul FLOPs against the
idea's budget; the zig-zag assignment by the causal work it gives each rank; the bytes of
a forward and backward predicted against formulas written here.

The rank exercises run in harnesses of this module (by value, as the learner's code:
checks.on_ranks), in a short-timeout gloo group. ring_attention runs with a trusted RingPass
and merge_block, ulysses_attention with a trusted attention, so a mistake in one exercise costs
its own points only.
"""

from __future__ import annotations

import math

from autograder.exercises import exercise
from autograder.exercises.checks import (
    calls_of,
    check_tensor,
    each_case,
    first_rank_failure,
    live_tensor_bytes,
    recording,
    run_cases,
    with_trusted,
)

FLOP_SLACK = 1.02


# ---------------------------------------------------------------- trusted pieces


def _trusted_merge(m, l, acc, scores, v):  # noqa: E741
    import torch

    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores - m_new)
    scale = torch.exp(m - m_new)
    return m_new, scale * l + p.sum(-1, keepdim=True), scale * acc + p @ v


def _trusted_ring_pass():
    import torch
    import torch.distributed as dist

    def exchange(x, to, frm):
        received = torch.empty_like(x)
        request = dist.isend(x.contiguous(), dst=to)
        dist.recv(received, src=frm)
        request.wait()
        return received

    class RingPass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            rank, n = dist.get_rank(), dist.get_world_size()
            return exchange(x, (rank + 1) % n, (rank - 1) % n)

        @staticmethod
        def backward(ctx, grad):
            rank, n = dist.get_rank(), dist.get_world_size()
            return exchange(grad, (rank - 1) % n, (rank + 1) % n)

    return RingPass


def _trusted_attention(q, k, v, causal=False):
    import torch

    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _rows_of(x, mine, length):
    import torch

    return torch.cat([x[..., c * length:(c + 1) * length, :] for c in mine], dim=-2)


# ---------------------------------------------------------------- merge_block


@exercise
def merge_block(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for trial in range(12):
        lead = tuple(int(s) for s in rng.integers(1, 3, size=int(rng.integers(1, 3))))
        rows, cols, d = int(rng.integers(1, 5)), int(rng.integers(1, 10)), int(rng.integers(1, 5))
        scale = float(rng.choice([1.0, 30.0, 900.0]))
        scores = torch.from_numpy(rng.standard_normal((*lead, rows, cols))) * scale
        v = torch.from_numpy(rng.standard_normal((*lead, cols, d)))
        if trial % 3 == 2 and cols > 1:  # masked keys, never a row's first key
            masked = torch.from_numpy(rng.random((*lead, rows, cols)) < 0.4)
            masked[..., 0] = False
            scores = scores.masked_fill(masked, float("-inf"))
        cuts = sorted({0, cols, *(int(c) for c in rng.integers(1, cols + 1, size=2))})
        where = (f"scores of shape {tuple(scores.shape)} (up to {scale:g} x a normal), keys in "
                 f"blocks {[b - a for a, b in zip(cuts, cuts[1:], strict=False)]}")
        m = torch.full((*lead, rows, 1), float("-inf"), dtype=torch.float64)
        l = torch.zeros(*lead, rows, 1, dtype=torch.float64)  # noqa: E741 - the paper's ℓ
        acc = torch.zeros(*lead, rows, d, dtype=torch.float64)
        for a, b in zip(cuts, cuts[1:], strict=False):
            got = fn(m, l, acc, scores[..., a:b].clone(), v[..., a:b, :].clone())
            if not isinstance(got, tuple | list) or len(got) != 3:
                raise AssertionError(f"{where}: merge_block returned {type(got).__name__}, "
                                     "expected the state (m, l, acc)")
            m, l, acc = got  # noqa: E741
            seen = scores[..., :b]
            want_m = seen.amax(-1, keepdim=True)
            want_l = torch.exp(seen - want_m).sum(-1, keepdim=True)
            after = f"{where}, after the first {b} keys"
            check_tensor(m, want_m, after, what="m (the largest score so far)")
            if not torch.isfinite(l).all() or not torch.isfinite(acc).all():
                raise AssertionError(f"{after}: the state is not finite: an exponential "
                                     "overflowed")
            check_tensor(l, want_l, after, what="l (the sum of e^(s - m) over the keys so far)")
            check_tensor(acc / l, torch.softmax(seen, -1) @ v[..., :b, :], after,
                         what="acc / l", expected_is="softmax attention over those keys is")


# ---------------------------------------------------------------- RingPass


def _ring_pass_harness(rank, world_size, cls, cases):
    def one_case(case):
        x = case["x"][rank].clone().requires_grad_()
        with recording(flops=False, saved=False) as fwd:
            y = cls.apply(x)
        with recording(flops=False, saved=False) as bwd:
            y.backward(case["grad"][rank].clone())
        return {"y": y.detach().clone(), "grad": None if x.grad is None else x.grad.clone(),
                "bwd": bwd.summary(), "fwd": fwd.summary()}

    return run_cases(rank, world_size, cases, one_case)


@exercise
def RingPass(cls, rng):  # noqa: N802 - the exercise is named after the learner's class
    import torch

    from distlab import require_filled

    require_filled(cls)
    for n in (2, 3, 4):
        shapes = [tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 3))))
                  for _ in range(2)]
        cases = [{"x": [torch.from_numpy(rng.standard_normal(shape)) for _ in range(n)],
                  "grad": [torch.from_numpy(rng.standard_normal(shape)) for _ in range(n)]}
                 for shape in shapes]
        for shape, (case, entries) in zip(shapes, each_case(_ring_pass_harness, cls, n, cases),
                                          strict=True):
            where = f"world_size={n}, x of shape {shape}"
            first_rank_failure(where, entries)
            size = math.prod(shape) * 8
            for rank, (_, got) in enumerate(entries):
                check_tensor(got["y"], case["x"][(rank - 1) % n], where, rank,
                             "the forward's output", "the previous rank's x is")
                if got["grad"] is None:
                    raise AssertionError(f"{where}: rank {rank}'s x got no gradient")
                bwd = got["bwd"]["calls"]
                if other := [c["kind"] for c in bwd if c["kind"] not in ("send", "recv")]:
                    raise AssertionError(f"{where}: rank {rank}'s backward called {other[0]}: "
                                         "a gradient goes to one rank, in one message")
                sends = [c["peer"] for c in bwd if c["kind"] == "send"]
                recvs = [c["peer"] for c in bwd if c["kind"] == "recv"]
                if len(sends) != 1 or len(recvs) != 1 or any(c["bytes"] != size for c in bwd):
                    raise AssertionError(f"{where}: rank {rank}'s backward sent {len(sends)} "
                                         f"and received {len(recvs)} message(s); one of each, "
                                         f"of x's {size} B, is all it takes")
                if sends != [(rank - 1) % n] or recvs != [(rank + 1) % n]:
                    raise AssertionError(f"{where}: rank {rank}'s backward sent to rank "
                                         f"{sends[0]} and received from rank {recvs[0]}: where "
                                         "did this rank's x go in the forward, and whose "
                                         "gradient is it?")
                check_tensor(got["grad"], case["grad"][(rank + 1) % n], where, rank,
                             "x's gradient", "the gradient of the output x became is")


# ---------------------------------------------------------------- ring attention


def _ring_harness(rank, world_size, fn, cases):
    """Each case: a no-grad forward (its messages and the most bytes held at any message),
    then a forward and backward (their messages, output, gradients, FLOPs)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Holding(TorchDispatchMode):
        """The most tensor bytes alive, over the baseline, at any c10d call."""

        def __init__(self, baseline):
            super().__init__()
            self.baseline, self.peak = baseline, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "c10d":
                self.peak = max(self.peak, live_tensor_bytes() - self.baseline)
            return func(*args, **(kwargs or {}))

    def one_case(case):
        chunks, length = case["chunks"], case["length"]
        q, k, v = (_rows_of(t, chunks[rank], length) for t in case["qkv"])
        baseline = live_tensor_bytes()
        with torch.no_grad(), recording(flops=False, saved=False) as plain, \
                Holding(baseline) as held:
            fn(q, k, v, chunks, case["causal"])
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        with recording(saved=False) as fwd:
            out = fn(q, k, v, chunks, case["causal"])
        with recording(saved=False) as bwd:
            out.backward(_rows_of(case["grad"], chunks[rank], length))
        grads = [None if t.grad is None else t.grad.clone() for t in (q, k, v)]
        return {"out": out.detach().clone(), "grads": grads,
                "plain": plain.summary(), "held": held.peak,
                "fwd": fwd.summary(), "bwd": bwd.summary()}

    return run_cases(rank, world_size, cases, one_case)


def _zigzag(n):
    return [[r, 2 * n - 1 - r] for r in range(n)]


def _check_ring_messages(where, rank, n, summary, phase, block):
    calls = summary["calls"]
    if other := [c["kind"] for c in calls if c["kind"] not in ("send", "recv")]:
        shown = "an all-gather" if other[0] == "all_gather" else f"a collective ({other[0]})"
        raise AssertionError(f"{where}: rank {rank}'s {phase} made {shown}: the key/value "
                             "blocks travel the ring, one neighbour's block at a time, and no "
                             "rank ever holds them all")
    to, frm = ((rank + 1) % n, (rank - 1) % n) if phase != "backward" else \
        ((rank - 1) % n, (rank + 1) % n)
    sends = [c for c in calls if c["kind"] == "send"]
    recvs = [c for c in calls if c["kind"] == "recv"]
    if any(c["peer"] != to for c in sends) or any(c["peer"] != frm for c in recvs):
        peers = sorted({c["peer"] for c in sends})
        raise AssertionError(f"{where}: rank {rank}'s {phase} sent to ranks {peers}: in a ring "
                             f"a rank sends to one neighbour only (here rank {to}) and receives "
                             f"from the other; sending a block to every rank at once is an "
                             "all-gather")
    if any(c["bytes"] != block for c in sends + recvs):
        raise AssertionError(f"{where}: rank {rank}'s {phase} moved messages of "
                             f"{sorted({c['bytes'] for c in sends + recvs})} B; one key/value "
                             f"block is {block} B")
    if len(sends) != n - 1 or len(recvs) != n - 1:
        raise AssertionError(f"{where}: rank {rank}'s {phase} sent {len(sends)} block(s) and "
                             f"received {len(recvs)}: every rank needs every other rank's "
                             f"block once, and no more ({n - 1} passes of the ring per layer; "
                             "a pass more only brings each block home)")


def _pair_flops(batch, heads, length, d):
    """Matmul FLOPs of one pair of chunks, forward (q k^T, p v) and backward (their 4)."""
    return 12 * batch * heads * length * length * d


@exercise
def ring_attention(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    fn = with_trusted(fn, RingPass=_trusted_ring_pass(), merge_block=_trusted_merge)
    for n in (4, 3, 2):  # 4 first: on 2 ranks, every other rank is the one neighbour
        cases = []
        for index in range(3):
            zigzag = index == 2
            causal = index != 0
            batch, heads = int(rng.integers(1, 3)), int(rng.integers(1, 3))
            length, d = int(rng.integers(1, 4)), int(rng.integers(8, 13))
            chunks = _zigzag(n) if zigzag else [[r] for r in range(n)]
            seq = length * sum(len(c) for c in chunks)
            qkv = [torch.from_numpy(rng.standard_normal((batch, heads, seq, d)))
                   for _ in range(3)]
            grad = torch.from_numpy(rng.standard_normal((batch, heads, seq, d)))
            cases.append({"chunks": chunks, "length": length, "causal": causal, "qkv": qkv,
                          "grad": grad, "dims": (batch, heads, length, d)})
        for case, entries in each_case(_ring_harness, fn, n, cases):
            batch, heads, length, d = case["dims"]
            chunks, causal = case["chunks"], case["causal"]
            layout = "zig-zag" if len(chunks[0]) == 2 else "contiguous"
            where = (f"world_size={n}, causal={causal}, {layout} chunks {chunks} of {length} "
                     f"position(s), batch {batch}, {heads} head(s) of {d}")
            first_rank_failure(where, entries)
            q, k, v = (t.clone().requires_grad_() for t in case["qkv"])
            want = _trusted_attention(q, k, v, causal)
            want.backward(case["grad"])
            c = len(chunks[0])
            block = 2 * batch * heads * c * length * d * 8  # keys and values, float64
            q_bytes = block // 2
            for rank, (_, got) in enumerate(entries):
                for phase in ("forward without grad", "forward", "backward"):
                    summary = got[{"forward without grad": "plain", "forward": "fwd",
                                   "backward": "bwd"}[phase]]
                    _check_ring_messages(where, rank, n, summary, phase, block)
                mine = chunks[rank]
                check_tensor(got["out"], _rows_of(want.detach(), mine, length), where, rank,
                             "the output", "attention on one process gives")
                for name, g, w in zip(("q", "k", "v"), got["grads"], (q, k, v), strict=True):
                    if g is None:
                        raise AssertionError(f"{where}: rank {rank}'s {name} got no gradient")
                    check_tensor(g, _rows_of(w.grad, mine, length), where, rank,
                                 f"{name}'s gradient", "attention on one process gives")
                scores = batch * heads * length * length * 8 * c * c  # every pair's
                m_and_l = 2 * batch * heads * c * length * 8
                # two blocks, the state (acc: a q's size; m and l), the scores, a little more
                budget = 2 * block + q_bytes + m_and_l + 2 * scores + block // 4
                if n > 2 and got["held"] > budget:
                    raise AssertionError(f"{where}: rank {rank} held {got['held']} B besides "
                                         f"its inputs during a forward without gradients, "
                                         f"{got['held'] / block:.1f} key/value blocks of "
                                         f"{block} B: a rank holds the block it works on and "
                                         "the one arriving, no more")
                pairs = sum(1 for a in mine for b in range(n * c) if not (causal and b > a))
                flops = got["fwd"]["flops"] + got["bwd"]["flops"]
                need = pairs * _pair_flops(batch, heads, length, d)
                if flops > FLOP_SLACK * need:
                    raise AssertionError(f"{where}: rank {rank} did {flops} matmul FLOPs, "
                                         f"{flops / need:.2f}x what its {pairs} pairs of "
                                         "(query chunk, key chunk) that the mask lets through "
                                         "cost: a pair whose scores are all masked is not "
                                         "computed")


# ---------------------------------------------------------------- zig-zag


@exercise
def zigzag_chunks(fn, rng):
    for n in range(1, 13):
        where = f"zigzag_chunks(rank, {n})"
        got = []
        for rank in range(n):
            try:
                pair = [int(c) for c in fn(rank, n)]
            except (TypeError, ValueError):
                raise AssertionError(f"{where}: rank {rank}'s answer {fn(rank, n)!r} is not a "
                                     "list of chunk ids") from None
            if len(pair) != 2:
                raise AssertionError(f"{where}: rank {rank} holds {len(pair)} chunk(s), "
                                     "expected 2")
            got.append(pair)
        if sorted(c for pair in got for c in pair) != list(range(2 * n)):
            raise AssertionError(f"{where}: the ranks hold chunks {got}; each of the {2 * n} "
                                 "chunks must be on exactly one rank")
        work = [sum(a + 1 for a in pair) for pair in got]  # causal pairs of each rank's chunks
        if len(set(work)) > 1:
            raise AssertionError(f"{where}: chunks {got} give the ranks {work} pairs of chunks "
                                 "to compute under a causal mask; every rank should get the "
                                 "same")


# ---------------------------------------------------------------- Ulysses


def _ulysses_harness(rank, world_size, fn, cases):
    def one_case(case):
        length = case["length"]
        q, k, v = (t[..., rank * length:(rank + 1) * length, :].clone()
                   .requires_grad_() for t in case["qkv"])
        with recording(saved=False) as fwd:
            out = fn(q, k, v, case["causal"])
        with recording(saved=False) as bwd:
            out.backward(case["grad"][..., rank * length:(rank + 1) * length, :])
        grads = [None if t.grad is None else t.grad.clone() for t in (q, k, v)]
        return {"out": out.detach().clone(), "grads": grads,
                "fwd": fwd.summary(), "bwd": bwd.summary()}

    return run_cases(rank, world_size, cases, one_case)


@exercise
def ulysses_attention(fn, rng):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from distlab import require_filled

    require_filled(fn)
    fn = with_trusted(fn, attention=_trusted_attention)
    for n in (1, 2, 4):
        cases = []
        for causal in (False, True):
            batch, heads = int(rng.integers(1, 3)), n * int(rng.integers(1, 3))
            length, d = int(rng.integers(1, 4)), int(rng.integers(2, 6))
            qkv = [torch.from_numpy(rng.standard_normal((batch, heads, n * length, d)))
                   for _ in range(3)]
            grad = torch.from_numpy(rng.standard_normal((batch, heads, n * length, d)))
            cases.append({"qkv": qkv, "grad": grad, "causal": causal, "length": length,
                          "dims": (batch, heads, length, d)})
        for case, entries in each_case(_ulysses_harness, fn, n, cases):
            batch, heads, length, d = case["dims"]
            where = (f"world_size={n}, causal={case['causal']}, batch {batch}, {heads} heads "
                     f"of {d}, {length} position(s) per rank")
            first_rank_failure(where, entries)
            q, k, v = (t.clone().requires_grad_() for t in case["qkv"])
            counter = FlopCounterMode(display=False)
            with counter:
                want = _trusted_attention(q, k, v, case["causal"])
                want.backward(case["grad"])
            whole = int(counter.get_total_flops())
            local = batch * heads * length * d * 8
            for rank, (_, got) in enumerate(entries):
                part = slice(rank * length, (rank + 1) * length)
                calls = got["fwd"]["calls"]
                kinds = [c["kind"] for c in calls]
                if any(kind != "all_to_all" for kind in kinds) or len(kinds) != 4:
                    others = sorted({kind for kind in kinds if kind != "all_to_all"})
                    raise AssertionError(
                        f"{where}: rank {rank}'s forward made {kinds.count('all_to_all')} "
                        f"all-to-all(s){' and ' + ', '.join(others) if others else ''}: one "
                        "all-to-all each for q, k and v before attention and one for the "
                        "output after it, nothing else; a rank never gathers every head of "
                        "the whole sequence")
                if any(c["bytes"] != local for c in calls_of(got["fwd"], "all_to_all")):
                    raise AssertionError(f"{where}: rank {rank}'s all-to-alls were given "
                                         f"{[c['bytes'] for c in calls]} B; each swaps one "
                                         f"local tensor of {local} B")
                check_tensor(got["out"], want.detach()[..., part, :], where, rank, "the output",
                             "attention on one process gives")
                for name, g, w in zip(("q", "k", "v"), got["grads"], (q, k, v), strict=True):
                    if g is None:
                        raise AssertionError(f"{where}: rank {rank}'s {name} got no gradient")
                    check_tensor(g, w.grad[..., part, :], where, rank, f"{name}'s gradient",
                                 "attention on one process gives")
                flops = got["fwd"]["flops"] + got["bwd"]["flops"]
                if n > 1 and flops > FLOP_SLACK * whole / n:
                    raise AssertionError(f"{where}: rank {rank} did {flops} matmul FLOPs, "
                                         f"{flops / (whole / n):.2f}x its 1/{n} share: a rank "
                                         "runs attention for its own heads only")


# ---------------------------------------------------------------- bytes


@exercise
def predicted_bytes(fn, rng):
    for _ in range(20):
        n = int(rng.integers(1, 9))
        batch, heads = int(rng.integers(1, 4)), n * int(rng.integers(1, 4))
        seq, d = n * int(rng.integers(1, 64)), int(rng.integers(1, 129))
        itemsize = int(rng.choice([2, 4, 8]))
        local = batch * heads * (seq // n) * d * itemsize
        # forward and backward: the ring's n - 1 blocks out and n - 1 block gradients back;
        # Ulysses' four all-to-alls each way, each keeping the rank's own piece
        want = {"ring": 4 * (n - 1) * local, "ulysses": 8 * local * (n - 1) / n}
        where = (f"predicted_bytes(batch={batch}, heads={heads}, seq={seq}, head_dim={d}, "
                 f"n={n}, itemsize={itemsize})")
        got = fn(batch, heads, seq, d, n, itemsize)
        if not isinstance(got, dict) or set(got) != {"ring", "ulysses"}:
            raise AssertionError(f"{where} returned {got!r}: expected {{'ring': bytes, "
                                 "'ulysses': bytes}")
        for kind, what in (("ring", "ring attention's point-to-point sends, forward and "
                                    "backward,"),
                           ("ulysses", "Ulysses' all-to-alls, forward and backward,")):
            try:
                value = float(got[kind])
            except (TypeError, ValueError):
                raise AssertionError(f"{where}: {kind} is {got[kind]!r}, not a number") from None
            if abs(value - want[kind]) > 1e-6 * max(1.0, want[kind]):
                raise AssertionError(f"{where}: {kind} is {value:g} B; {what} send "
                                     f"{want[kind]:g} B from each rank to the others")
