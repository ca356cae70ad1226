"""Hidden tests of notebook 09 (expert parallelism): the router's kept assignments and the
balancing loss against loops written here; dispatch and combine on real ranks against one
process holding every expert, forward and backward; the expert-gradient groups and their
reduction against one process's gradients of the mean loss; the bytes against a loop over
every assignment of raw routings (chosen experts and keep masks, as route_top_k returns them).

The rank exercises run in a harness of this module (by value, as the learner's code:
checks.on_ranks) in a short-timeout gloo group. ep_moe gets a trusted router, row exchange and
expert (with_trusted), so a mistake in route_top_k costs its own points only. Beside the
values, every rank's communication is recorded from below (recorder.py) and each
all_to_all_single's rows per destination rank (distlab's counter): the weights never move (no
collective but all-to-alls, each of counts or of token rows, one small exchange of the
per-expert counts before any row moves), the dispatch gives each rank
exactly the kept rows for its experts, and the combine sends back exactly the rows received.
"""

from __future__ import annotations

import collections
import functools

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import (
    check_tensor,
    each_case,
    first_rank_failure,
    rank_values,
    recording,
    run_cases,
    with_trusted,
)

FLOP_SLACK = 1.5

# ---------------------------------------------------------------- oracles (plain loops)


def _oracle_route(logits, k, cap):
    """(experts (T, k), gates (T, k), keep (T, k) as lists): every first choice before any
    second, first come first served, in token order."""
    import torch

    probs = logits.softmax(-1)
    T, E = logits.shape
    order = torch.argsort(probs, dim=-1, descending=True)[:, :k]
    taken = [0] * E
    keep = [[False] * k for _ in range(T)]
    for s in range(k):
        for t in range(T):
            e = int(order[t, s])
            if taken[e] < cap:
                keep[t][s] = True
                taken[e] += 1
    gates = torch.gather(probs, 1, order)
    return order, gates, keep


def _oracle_token_order_keep(logits, k, cap):
    """keep when each token's choices come before the next token's (the wrong order)."""
    import torch

    T, E = logits.shape
    order = torch.argsort(logits.softmax(-1), dim=-1, descending=True)[:, :k]
    taken = [0] * E
    keep = [[False] * k for _ in range(T)]
    for t in range(T):
        for s in range(k):
            e = int(order[t, s])
            if taken[e] < cap:
                keep[t][s] = True
                taken[e] += 1
    return keep


def _logits(rng, T, E):
    import torch

    return torch.from_numpy(rng.standard_normal((T, E)) * 2)


@exercise
def route_top_k(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    cases = [(5, 3, 2, 2), (6, 2, 1, 2), (8, 4, 2, 3), (1, 1, 1, 1), (7, 3, 2, 0)]
    for _ in range(12):
        E = int(rng.integers(1, 6))
        k = int(rng.integers(1, min(2, E) + 1))
        T = int(rng.integers(1, 13))
        cases.append((T, E, k, int(rng.integers(0, max(1, T * k // E) + 2))))
    for T, E, k, cap in cases:
        logits = _logits(rng, T, E)
        where = f"route_top_k on {T} tokens, {E} experts, k={k}, capacity {cap}"
        try:
            experts, gates, keep = fn(logits.clone(), k, cap)
        except (TypeError, ValueError) as err:
            raise AssertionError(f"{where}: returned something other than (experts, gates, "
                                 f"keep): {err}") from None
        want_e, want_g, want_keep = _oracle_route(logits, k, cap)
        if not torch.equal(torch.as_tensor(experts), want_e):
            raise AssertionError(f"{where}: the experts chosen differ (the k most probable, "
                                 "most probable first)")
        check_tensor(torch.as_tensor(gates), want_g, where, what="the gates")
        got_keep = torch.as_tensor(keep).bool().tolist()
        if got_keep == want_keep:
            continue
        kept, wanted = sum(map(sum, got_keep)), sum(map(sum, want_keep))
        if k > 1 and got_keep == _oracle_token_order_keep(logits, k, cap):
            raise AssertionError(f"{where}: kept {got_keep}, expected {want_keep}: the experts "
                                 "took the assignments token by token; a second choice must "
                                 "wait until every token's first choice has its place")
        if kept != wanted:
            raise AssertionError(f"{where}: {kept} assignments kept, expected {wanted}: an "
                                 f"expert takes assignments until it holds exactly {cap}")
        raise AssertionError(f"{where}: kept {got_keep}, expected {want_keep}: each expert "
                             "keeps the first assignments of its queue, every token's first "
                             "choice in token order, then every second choice")


def _oracle_balance(logits, experts):
    import torch

    T, E = logits.shape
    probs = logits.softmax(-1)
    share = [sum(1 for t in range(T) if int(experts[t, 0]) == i) / T for i in range(E)]
    return E * sum(share[i] * probs[:, i].mean() for i in range(E)) + 0 * torch.zeros(())


def _balance_harness(rank, world_size, fn, cases):
    """The learner's loss on each case, and its gradient, computed where the function runs
    (a tensor's graph does not travel): (loss, has a graph, gradient)."""
    def one_case(case):
        logits, experts = case
        mine = logits.clone().requires_grad_()
        got = fn(mine, experts.clone())
        graph = getattr(got, "requires_grad", False)
        if graph and getattr(got, "numel", lambda: 0)() == 1:
            got.reshape(()).backward()
        value = got.detach().clone() if hasattr(got, "detach") else got
        return value, graph, mine.grad

    return run_cases(rank, world_size, cases, one_case)


@exercise
def balance_loss(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    specs, cases = [], []
    for case in range(10):
        T, E = int(rng.integers(1, 12)), int(rng.integers(1, 7))
        k = 1 if E == 1 or case % 2 else 2
        specs.append((T, E, k))
        cases.append((_logits(rng, T, E), torch.from_numpy(rng.integers(0, E, size=(T, k)))))
    for (T, E, k), ((logits, experts), entries) in zip(
            specs, each_case(_balance_harness, fn, 1, cases), strict=True):
        where = f"balance_loss on {T} tokens, {E} experts, k={k}"
        ((got, graph, grad),) = rank_values(where, entries)
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            raise AssertionError(f"{where}: returned {type(got).__name__}, not a scalar tensor")
        ref = logits.clone().requires_grad_()
        want = _oracle_balance(ref, experts)
        want.backward()
        if not graph:
            raise AssertionError(f"{where}: the loss has no gradient for the router's scores: "
                                 "the loads are counts, constant to autograd; which quantity "
                                 "of each expert does depend on the scores?")
        if not torch.allclose(got.reshape(()).to(want.dtype), want.detach(), atol=1e-10):
            raise AssertionError(f"{where}: the loss is {got.item():.6g}, expected "
                                 f"{want.item():.6g} (it must be 1 when the routing is uniform)")
        if grad is None or not torch.allclose(grad, ref.grad, atol=1e-10):
            raise AssertionError(f"{where}: the right value, but the wrong gradient for the "
                                 "router's scores: which factor of each product is the "
                                 "differentiable one?")


# ---------------------------------------------------------------- trusted pieces on the ranks


def _route(logits, k, cap):
    import torch
    import torch.nn.functional as F

    T, E = logits.shape
    gates, experts = torch.topk(logits.softmax(-1), k, dim=-1)
    queue = experts.T.reshape(-1)
    onehot = F.one_hot(queue, E)
    place = (onehot.cumsum(0) * onehot).sum(1) - 1
    return experts, gates, (place < cap).reshape(k, T).T


def _all_rows(x, send_splits, recv_splits, group=None):
    import warnings

    from torch.distributed.nn.functional import all_to_all_single

    out = x.new_empty((sum(recv_splits), *x.shape[1:]))
    with warnings.catch_warnings():  # torch marks it deprecated for a private successor
        warnings.simplefilter("ignore", FutureWarning)
        return all_to_all_single(out, x, list(recv_splits), list(send_splits), group=group)


def _expert_mlp(x, w1, w2):
    import torch.nn.functional as F

    return F.gelu(x @ w1) @ w2


def _run_experts(rows, which, w1, w2):
    import torch
    import torch.nn.functional as F

    out = torch.zeros_like(rows)
    for j in range(len(w1)):
        out[which == j] = F.gelu(rows[which == j] @ w1[j]) @ w2[j]
    return out


def _harness(rank, world_size, fn, run, cases):
    """Each case through run in a short-timeout group: ("ok", value) or (kind, text),
    stopping at the first failure. Nothing is judged here."""
    return run_cases(rank, world_size, cases, lambda case: run(fn, rank, world_size, case))


def _checked_splits(tag):
    """A stand-in for dist.all_to_all_single that first compares this rank's split sizes with
    its peers' through the group's store (no collective: nothing for the recorder), and raises
    where they disagree: gloo aborts the process on mismatched split sizes."""
    import torch.distributed as dist

    calls = [0]

    def wrap(name, real):
        def call(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                 async_op=False):
            n, me = dist.get_world_size(group), dist.get_rank(group)
            sends = [int(v) for v in input_split_sizes] if input_split_sizes else \
                [len(input) // n] * n
            recvs = [int(v) for v in output_split_sizes] if output_split_sizes else \
                [len(output) // n] * n
            store = dist.distributed_c10d._get_default_store()
            key = f"{tag}-a2a-{calls[0]}"
            calls[0] += 1
            store.set(f"{key}-{me}", ",".join(map(str, sends)))
            peers = [[int(v) for v in store.get(f"{key}-{q}").decode().split(",") if v]
                     for q in range(n)]
            came = [peers[q][me] if me < len(peers[q]) else -1 for q in range(n)]
            if sum(sends) != len(input) or sum(recvs) != len(output) or came != recvs:
                raise RuntimeError(f"all_to_all_single call {calls[0]}: split sizes that do "
                                   f"not match: this rank expects {recvs} rows from the ranks, "
                                   f"they send it {came}; it gives {sends} of its {len(input)} "
                                   f"rows into an output of {len(output)}")
            return real(output, input, output_split_sizes, input_split_sizes, group, async_op)
        return call
    return wrap


def _run_moe(fn, rank, world_size, case):
    """The learner's layer on this rank: output, gradients, what it communicated."""
    from distlab.expert_parallel import count_all_to_all
    from distlab.intercept import intercepting

    local = case["local"]
    mine = slice(rank * local, (rank + 1) * local)
    router = case["router"].clone().requires_grad_()
    x = case["xs"][rank].clone().requires_grad_()
    w1 = case["w1"][mine].clone().requires_grad_()
    w2 = case["w2"][mine].clone().requires_grad_()
    with intercepting(["all_to_all_single"], _checked_splits(case["tag"])):
        with recording(saved=False) as fwd, count_all_to_all() as fwd_rows:
            out = fn(x, router, w1, w2, case["k"], case["cap"])
        with recording(saved=False) as bwd:
            out.backward(case["grads"][rank].clone())
    grads = [None if t.grad is None else t.grad.clone() for t in (x, router, w1, w2)]
    return {"out": out.detach().clone(), "grads": grads, "fwd": fwd.summary(),
            "bwd": bwd.summary(), "rows": fwd_rows.rows, "row_bytes": fwd_rows.row_bytes}


def _moe_harness(rank, world_size, fn, cases):
    return _harness(rank, world_size, fn, _run_moe, cases)


def _run_sync(fn, rank, world_size, case):
    """The learner's reduction on this rank, given its gradients after backward (it builds
    its groups itself: every rank calls it)."""
    router, w1, w2 = (t[rank].clone().requires_grad_() for t in (case["router"], case["w1"],
                                                                  case["w2"]))
    for t, grad in zip((router, w1, w2), case["before"][rank], strict=True):
        t.grad = grad.clone()
    with recording(flops=False, saved=False) as rec:
        fn(router, w1, w2, case["ep"])
    return {"grads": [t.grad.clone() for t in (router, w1, w2)], "rec": rec.summary()}


def _sync_harness(rank, world_size, fn, cases):
    return _harness(rank, world_size, fn, _run_sync, cases)


# ---------------------------------------------------------------- ep_moe


def _moe_case(rng, n, local, k, T, factor, seed):
    import math

    import torch

    E = n * local
    hidden, ffn = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    g = torch.Generator().manual_seed(seed)
    return {"local": local, "k": k, "tag": f"case{seed}-{n}-{local}-{k}-{T}",
            "cap": math.ceil(factor * k * T / E), "hidden": hidden,
            "factor": factor,
            "router": torch.randn(hidden, E, generator=g, dtype=torch.float64),
            "w1": torch.randn(E, hidden, ffn, generator=g, dtype=torch.float64),
            "w2": torch.randn(E, ffn, hidden, generator=g, dtype=torch.float64),
            "xs": torch.randn(n, T, hidden, generator=g, dtype=torch.float64),
            "grads": torch.randn(n, T, hidden, generator=g, dtype=torch.float64)}


def _one_process(case, rank):
    """Output, gradients (x, router's share from this rank's tokens, every expert's w1, w2)
    of this rank's tokens on one process; the kept assignments' experts, in token order."""
    import torch

    router = case["router"].clone().requires_grad_()
    w1, w2 = (case[name].clone().requires_grad_() for name in ("w1", "w2"))
    x = case["xs"][rank].clone().requires_grad_()
    experts, gates, keep = _oracle_route(x.detach() @ router.detach(), case["k"], case["cap"])
    gates = torch.gather((x @ router).softmax(-1), 1, experts)
    rows = [torch.zeros(x.shape[1], dtype=x.dtype) for _ in range(len(x))]
    kept = []
    for t in range(len(x)):
        for s in range(case["k"]):
            if keep[t][s]:
                e = int(experts[t, s])
                kept.append(e)
                rows[t] = rows[t] + gates[t, s] * _expert_mlp(x[t], w1[e], w2[e])
    out = torch.stack(rows)
    out.backward(case["grads"][rank])
    return out.detach(), [x.grad, router.grad, w1.grad, w2.grad], kept


def _check_moe_rank(where, rank, n, case, got, oracle, kept_by_rank):
    local, hidden = case["local"], case["hidden"]
    out, grads, _ = oracle[rank]
    fwd = got["fwd"]
    others = collections.Counter(c["kind"] for c in fwd["calls"] if c["kind"] != "all_to_all")
    if others.get("all_gather") or others.get("broadcast") or others.get("gather"):
        raise AssertionError(f"{where}: rank {rank}'s forward made {dict(others)}: the experts' "
                             "weights (or every token) gathered to one rank; the tokens travel "
                             "to the experts, the weights stay where they are")
    if others:
        raise AssertionError(f"{where}: rank {rank}'s forward made {dict(others)} besides "
                             "its all-to-alls: a MoE layer's dispatch and combine are "
                             "all-to-alls, and nothing else crosses the network")
    a2a = [c for c in fwd["calls"] if c["kind"] == "all_to_all"]
    if len(a2a) != len(got["rows"]):
        raise AssertionError(f"{where}: rank {rank} made {len(a2a)} all-to-alls, "
                             f"{len(got['rows'])} of them through dist.all_to_all_single: use "
                             "all_to_all_single (or all_rows) for every exchange")
    calls = list(zip(got["rows"], got["row_bytes"], strict=True))
    first_rows = next((i for i, (_, size) in enumerate(calls) if size == hidden * 8), None)
    ahead = calls[:first_rows] if first_rows is not None else None
    if ahead is not None and (len(ahead) != 1 or ahead[0][1] > 8
                              or sum(ahead[0][0]) != n * local):
        made = ", ".join(f"{sum(rows)} entries of {size} B" for rows, size in ahead) or "none"
        raise AssertionError(f"{where}: before its first all-to-all of token rows, rank {rank} "
                             f"made these all-to-alls: {made}; expected exactly one small "
                             f"exchange of {n * local} integers: how else does a rank size "
                             "what it will receive from each rank?")
    token_calls = [(rows, size) for rows, size in zip(got["rows"], got["row_bytes"],
                                                      strict=True) if size == hidden * 8]
    other_calls = [(rows, size) for rows, size in zip(got["rows"], got["row_bytes"],
                                                      strict=True) if size != hidden * 8]
    for rows, size in other_calls:
        if size > 8 or sum(rows) > n * local:
            raise AssertionError(f"{where}: rank {rank} sent an all-to-all of {sum(rows)} rows "
                                 f"of {size} B: only token rows ({hidden * 8} B) and the counts "
                                 "travel; the experts' weights stay on their rank")
    send = [sum(1 for e in kept_by_rank[rank] if e // local == q) for q in range(n)]
    recv = [sum(1 for e in kept_by_rank[q] if e // local == rank) for q in range(n)]
    if len(token_calls) != 2:
        raise AssertionError(f"{where}: rank {rank} made {len(token_calls)} all-to-alls of "
                             "token rows in forward, expected 2: one dispatch, one combine")
    (dispatch, _), (combine, _) = token_calls
    if dispatch != send:
        if sum(dispatch) > sum(send):
            raise AssertionError(f"{where}: rank {rank}'s dispatch gave ranks {dispatch} rows, "
                                 f"expected {send}: rows sent to ranks that do not hold their "
                                 "expert; only a kept assignment's row travels, to the rank of "
                                 "its expert")
        raise AssertionError(f"{where}: rank {rank}'s dispatch gave ranks {dispatch} rows, "
                             f"expected {send}: each kept assignment's row goes to the rank "
                             "that holds its expert")
    if combine != recv:
        raise AssertionError(f"{where}: rank {rank}'s combine gave ranks {combine} rows, "
                             f"expected {recv}: each expert output goes back to the rank its "
                             "row came from")
    router_flops = 2 * len(case["xs"][rank]) * hidden * n * local
    ffn = case["w1"].shape[2]
    budget = router_flops + sum(recv) * 4 * hidden * ffn
    if fwd["flops"] > FLOP_SLACK * budget + 64:
        raise AssertionError(f"{where}: rank {rank} did {fwd['flops']} matmul FLOPs in forward, "
                             f"more than the router and its own experts on the {sum(recv)} "
                             f"rows it received ({budget}): each rank runs only its experts, "
                             "on the rows sent to them")
    bwd_other = [c["kind"] for c in got["bwd"]["calls"] if c["kind"] != "all_to_all"]
    if bwd_other:
        raise AssertionError(f"{where}: rank {rank}'s backward made {bwd_other}: the layer's "
                             "backward is the two all-to-alls run back (the gradients of "
                             "copies are reduced outside the layer, in section 4)")
    check_tensor(got["out"], out, where, rank, "the output", "one process gives")
    names = ("the tokens' gradient", "the router's gradient (from this rank's tokens)",
             "its experts' w1 gradient", "its experts' w2 gradient")
    mine = slice(rank * local, (rank + 1) * local)
    wants = [grads[0], grads[1], grads[2][mine], grads[3][mine]]
    wants[2] = sum(oracle[q][1][2][mine] for q in range(n))
    wants[3] = sum(oracle[q][1][3][mine] for q in range(n))
    for name, value, want in zip(names, got["grads"], wants, strict=True):
        if value is None:
            raise AssertionError(f"{where}: rank {rank}: {name} is missing (None)")
        check_tensor(value, want, where, rank, name, "one process gives")


@exercise
def ep_moe(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    fn = with_trusted(fn, route_top_k=_route, all_rows=_all_rows, expert_mlp=_expert_mlp,
                      run_experts=_run_experts)
    plans = {2: [(1, 1, 5, 1.0), (2, 2, 7, 0.75), (3, 2, 6, 2.0)],
             4: [(1, 2, 6, 1.0), (2, 1, 9, 0.5)]}
    for n, specs in plans.items():
        cases = [_moe_case(rng, n, local, k, T, factor, int(rng.integers(10_000)))
                 for local, k, T, factor in specs]
        for case, entries in each_case(_moe_harness, fn, n, cases):
            E = n * case["local"]
            T = case["xs"].shape[1]
            where = (f"world_size={n}, {E} experts ({case['local']} a rank), k={case['k']}, "
                     f"{T} tokens a rank, capacity {case['cap']}")
            try:
                first_rank_failure(where, entries)
            except AssertionError as err:
                if "split sizes" not in str(err).lower():
                    raise
                raise AssertionError(f"{err}: an all-to-all's split sizes say how many rows "
                                     "this rank gives each rank (input) and how many each rank "
                                     "gives it (output), and must match what every rank "
                                     "sends") from None
            oracle = [_one_process(case, r) for r in range(n)]
            kept_by_rank = [sorted(o[2]) for o in oracle]
            for rank, (_, got) in enumerate(entries):
                _check_moe_rank(where, rank, n, case, got, oracle, kept_by_rank)


# ---------------------------------------------------------------- EP beside DP


def _oracle_copies(world, ep):
    return sorted(sorted(range(e, world, ep)) for e in range(ep))


def _sync_case(rng, n, ep, seed):
    """Each rank's gradients after backward (router: its own loss's; its experts: the sum over
    its EP group's losses) and the gradients one process gets on the mean loss."""
    import torch

    local, k = int(rng.integers(1, 3)), 1 + int(rng.integers(0, 2))
    E = ep * local
    k = min(k, E)
    T = int(rng.integers(3, 7))
    case = _moe_case(rng, 1, E, k, T, 1.25, seed)
    g = torch.Generator().manual_seed(seed + 1)
    case["xs"] = torch.randn(n, T, case["hidden"], generator=g, dtype=torch.float64)
    case["grads"] = torch.randn(n, T, case["hidden"], generator=g, dtype=torch.float64) / T
    per_rank = [_one_process(case, r)[1] for r in range(n)]
    before, router_w, w1_w, w2_w = [], [], [], []
    for r in range(n):
        e, d = r % ep, r // ep
        mine = slice(e * local, (e + 1) * local)
        group = range(d * ep, d * ep + ep)
        before.append([per_rank[r][1], sum(per_rank[q][2][mine] for q in group),
                       sum(per_rank[q][3][mine] for q in group)])
        router_w.append(case["router"])
        w1_w.append(case["w1"][mine])
        w2_w.append(case["w2"][mine])
    want = [sum(p[1] for p in per_rank) / n, sum(p[2] for p in per_rank) / n,
            sum(p[3] for p in per_rank) / n]
    return {"copies": _oracle_copies(n, ep), "ep": ep, "before": before, "want": want,
            "local": local, "router": torch.stack(router_w), "w1": torch.stack(w1_w),
            "w2": torch.stack(w2_w)}


@exercise
def sync_ep_dp_grads(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    for n, eps in {2: [1, 2], 4: [2, 4, 1]}.items():
        cases = [_sync_case(rng, n, ep, int(rng.integers(10_000))) for ep in eps]
        for ep, (case, entries) in zip(eps, each_case(_sync_harness, fn, n, cases), strict=True):
            where = f"world_size={n}, EP {ep} x DP {n // ep}, {case['local']} expert(s) a rank"
            first_rank_failure(where, entries)
            local = case["local"]
            for rank, (_, got) in enumerate(entries):
                e = rank % ep
                mine = slice(e * local, (e + 1) * local)
                copies = next(g for g in case["copies"] if rank in g)
                made = collections.Counter(tuple(c["ranks"] or ()) for c in got["rec"]["calls"]
                                           if c["kind"] == "all_reduce")
                world = tuple(range(n))
                if list(world) != copies and made.get(world, 0) > 1:
                    raise AssertionError(f"{where}: rank {rank} all-reduced {made[world]} "
                                         f"gradients over the world: its experts' gradients "
                                         f"met those of ranks holding other experts; only the "
                                         f"ranks holding copies, {copies}, hold the same ones")
                other = [list(g) for g in made if list(g) != copies and g != world]
                if other:
                    raise AssertionError(f"{where}: rank {rank} all-reduced in the group(s) "
                                         f"{other}: an expert's gradient is reduced among the "
                                         f"ranks holding its copies, {copies}")
                wants = [case["want"][0], case["want"][1][mine], case["want"][2][mine]]
                names = ("the router's gradient", "its experts' w1 gradient",
                         "its experts' w2 gradient")
                for name, value, want in zip(names, got["grads"], wants, strict=True):
                    if name != names[0] and value.shape == want.shape and want.norm() > 0 \
                            and ep > 1 and abs((value.norm() / want.norm()).item() - ep) < 1e-6:
                        raise AssertionError(
                            f"{where}: rank {rank}: {name} is {ep}x one process's: a copy "
                            "already holds the gradients of its whole EP group's losses "
                            "before the reduction; what must the sum be divided by?")
                    check_tensor(value, want, where, rank, name,
                                 "one process's (mean loss over every rank's tokens) is")
                if len(copies) > 1 and copies != list(world) and made.get(tuple(copies), 0) < 2:
                    raise AssertionError(f"{where}: rank {rank} made all-reduces "
                                         f"{ {str(list(g)): c for g, c in made.items()} } "
                                         f"(group: count): its experts' gradients are reduced "
                                         f"among the ranks holding their copies, {copies}")


# ---------------------------------------------------------------- bytes


def _oracle_bytes(experts, keep, local, row_bytes, *, dropped=False, own=False,
                  per_token=False):
    """(dispatch, combine) bytes a rank, by loops over every assignment: a kept assignment's
    row goes from its rank r to the rank of its expert, e // local, and back, when that rank is
    not r. The keywords give the wrong counts the complaints name: dropped assignments counted
    too, the rank's own experts' rows counted too, one row a token (not one an assignment)."""
    n = len(experts)
    dispatch, combine = [0] * n, [0] * n
    for r in range(n):
        for choices, kept in zip(experts[r], keep[r], strict=True):
            to = {e // local for e, k in zip(choices, kept, strict=True)
                  if (k or dropped) and (e // local != r or own)}
            if per_token:
                dispatch[r] += len(to) > 0
                continue
            for e, k in zip(choices, kept, strict=True):
                if (k or dropped) and (e // local != r or own):
                    dispatch[r] += 1
                    combine[e // local] += 1
    return [d * row_bytes for d in dispatch], [c * row_bytes for c in combine]


def _routing(rng, n, local, k, T):
    """n ranks' routings as route_top_k returns them: experts (T, k), distinct in a row, and
    keep (T, k), a few assignments dropped."""
    import torch

    experts = [torch.tensor(np.array([rng.permutation(n * local)[:k] for _ in range(T)]),
                            dtype=torch.int64).reshape(T, k) for _ in range(n)]
    keep = [torch.from_numpy(rng.random((T, k)) < 0.7) for _ in range(n)]
    return experts, keep


@exercise
def predict_a2a_bytes(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    cases = []
    # two ranks of two experts. Rank 0: token 0 sends both its kept choices to rank 1, token 1
    # keeps both on rank 0, token 2's choice for rank 1 is dropped; rank 1 sends one row
    e0 = torch.tensor([[2, 3], [1, 0], [3, 1]])
    k0 = torch.tensor([[True, True], [True, True], [False, True]])
    e1 = torch.tensor([[0, 2], [3, 1], [2, 3]])
    k1 = torch.tensor([[True, True], [False, False], [True, False]])
    cases.append((2, 2, 16, [e0, e1], [k0, k1]))
    # unbalanced: every rank's tokens to rank 0's first expert, nothing dropped
    cases.append((3, 1, 8, [torch.zeros(q + 2, 1, dtype=torch.int64) for q in range(3)],
                  [torch.ones(q + 2, 1, dtype=torch.bool) for q in range(3)]))
    for _ in range(12):
        n, local = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        k = int(rng.integers(1, min(2, n * local) + 1))
        experts, keep = _routing(rng, n, local, k, int(rng.integers(1, 9)))
        cases.append((n, local, int(rng.choice([8, 16, 48, 96])), experts, keep))
    for n, local, row_bytes, experts, keep in cases:
        lists = ([e.tolist() for e in experts], [m.tolist() for m in keep])
        dispatch, combine = _oracle_bytes(*lists, local, row_bytes)
        routing = "; ".join(f"rank {r}: experts {lists[0][r]}, keep {lists[1][r]}"
                            for r in range(n))
        where = (f"predict_a2a_bytes on {n} rank(s), {local} expert(s) a rank (rank q holds "
                 f"experts {local}q to {local}q + {local - 1}), {row_bytes} B a row; {routing}")
        got = fn([e.clone() for e in experts], [m.clone() for m in keep], local, row_bytes)
        try:
            got_d, got_c = ([int(v) for v in part] for part in got)
        except (TypeError, ValueError, RuntimeError):
            raise AssertionError(f"{where}: returned {got!r}, expected two lists of bytes, one "
                                 "entry per rank") from None
        if got_d != dispatch:
            raise AssertionError(f"{where}: dispatch {got_d}, expected {dispatch}: "
                                 + _dispatch_complaint(got_d, lists, local, row_bytes, combine))
        if got_c != combine:
            raise AssertionError(f"{where}: combine {got_c}, expected {combine}: "
                                 + _combine_complaint(got_c, lists, local, row_bytes, dispatch))


def _dispatch_complaint(got, lists, local, row_bytes, combine):
    wrong = functools.partial(_oracle_bytes, *lists, local, row_bytes)
    if got == wrong(dropped=True, own=True)[0]:
        return ("every chosen assignment counted: a dropped assignment's row never leaves its "
                "rank, and the rows for a rank's own experts stay in its own piece")
    if got == wrong(dropped=True)[0]:
        return "a dropped assignment's row never leaves its rank: count the kept ones only"
    if got == wrong(own=True)[0]:
        return ("the rows for a rank's own experts counted: they stay in its own piece of the "
                "all-to-all and never leave it")
    if got == wrong(per_token=True)[0]:
        return ("one row counted a token: ep_moe sends a token's row once for each kept "
                "assignment, twice when both its experts are on another rank")
    if got == combine:
        return ("that is what each rank receives (and sends back in the combine): a rank's "
                "dispatch sends the rows of its own tokens")
    return "a rank sends one row for each kept assignment whose expert another rank holds"


def _combine_complaint(got, lists, local, row_bytes, dispatch):
    wrong = functools.partial(_oracle_bytes, *lists, local, row_bytes)
    if got == dispatch:
        return ("a rank's combine sends back the outputs of the rows it received, not the rows "
                "it dispatched")
    if got == wrong(dropped=True)[1]:
        return "a dropped assignment never reached the expert, so nothing comes back for it"
    if got == wrong(own=True)[1]:
        return ("the rows a rank kept for its own experts counted: they never left it, so they "
                "do not go back")
    return ("a rank sends back the outputs of the rows it received: the other ranks' kept "
            "assignments to its experts")
