"""Hidden tests of notebook 01 (collectives): one per learner function, oracles from numpy
and torch (sum, mean, array_split, concatenation, transpose), compared here, never on the
ranks, where under the judge the learner's code runs too.

The simulated ring is checked step by step (its trace), not only at the end. The real-rank
tests run a harness of this module on the ranks (under the judge it travels by value, as the
learner's function does: checks.on_ranks). The harness makes its own process group with a
short timeout, so a collective that hangs fails one case in seconds and says which. Each rank
gets only its own input, and around the learner's code the shared recorder
(checks.recording) sees every collective and point-to-point call however it is reached: a
collective that hands its work to the library's fails, and so does one whose messages are not
the algorithm's (to whom, from whom, how many, how large, every send waited for), or that
writes to the process group's store (the one channel the ranks share besides their messages).
The tree's shape and depth are measured from who sent to whom. Around hello_allreduce the
harness counts barriers. A function built on the learner's exchange is tested with a correct
one in its place.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import struct

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import case as _case
from autograder.exercises.checks import (
    check_rows,
    check_tensor,
    each_case,
    first_rank_failure,
    fmt,
    ints,
    on_ranks,
    recording,
    rendezvous_file,
    run_cases,
    with_trusted,
)


def _oracle_bounds(length: int, n: int) -> list[tuple[int, int]]:
    """numpy.array_split's cut, by arithmetic (a length may be far too large to materialize)."""
    base, extra = divmod(length, n)
    ends = np.cumsum([0] + [base + (j < extra) for j in range(n)])
    return [(int(ends[j]), int(ends[j + 1])) for j in range(n)]


# ---------------------------------------------------------------- simulated collectives


RING_EXAMPLE = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]


def ring_picture(gpu_grads: list = RING_EXAMPLE) -> list[dict]:
    """The 2(N-1) + 1 states of the ring AllReduce (sum) of `gpu_grads` that notebook 01 draws
    (distlab.collectives reads them from ring_example.json, written by write_ring_example: the
    learner's package holds the picture, never the rules it asks for): each step's sends
    (src, dst, chunk), what every GPU holds per chunk and how many GPUs' contributions each
    copy counts. It follows the data: a GPU first sends its own-numbered chunk (then the one it
    has finished), afterwards whatever it has just received."""
    n = len(gpu_grads)
    values = [[list(map(float, p)) for p in np.array_split(np.asarray(g, float), n)]
              for g in gpu_grads]
    counts = np.ones((n, n), dtype=int)
    states = [{"step": 0, "phase": "start", "values": values, "counts": counts.tolist(),
               "sends": []}]
    for phase in ("phase 1", "phase 2"):
        outgoing = ({i: i for i in range(n)} if phase == "phase 1"
                    else {i: int(np.argmax(counts[i])) for i in range(n)})
        for _ in range(n - 1):
            values = [[list(chunk) for chunk in row] for row in values]
            counts = counts.copy()
            sends = [(i, (i + 1) % n, outgoing[i]) for i in range(n)]
            for src, dst, j in sends:
                if phase == "phase 1":
                    values[dst][j] = [a + b for a, b in zip(values[dst][j], values[src][j],
                                                            strict=True)]
                    counts[dst, j] += counts[src, j]
                else:
                    values[dst][j] = list(values[src][j])
                    counts[dst, j] = counts[src, j]
            outgoing = {dst: j for _, dst, j in sends}
            states.append({"step": len(states), "phase": phase, "values": values,
                           "counts": counts.tolist(), "sends": sends})
    return json.loads(json.dumps(states))  # tuples as lists, as the file holds them


def _ring_states(grads: list) -> list:
    """What every GPU holds after each step of the ring, as the picture draws it: states[s][i][j]
    is GPU i's chunk j after step s + 1, a float array (the trace ring_allreduce is held to)."""
    return [[[np.asarray(chunk, float) for chunk in gpu] for gpu in state["values"]]
            for state in ring_picture(grads)[1:]]


def write_ring_example() -> None:
    """Write distlab's ring_example.json from ring_picture() (a test fails when it is stale)."""
    from distlab import collectives

    collectives.EXAMPLE.write_text(json.dumps(ring_picture()) + "\n")


def _check_ring_steps(fn, rng) -> None:
    """The ring's state after every step, not only its end (the picture's: ring_picture): a sum
    computed in one go (from the input every GPU can see here) reaches the right end without a
    single ring step."""
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
        expected = _ring_states(grads)
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
    cases.append((10**15 + 3, 7))  # a model's worth of elements: the cut is arithmetic
    for length, n in cases:
        try:
            out = fn(length, n)
        except MemoryError:
            raise AssertionError(f"chunk_bounds({length}, {n}) ran out of memory: the bounds of "
                                 "a gradient of 10**15 elements are a few integers; compute "
                                 "them instead of cutting the elements") from None
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




# What c10d's FileStore writes of its own: every dist.FileStore object on the file adds 1 to
# "refcount/" when it is made, and 1 to "cleanup/" and -1 to "refcount/" when it is freed (35 B
# for a rank leaving the group). No call of the store's API writes these keys: the FileStore puts
# "/" before every key it is given ("-/" before one it deletes), under any PrefixStore's prefix.
_STORE_OWN_KEYS = (b"refcount/", b"cleanup/")


def _store_size() -> int:
    """The size of the harness group's FileStore: a log that every write to the store appends
    to (set, add, append, compare_set, multi_set, delete_key: a record each)."""
    return os.path.getsize(rendezvous_file("check"))


def _store_written(since: int) -> int:
    """Bytes appended to the harness group's FileStore after offset `since` (_store_size) that
    are not the store's own bookkeeping (_STORE_OWN_KEYS): what a rank handed to another through
    the store. Each record is a key and a value, each a 4-byte length and its bytes. A record
    not yet whole is not counted: the case's writes were whole before its closing barrier, so
    one still being appended began after it."""
    with open(rendezvous_file("check"), "rb") as file:
        file.seek(since)
        log = file.read()
    written = at = 0
    while at + 4 <= len(log):
        (key_len,) = struct.unpack_from("=I", log, at)
        value_at = at + 4 + key_len + 4
        if value_at > len(log):
            break
        (value_len,) = struct.unpack_from("=I", log, value_at - 4)
        end = value_at + value_len
        if end > len(log):
            break
        if log[at + 4:value_at - 4] not in _STORE_OWN_KEYS:
            written += end - at
        at = end
    return written


def _recorded(call) -> dict:
    """What call() did on this rank: its output (tensors detached and copied), every
    collective and point-to-point call however reached (kind, bytes, peer), the sends it
    started and never waited for (finished here, so the next case starts clean) and what was
    written to the group's store while every rank was in the case (_store_written: a barrier
    before and after it, for a rank still joining the group and for the case before; a third
    after the measure, for a rank leaving the group, whose FileStore writes as it goes; and the
    store's own records are not counted however they come)."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    before = _store_size()
    with _watching_isends() as requests, recording(flops=False, saved=False) as rec:
        out = call()
    unwaited = [r for r in requests if not r.waited]
    for request in unwaited:
        request.wait()
    dist.barrier()  # every rank is done with the case before the store is measured again
    written = _store_written(before)
    dist.barrier()  # and no rank leaves the group (a write of its store) before all have
    if isinstance(out, torch.Tensor):
        out = out.detach().clone()
    elif isinstance(out, list | tuple):
        out = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in out]
    return {"out": out, "calls": rec.summary()["calls"], "unwaited": len(unwaited),
            "store": written}


def _each_case(rank: int, world_size: int, mine: list, call) -> list:
    """call(*inputs) for each of this rank's cases, recorded (_recorded), through the case loop
    (checks.run_cases)."""
    return run_cases(rank, world_size, mine, lambda inputs: _recorded(lambda: call(*inputs)))


def _trusted_exchange(send, dst, recv, src):
    """A correct exchange, for the exercises built on the learner's (a mistake there must not
    cost points here)."""
    import torch.distributed as dist

    request = dist.isend(send, dst=dst)
    dist.recv(recv, src=src)
    request.wait()


def _ring_allgather_with(exchange, rank: int, n: int, pieces: list) -> list:
    """The notebook's ring_allgather, on a given exchange."""
    send_index = rank
    for _ in range(n - 1):
        recv_index = (send_index - 1) % n
        exchange(pieces[send_index], (rank + 1) % n, pieces[recv_index], (rank - 1) % n)
        send_index = recv_index
    return pieces


def _alltoall_with(exchange, rank: int, n: int, blocks: list, recv_sizes: list) -> list:
    """A correct all-to-all (round k: k places right, from k places left) on a given exchange."""
    import torch

    received = [torch.empty(size, dtype=blocks[rank].dtype) for size in recv_sizes]
    received[rank].copy_(blocks[rank])
    for k in range(1, n):
        exchange(blocks[(rank + k) % n], (rank + k) % n, received[(rank - k) % n], (rank - k) % n)
    return received


def _exchange_harness(rank, world_size, fn, cases):
    """Each case, a trusted ring all-gather ("ring": this rank's piece and every piece's size)
    or all-to-all ("pairs": this rank's blocks and the sizes coming to it) whose every step is
    a call of the learner's exchange. Each rank gets only its own data."""
    import torch

    mine = [(kind, data[rank]) for kind, data in cases]
    cases.clear()  # the other ranks' inputs, gone from every frame

    def call(kind, data):
        if kind == "ring":
            own, sizes = data
            pieces = list(torch.zeros(sum(sizes), dtype=own.dtype).split(sizes))
            pieces[rank].copy_(own)
            return torch.cat(_ring_allgather_with(fn, rank, world_size, pieces))
        blocks, recv_sizes = data
        return _alltoall_with(fn, rank, world_size, blocks, recv_sizes)

    return _each_case(rank, world_size, [(kind, data) for kind, data in mine], call)


def _rs_harness(rank, world_size, fn, cases):
    """Each case, the learner's ring_reduce_scatter on this rank's own tensor (cut by
    tensor_split), exchange replaced by a correct one."""
    mine = [(tensors[rank], op) for tensors, op in cases]
    cases.clear()

    def call(tensor, op):
        return fn(rank, world_size, list(tensor.clone().tensor_split(world_size)), op=op)

    return _each_case(rank, world_size, mine, call)


def _tree_harness(rank, world_size, fn, cases):
    """Each case, the learner's tree_broadcast: rank 0 holds the data, the others zeros. The
    picture's helpers (distlab.collectives.tree_edges, tree_levels) draw the tree the learner
    is asked for: on the ranks they refuse, so they cannot stand in for the children."""
    import torch

    from distlab import collectives  # cheap: it imports matplotlib only to draw

    def refuse(*_args, **_kwargs):
        raise RuntimeError("the tree's shape is the exercise: work out a rank's children from "
                           "its number, without distlab's picture helpers")

    collectives.tree_edges = collectives.tree_levels = refuse
    mine = [(data.clone() if rank == 0 else torch.zeros_like(data),) for data in cases]
    cases.clear()
    return _each_case(rank, world_size, mine, lambda tensor: fn(rank, world_size, tensor))


def _alltoall_harness(rank, world_size, fn, cases):
    """Each case, the learner's alltoall on this rank's blocks, exchange replaced by a correct
    one."""
    mine = [(blocks[rank], sizes[rank]) for blocks, sizes in cases]
    cases.clear()
    return _each_case(rank, world_size, mine,
                      lambda blocks, sizes: fn(rank, world_size, blocks, sizes))


def _first_failure(case: str, entries: list) -> None:
    """first_rank_failure, with a stuck rank explained: with every rank in the same call, one
    waited for a message that no rank sent (a deadlock, or a peer that is not the sender)."""
    for rank, entry in enumerate(entries):
        if entry[0] == "raised":
            raise AssertionError(f"{case}: rank {rank}: {entry[1]}")
    for rank, entry in enumerate(entries):
        if entry[0] == "stuck":
            raise AssertionError(
                f"{case}: rank {rank} {entry[1]}. With every rank in the same call at once, "
                "each waited on another: a rank that blocks until its message is received, "
                "before it posts its own receive, waits for a rank that does the same; or it "
                "waited for a rank that was not sending to it")
    first_rank_failure(case, entries)


def _check_messages(case: str, entries: list, sends_to, recvs_from, message_bytes,
                    total=None) -> None:
    """The budget of a point-to-point collective, from each rank's recorded calls: no library
    collective, the store untouched, the sends of sends_to(rank) (a list of peers, one message
    each, in any order) and the receives of recvs_from(rank) (None: from any rank), no message
    larger than message_bytes, every started send waited for, and `total` bytes sent by all."""
    sent = 0
    for rank, (_, got) in enumerate(entries):
        calls = got["calls"]
        if other := [c["kind"] for c in calls if c["kind"] not in ("send", "recv")]:
            raise AssertionError(f"{case}: rank {rank} called a collective ({other[0]}): build "
                                 "it from sends and receives; the library collective is what it "
                                 "replaces")
        if got["store"]:
            raise AssertionError(f"{case}: rank {rank} wrote {got['store']} B into the process "
                                 "group's store: the data must travel in the ranks' messages, "
                                 "not through the store")
        sends = sorted(c["peer"] for c in calls if c["kind"] == "send")
        recvs = [c["peer"] for c in calls if c["kind"] == "recv"]
        want_sends, want_recvs = sorted(sends_to(rank)), recvs_from(rank)
        if sends != want_sends:
            raise AssertionError(f"{case}: rank {rank} sent to ranks {sends}; the algorithm has "
                                 f"it send {len(want_sends)} message(s), to ranks {want_sends}")
        if len(recvs) != len(want_recvs) or any(p is not None and p not in want_recvs
                                                for p in recvs):
            raise AssertionError(f"{case}: rank {rank} received {len(recvs)} message(s) (from "
                                 f"{recvs}); the algorithm has it receive {len(want_recvs)}")
        if any(c["bytes"] > message_bytes for c in calls):
            raise AssertionError(f"{case}: rank {rank} moved a message larger than "
                                 f"{message_bytes} B, the most one step may carry")
        if got["unwaited"]:
            raise AssertionError(f"{case}: rank {rank} started {got['unwaited']} send(s) and "
                                 "returned without waiting for them: the tensor may still "
                                 "change before it has left")
        sent += sum(c["bytes"] for c in calls if c["kind"] == "send")
    if total is not None and sent != total:
        raise AssertionError(f"{case}: the ranks sent {sent} B together; the ring moves "
                             f"{total} B")


def _others(n: int):
    """Every rank but r: an all-to-all's peers."""
    return lambda r: [q for q in range(n) if q != r]


def _ring_peers(n: int):
    return (lambda r: [(r + 1) % n] * (n - 1)), (lambda r: [(r - 1) % n] * (n - 1))


def _pieces(rng, n: int, dtype) -> list:
    import torch

    sizes = [int(x) for x in rng.integers(0, 4, size=n)]
    return [torch.from_numpy(rng.standard_normal(size)).to(dtype) for size in sizes]


def _blocks(rng, n: int, dtype) -> tuple[list, list]:
    """blocks[r][c] (rank r's block for rank c, random sizes 0-3) and sizes[c][r] = its size."""
    import torch

    blocks = [[torch.from_numpy(rng.standard_normal(int(rng.integers(0, 4)))).to(dtype)
               for _ in range(n)] for _ in range(n)]
    sizes = [[blocks[r][c].numel() for r in range(n)] for c in range(n)]
    return blocks, sizes


@exercise
def exchange(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for n in (2, 3, 4):
        pieces = _pieces(rng, n, torch.float32)
        sizes = [p.numel() for p in pieces]
        blocks, recv_sizes = _blocks(rng, n, torch.float64)
        cases = [("ring", [(p, sizes) for p in pieces]),
                 ("pairs", [(blocks[r], recv_sizes[r]) for r in range(n)])]
        (_, ring), (_, pairs) = each_case(_exchange_harness, fn, n, cases)
        ring_case = f"world_size={n}, a ring all-gather of pieces of {sizes} elements"
        pairs_case = f"world_size={n}, an all-to-all (in round k, rank r sends to rank r + k)"
        entries = ring
        _first_failure(ring_case, entries)
        to_right, from_left = _ring_peers(n)
        _check_messages(ring_case, entries, to_right, from_left, 4 * max(sizes))
        whole = torch.cat(pieces)
        for rank, (_, got) in enumerate(entries):
            check_tensor(got["out"], whole, ring_case, rank, expected_is="every piece is")
        entries = pairs
        _first_failure(pairs_case, entries)
        _check_messages(pairs_case, entries, _others(n), _others(n), 8 * 3)
        for c, (_, got) in enumerate(entries):
            for r in range(n):
                check_tensor(got["out"][r], blocks[r][c], pairs_case, c,
                             what=f"the block from rank {r}")


@exercise
def ring_reduce_scatter(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    fn = with_trusted(fn, exchange=_trusted_exchange)
    for n in (1, 2, 3, 5):
        specs = [(int(rng.integers(0, n)) if n > 1 else 0, "sum", torch.float64),
                 (int(rng.integers(n, 3 * n + 1)), "mean", torch.float32),
                 (int(rng.integers(3 * n, 60)), "sum", torch.float32)]
        cases = [([torch.from_numpy(rng.standard_normal(length)).to(dtype) for _ in range(n)],
                  op) for length, op, dtype in specs]
        for (length, op, dtype), (inputs, entries) in zip(
                specs, each_case(_rs_harness, fn, n, cases), strict=True):
            short = " (shorter than world_size)" if length < n else ""
            case = (f"world_size={n}, length={length}{short}, op={op!r}, "
                    f"dtype={str(dtype).replace('torch.', '')}")
            _first_failure(case, entries)
            itemsize = inputs[0][0].element_size()
            to_right, from_left = _ring_peers(n)
            _check_messages(case, entries, to_right, from_left, -(-length // n) * itemsize,
                            total=(n - 1) * length * itemsize)
            expected = _exact_all_reduce(*inputs).tensor_split(n)
            for rank, (_, got) in enumerate(entries):
                check_tensor(got["out"], expected[rank], case, rank,
                             expected_is=f"chunk {rank} of the reduced tensor is")


def _tree_children(rank: int, n: int) -> list[int]:
    """The drawn tree (distlab.collectives.tree_edges), by the oracle's own formula."""
    return [c for c in (2 * rank + 1, 2 * rank + 2) if c < n]


@exercise
def tree_broadcast(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for n in (1, 2, 3, 5, 8):
        cases = [torch.from_numpy(rng.standard_normal(int(rng.integers(1, 5))))
                 for _ in range(2)]
        for data, entries in each_case(_tree_harness, fn, n, cases):
            case = f"world_size={n}, {data.numel()} elements"
            _first_failure(case, entries)
            _check_messages(case, entries, functools.partial(_tree_children, n=n),
                            lambda r: [] if r == 0 else [None], data.numel() * 8)
            depth = {0: 0}
            for rank in range(n):  # the step each rank receives in, from who sent to it
                for child in _tree_children(rank, n):
                    depth[child] = depth[rank] + 1
            if max(depth.values()) != n.bit_length() - 1:  # pragma: no cover - the oracle
                raise AssertionError(f"{case}: the tree is {max(depth.values())} steps deep")
            for rank, (_, got) in enumerate(entries):
                check_tensor(got["out"], data, case, rank, expected_is="rank 0's data is")


@exercise
def alltoall(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    fn = with_trusted(fn, exchange=_trusted_exchange)
    for n in (1, 2, 3, 5):
        cases = [_blocks(rng, n, dtype) for dtype in (torch.float32, torch.float64)]
        for (blocks, _), entries in each_case(_alltoall_harness, fn, n, cases):
            case = f"world_size={n}, {blocks[0][0].dtype}".replace("torch.", "")
            _first_failure(case, entries)
            _check_messages(case, entries, _others(n), _others(n), 8 * 3)
            for c, (_, got) in enumerate(entries):
                if not isinstance(got["out"], list) or len(got["out"]) != n:
                    raise AssertionError(f"{case}: rank {c} returned {got['out']!r}, expected "
                                         f"one block per rank ({n})")
                for r in range(n):
                    check_tensor(got["out"][r], blocks[r][c], case, c,
                                 what=f"the block from rank {r}")


def _exact_all_reduce(tensors: list, op: str):
    """The oracle: the sum (or mean) of every rank's tensor, accumulated in float64."""
    import torch

    total = torch.stack([t.double() for t in tensors]).sum(dim=0)
    return (total / len(tensors) if op == "mean" else total).to(tensors[0].dtype)
