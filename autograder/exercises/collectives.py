"""Hidden tests of notebook 01 (collectives): one per learner function, oracles from numpy
(sum, mean, array_split, transpose), also for the real-rank exercises: their results are
compared here, never on the ranks, where under the judge the learner's code runs too.

The real-rank tests run a harness of this module on the ranks (under the judge it travels by
value, as the learner's function does: checks.on_ranks). The harness makes its own process group
with a short timeout, so a ring that hangs fails one case in seconds and says which, instead of
stalling the whole grade. Around the learner's ring the shared recorder
(checks.recording) sees every collective and point-to-point call however it is reached: a ring
that hands its work to a library collective fails, and so does one whose messages are not a
ring's (2(N-1) chunks each way per rank, every send waited for); each rank gets only its own
tensor. The simulated ring is checked step by step (its trace), not only at the end. Around
hello_allreduce the harness counts barriers.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import case as _case
from autograder.exercises.checks import (
    check_rows,
    check_tensor,
    describe,
    first_rank_failure,
    fmt,
    ints,
    on_ranks,
    rank_failure,
    recording,
    short_group,
    with_trusted,
)


def _oracle_bounds(length: int, n: int) -> list[tuple[int, int]]:
    sizes = [len(part) for part in np.array_split(np.arange(length), n)]
    ends = np.cumsum([0] + sizes)
    return [(int(ends[j]), int(ends[j + 1])) for j in range(n)]


# ---------------------------------------------------------------- simulated collectives


def _ring_states(grads: list, n: int) -> list:
    """What every GPU holds after each step of the ring (the notebook's schedule: GPU i sends
    chunk i - step in the scatter-reduce, i - step + 1 in the all-gather, to GPU i + 1), as
    states[s][i][j]: GPU i's chunk j, a float array."""
    size = len(grads[0]) // n
    chunks = [[np.asarray(g[j * size:(j + 1) * size], float) for j in range(n)] for g in grads]
    states = []
    for phase, shift in (("reduce", 0), ("gather", 1)):
        for step in range(n - 1):
            sends = [(i, (i - step + shift) % n, chunks[i][(i - step + shift) % n].copy())
                     for i in range(n)]
            for i, j, chunk in sends:
                dst = (i + 1) % n
                chunks[dst][j] = chunks[dst][j] + chunk if phase == "reduce" else chunk
            states.append([[c.copy() for c in gpu] for gpu in chunks])
    return states


def _check_ring_steps(fn, rng) -> None:
    """The ring's state after every step, not only its end: a sum computed in one go (from the
    input every GPU can see here) reaches the right end without a single ring step."""
    for n in (2, 3, 4, 5):
        size = int(rng.integers(1, 3))
        grads = ints(rng, (n, n * size))
        case = _case(n, "sum", grads=grads if n * size <= 8 else f"<{n}x{n * size} random>")
        out = fn(copy.deepcopy(grads), op="sum", trace=True)
        try:
            _, states = out
            states = [[[np.asarray(c, float) for c in gpu] for gpu in state] for state in states]
        except (TypeError, ValueError):
            raise AssertionError(f"{case}: with trace=True expected (result, states), got "
                                 f"{out!r}") from None
        expected = _ring_states(grads, n)
        if len(states) != len(expected):
            raise AssertionError(f"{case}: the trace has {len(states)} steps, a ring of {n} "
                                 f"GPUs takes 2(N-1) = {len(expected)}")
        for s, (got, want) in enumerate(zip(states, expected, strict=True)):
            phase = (f"scatter-reduce step {s}" if s < n - 1
                     else f"all-gather step {s - (n - 1)}")
            for i in range(n):
                for j in range(n):
                    if got[i][j].shape != want[i][j].shape or not np.allclose(got[i][j],
                                                                            want[i][j]):
                        raise AssertionError(
                            f"{case}: after {phase}, GPU {i}'s chunk {j} holds "
                            f"{fmt(got[i][j])}, but one ring step at a time gives "
                            f"{fmt(want[i][j])}: each step, each GPU adds (or copies) only the "
                            "one chunk its left neighbour sent")


@exercise
def ring_allreduce(fn, rng):
    _check_ring_steps(fn, rng)
    for n in range(1, 9):
        for op in ("sum", "mean"):
            length = n * int(rng.integers(0 if n > 1 else 1, 4))
            grads = ints(rng, (n, length))
            case = _case(n, op, grads=grads if length <= 8 else f"<{n}x{length} random>")
            out = fn(copy.deepcopy(grads), op=op)
            expected = np.sum(grads, axis=0) if op == "sum" else np.mean(grads, axis=0)
            check_rows(out, np.tile(expected, (n, 1)).reshape(n, length), "gradient", case)
    # a length that is not a multiple of N: refuse (ValueError) or be right, never drop data
    for n in (2, 3, 5, 8):
        length = n * int(rng.integers(1, 3)) + int(rng.integers(1, n))
        grads = ints(rng, (n, length))
        case = _case(n, "sum", length=f"{length} (not a multiple of {n})")
        try:
            out = fn(copy.deepcopy(grads), op="sum")
        except ValueError:
            continue
        expected = np.tile(np.sum(grads, axis=0), (n, 1))
        try:
            check_rows(out, expected, "gradient", case)
        except AssertionError as err:
            raise AssertionError(f"{err} (raise ValueError rather than drop elements)") from None


@exercise
def chunk_bounds(fn, rng):
    cases = [(10, 4), (2, 4), (0, 3), (7, 1)]
    cases += [(int(rng.integers(0, 61)), int(rng.integers(1, 10))) for _ in range(30)]
    for length, n in cases:
        out = fn(length, n)
        expected = _oracle_bounds(length, n)
        try:
            got = [tuple(int(x) for x in pair) for pair in out]
        except (TypeError, ValueError):
            raise AssertionError(f"chunk_bounds({length}, {n}) returned {out!r}: expected a list "
                                 "of (start, end) pairs") from None
        if got != expected:
            raise AssertionError(f"chunk_bounds({length}, {n}) returned {got}, but the chunks "
                                 "must cover 0..length in order, with sizes that differ by at "
                                 "most one and the larger chunks first")


def _lengths(rng, n: int) -> list[int]:
    """Lengths 0..3N for world size n: one shorter than n (if n > 1) and two random."""
    picks = [int(rng.integers(0, n))] if n > 1 else [0]
    return picks + [int(x) for x in rng.integers(0, 3 * n + 1, size=2)]


def _reduction_cases(rng):
    """(n, length, op, rows, total) for world sizes 1..8, lengths from _lengths and both ops:
    rows[r] is rank r's vector of small ints, total their element-wise sum or mean."""
    for n in range(1, 9):
        for length in _lengths(rng, n):
            for op in ("sum", "mean"):
                rows = ints(rng, (n, length))
                arr = np.asarray(rows, float).reshape(n, length)
                yield n, length, op, rows, arr.sum(axis=0) if op == "sum" else arr.mean(axis=0)


@exercise
def ring_allreduce_uneven(fn, rng):
    fn = with_trusted(fn, chunk_bounds=_oracle_bounds)
    for n, length, op, grads, total in _reduction_cases(rng):
        short = " (shorter than world_size)" if length < n else ""
        case = _case(n, op, length=f"{length}{short}")
        out = fn(copy.deepcopy(grads), op=op)
        check_rows(out, np.tile(total, (n, 1)), "gradient", case)


@exercise
def ring_allgather(fn, rng):
    for n in range(1, 9):
        for _ in range(2):
            shards = [ints(rng, int(rng.integers(0, 4))) for _ in range(n)]
            case = _case(n, shards=shards)
            out = fn(copy.deepcopy(shards))
            full = [v for shard in shards for v in shard]
            if not isinstance(out, list | tuple) or len(out) != n:
                raise AssertionError(f"{case}: expected one list per rank ({n}), got {out!r}")
            for r, got in enumerate(out):
                if list(got) != full:
                    raise AssertionError(f"{case}: rank {r} holds {list(got)}, expected every "
                                         f"shard in rank order: {full}")


@exercise
def ring_reduce_scatter(fn, rng):
    fn = with_trusted(fn, chunk_bounds=_oracle_bounds)
    for n, length, op, vectors, total in _reduction_cases(rng):
        case = _case(n, op, length=length)
        out = fn(copy.deepcopy(vectors), op=op)
        expected = np.array_split(total, n)
        if not isinstance(out, list | tuple) or len(out) != n:
            raise AssertionError(f"{case}: expected one shard per rank ({n}), got {out!r}")
        for r, (got, want) in enumerate(zip(out, expected, strict=True)):
            got = np.asarray(got, dtype=float)
            if got.shape != want.shape or not np.allclose(got, want):
                raise AssertionError(f"{case}: rank {r} holds {fmt(got)}, expected chunk {r} "
                                     f"of the reduced vector, {fmt(want)}")


@exercise
def tree_broadcast(fn, rng):
    sizes = [1, 2, 3, 4, 7, 8, 15, 16] + [int(x) for x in rng.integers(5, 41, size=4)]
    for n in sizes:
        data = ints(rng, int(rng.integers(1, 4)))
        out = fn(list(data), n)
        try:
            received, steps = out
        except (TypeError, ValueError):
            raise AssertionError(f"num_nodes={n}: expected (received, steps), got {out!r}"
                                 ) from None
        if not isinstance(received, list | tuple) or len(received) != n:
            raise AssertionError(f"num_nodes={n}: expected one copy per rank, got {received!r}")
        missing = [i for i, got in enumerate(received) if got is None or list(got) != data]
        if missing:
            raise AssertionError(f"num_nodes={n}, data={data}: ranks {missing} do not hold the "
                                 "data after the broadcast")
        if steps != n.bit_length() - 1:
            raise AssertionError(f"num_nodes={n}: reported {steps} steps, but the tree has "
                                 f"{n.bit_length()} levels (the root's included)")


@exercise
def alltoall(fn, rng):
    for n in range(1, 9):
        blocks = [[ints(rng, int(rng.integers(0, 3))) for _ in range(n)] for _ in range(n)]
        case = _case(n, blocks=blocks if n <= 3 else f"<{n}x{n} random blocks>")
        out = fn(copy.deepcopy(blocks))
        if not isinstance(out, list | tuple) or len(out) != n:
            raise AssertionError(f"{case}: expected one row per rank ({n}), got {out!r}")
        for c in range(n):
            for r in range(n):
                try:
                    got = out[c][r]
                except (IndexError, TypeError):
                    raise AssertionError(f"{case}: rank {c} has no block from rank {r}") from None
                if got is None or list(got) != blocks[r][c]:
                    raise AssertionError(f"{case}: rank {c} filed {got!r} as the block from "
                                         f"rank {r}, which sent it {blocks[r][c]!r}")


# ---------------------------------------------------------------- real ranks


BARRIERS = ("barrier", "monitored_barrier")  # either one makes every rank wait for the others
@contextlib.contextmanager
def _counting(names: tuple[str, ...]):
    """Count calls of torch.distributed's `names` on this rank (as `dist.x` or through
    `distributed_c10d`); the wrapped functions still do their work. Yields the list of the
    names called, in order."""
    from distlab.intercept import intercepting

    calls = []

    def counting(name, real):
        def counted(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)
        return counted

    with intercepting(names, counting, also_c10d=True):
        yield calls


def _hello_harness(rank, world_size, fn):
    """Run the learner's hello_allreduce: what it returned, whether it left its group open, and
    how many times it waited at a barrier (dist.barrier or dist.monitored_barrier)."""
    import torch.distributed as dist

    with _counting(BARRIERS) as waits:
        value = fn(rank, world_size)
    return value, dist.is_initialized(), len(waits)


@exercise
def hello_allreduce(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    for n in (1, 2, 3, 4):
        results = on_ranks(_hello_harness, fn, n)
        expected = n * (n + 1) / 2
        for rank, (value, still_open, waits) in enumerate(results):
            if not isinstance(value, int | float) or value != expected:
                raise AssertionError(f"world_size={n}: rank {rank} returned {value!r}, expected "
                                     f"the sum 1 + ... + {n} = {expected:g}")
            if not waits:
                raise AssertionError(f"world_size={n}: rank {rank} left without waiting for "
                                     "every rank to arrive")
            if still_open:
                raise AssertionError(f"world_size={n}: rank {rank} returned with its process "
                                     "group still open")


class _WatchedRequest:
    """A request of dist.isend that remembers whether anyone waited for it."""

    def __init__(self, request):
        self._request, self.waited = request, False

    def wait(self, *args, **kwargs):
        self.waited = True
        return self._request.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._request, name)


@contextlib.contextmanager
def _watching_isends():
    """dist.isend (as `dist.isend` or through `distributed_c10d`) hands out watched requests.
    Yields the list of them."""
    from distlab.intercept import intercepting

    requests = []

    def watched(_name, real):
        def isend(*args, **kwargs):
            request = _WatchedRequest(real(*args, **kwargs))
            requests.append(request)
            return request
        return isend

    with intercepting(["isend"], watched, also_c10d=True):
        yield requests


def _p2p_harness(rank, world_size, fn, cases):
    """Each case: the learner's ring on this rank's tensor, recorded (every collective or
    point-to-point call, however reached, with its bytes and peer; whether each isend was
    waited for). Returns, per case, ("ok", {"out", "calls", "unwaited"}) or (kind, text) as in
    checks.rank_failure; stops at the first failure. This rank keeps only its own tensors:
    the others' are dropped before the learner's code runs, so a blank cannot sum them from
    a caller's frame. Nothing is judged here: under the judge this runs in the sandbox, next
    to the learner's code."""
    import torch

    mine = [(tensors[rank], op) for tensors, op in cases]
    cases.clear()  # the other ranks' inputs, gone from every frame
    results = []
    with short_group(rank, world_size):
        try:
            for tensor, op in mine:
                try:
                    with _watching_isends() as requests, recording(flops=False, saved=False) \
                            as rec:
                        out = fn(rank, world_size, tensor.clone(), op=op)
                except Exception as err:  # noqa: BLE001 - reported as the case's failure
                    results.append(rank_failure(err, "raised"))
                    break
                unwaited = [r for r in requests if not r.waited]
                for request in unwaited:  # finish them here, so the next case starts clean
                    request.wait()
                if isinstance(out, torch.Tensor):
                    out = out.detach().clone()
                results.append(("ok", {"out": out, "calls": rec.summary()["calls"],
                                       "unwaited": len(unwaited)}))
        except Exception as err:  # noqa: BLE001 - a collective of ours failed: another rank did
            results.append(rank_failure(err, "broken"))
    return results


def _p2p_specs(rng, n: int) -> list[tuple]:
    """(length, op, dtype) cases for world size n: every length with both ops and both dtypes
    (paired differently for alternate lengths)."""
    import torch

    f32, f64 = torch.float32, torch.float64
    specs = []
    lengths = [int(rng.integers(0, n)) if n > 1 else 0, int(rng.integers(0, 3 * n + 1)),
               int(rng.integers(3 * n, 200))]  # shorter than n, around n, long
    for index, length in enumerate(lengths):
        pairs = (("sum", f32), ("mean", f64)) if index % 2 == 0 else (("mean", f32), ("sum", f64))
        specs += [(length, op, dtype) for op, dtype in pairs]
    return specs


@exercise
def ring_allreduce_p2p(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for n in (1, 2, 3, 4, int(rng.integers(5, 8)), 8):
        specs = _p2p_specs(rng, n)
        if n == 8:  # the most ranks (the slowest rings): one case per length, both ops and
            specs = [specs[1], specs[2], specs[4]]  # dtypes among them; below 8, every pairing
        cases = [([torch.from_numpy(rng.standard_normal(length)).to(dtype) for _ in range(n)],
                  op) for length, op, dtype in specs]
        _p2p_verdict(n, specs, cases, on_ranks(_p2p_harness, fn, n, cases))


def _exact_all_reduce(tensors: list, op: str):
    """The oracle: the sum (or mean) of every rank's tensor, accumulated in float64."""
    import torch

    total = torch.stack([t.double() for t in tensors]).sum(dim=0)
    return (total / len(tensors) if op == "mean" else total).to(tensors[0].dtype)


def _check_ring_messages(case: str, n: int, length: int, itemsize: int, entries: list) -> None:
    """The ring's budget, from each rank's recorded calls: point-to-point only, 2(N-1) sends to
    the right and 2(N-1) receives from the left, a chunk (at most ceil(L/N) elements) each,
    2(N-1) L elements sent by all ranks together, and every started send waited for."""
    steps, largest = 2 * (n - 1), -(-length // n) * itemsize
    sent = 0
    for rank, (_, got) in enumerate(entries):
        calls = got["calls"]
        other = [c["kind"] for c in calls if c["kind"] not in ("send", "recv")]
        if other:
            raise AssertionError(f"{case}: rank {rank} called a collective ({other[0]}): build "
                                 "the ring from isend and recv; the library collective is what "
                                 "it replaces")
        sends = [c for c in calls if c["kind"] == "send"]
        recvs = [c for c in calls if c["kind"] == "recv"]
        right, left = (rank + 1) % n, (rank - 1) % n
        if len(sends) != steps or any(c["peer"] not in (None, right) for c in sends):
            raise AssertionError(f"{case}: rank {rank} sent {len(sends)} messages "
                                 f"({describe({'calls': calls})}), but a ring step sends one "
                                 f"chunk to the right neighbour (rank {right}): {steps} in all")
        if len(recvs) != steps or any(c["peer"] not in (None, left) for c in recvs):
            raise AssertionError(f"{case}: rank {rank} received {len(recvs)} messages, but a "
                                 "ring step receives one chunk from the left neighbour (rank "
                                 f"{left}): {steps} in all")
        if any(c["bytes"] > largest for c in sends + recvs):
            raise AssertionError(f"{case}: rank {rank} moved a message larger than a chunk "
                                 f"({largest} B): a ring passes on 1/N of the tensor per step")
        if got["unwaited"]:
            raise AssertionError(f"{case}: rank {rank} started {got['unwaited']} send(s) it never "
                                 "waited for: a step is over only when its send is")
        sent += sum(c["bytes"] for c in sends)
    if sent != steps * length * itemsize:
        raise AssertionError(f"{case}: the ranks sent {sent} B together, but a ring moves each "
                             f"element 2(N-1) times: {steps * length * itemsize} B")


def _p2p_verdict(n: int, specs: list, cases: list, results: list) -> None:
    """Raise on the first case some rank got wrong; within a case, a rank that raised is named
    before ranks that were stuck (waiting on it) and ranks whose group broke."""
    for index, (length, op, dtype) in enumerate(specs):
        short = " (shorter than world_size)" if length < n else ""
        case = (f"world_size={n}, length={length}{short}, op={op!r}, "
                f"dtype={str(dtype).replace('torch.', '')}")
        entries = [r[index] if index < len(r) else ("broken", "stopped early") for r in results]
        first_rank_failure(case, entries)
        _check_ring_messages(case, n, length, cases[index][0][0].element_size(), entries)
        expected = _exact_all_reduce(*cases[index])
        for rank, (_, got) in enumerate(entries):
            check_tensor(got["out"], expected, case, rank, expected_is="the all-reduce is")
