"""Shortcuts of notebook 09 (expert parallelism): blank fills that earn the values without the
idea (the assignments queued token by token, an expert taking one more than its capacity, a
loss without the router's gradient or without the loads, the counts never exchanged or every
rank's whole count table sent to every rank, the experts' weights or every token
all-gathered so that a rank runs every expert, the combine sent with the dispatch's splits,
the EP groups taken for the copies' groups, expert gradients averaged over their copies or
reduced over the world, the bytes of dropped assignments or of the rows for a rank's own
experts counted as moved, one row a token, the dispatch's and the combine's bytes taken for
each other), and correct answers written otherwise."""

from shortcuts import Shortcut

ROUTE = ("queue = {queue}; onehot = F.one_hot(queue, E); place = (onehot.cumsum(0) * onehot)"
         ".sum(1) - 1; keep = (place {cmp} cap){tail}")
LAYER = ("received = all_rows(x[token], send_splits, recv_splits, group); y = run_experts("
         "received, which, w1, w2); back = all_rows(y, {combine}, group); return torch."
         "zeros_like(x).index_add(0, token, gate.unsqueeze(1) * back)")
GATHERED_WEIGHTS = ("return (lambda W1, W2: torch.zeros_like(x).index_add(0, token, "
                    "gate.unsqueeze(1) * torch.stack([expert_mlp(x[t], W1[e], W2[e]) for t, e "
                    "in zip(token.tolist(), expert.tolist())])))(torch.cat(torch.distributed.nn"
                    ".functional.all_gather(w1, group=group)), torch.cat(torch.distributed.nn"
                    ".functional.all_gather(w2, group=group)))")
COLUMNS = "[list(range(e, N, ep)) for e in range(ep)]"
ROWS = "[list(range(d * ep, d * ep + ep)) for d in range(N // ep)]"
WORLD = "N = dist.get_world_size(); "

SHORTCUTS = [
    Shortcut("route_top_k", {1: ROUTE.format(queue="experts.reshape(-1)", cmp="<",
                                             tail=".reshape(T, k)")},
             "the assignments queued token by token", "first choice"),
    Shortcut("route_top_k", {1: ROUTE.format(queue="experts.T.reshape(-1)", cmp="<=",
                                             tail=".reshape(k, T).T")},
             "an expert takes one more assignment than its capacity", "exactly"),
    Shortcut("balance_loss", {1: "E * (first_share * first_share).sum()"},
             "the loads alone: no gradient for the router", "no gradient"),
    Shortcut("balance_loss", {1: "E * (logits.softmax(-1).mean(0) ** 2).sum()"},
             "the probabilities alone, no load", "expected"),
    Shortcut("ep_moe", {1: "recv_counts = send_counts.clone()"},
             "the counts never exchanged: every rank assumes it receives what it sends",
             "split sizes"),
    Shortcut("ep_moe", {1: "table = torch.empty(N * E, dtype=send_counts.dtype); dist."
                           "all_to_all_single(table, send_counts.repeat(N), group=group); "
                           "recv_counts = table.view(N, N, local)[:, dist.get_rank(group)]"
                           ".reshape(-1)"},
             "every rank's whole count table sent to every rank", "small exchange"),
    Shortcut("ep_moe", {3: GATHERED_WEIGHTS},
             "the experts' weights all-gathered: a dense MoE on every rank", "weights"),
    Shortcut("ep_moe", {3: "torch.distributed.nn.functional.all_gather(x, group=group); "
                           + LAYER.format(combine="recv_splits, send_splits")},
             "every token sent to every rank", "gathered"),
    Shortcut("ep_moe", {3: LAYER.format(combine="send_splits, recv_splits")},
             "the combine sent with the dispatch's splits", "split sizes"),
    Shortcut("sync_ep_dp_grads", {1: f"{WORLD}group, _ = dist.new_subgroups_by_enumeration("
                                     f"{ROWS}); "
                                     "divisor = N"},
             "the EP groups taken for the groups of copies", "copies"),
    Shortcut("sync_ep_dp_grads", {1: f"{WORLD}group, _ = dist.new_subgroups_by_enumeration("
                                     f"{COLUMNS}); "
                                     "divisor = dist.get_world_size(group)"},
             "the experts' gradients averaged over their copies", "divided"),
    Shortcut("sync_ep_dp_grads", {1: f"{WORLD}group = None; divisor = N"},
             "the experts' gradients reduced over the world", "world"),
    Shortcut("predict_a2a_bytes", {1: "[row_bytes * int((experts[r] // local != r).sum()) "
                                      "for r in range(N)]"},
             "every chosen assignment counted as moved, the dropped ones too", "dropped"),
    Shortcut("predict_a2a_bytes", {1: "[row_bytes * int(keep[r].sum()) for r in range(N)]"},
             "every kept row counted as moved, those for the rank's own experts too",
             "own experts"),
    Shortcut("predict_a2a_bytes", {1: "[row_bytes * int((keep[r] & (experts[r] // local != r))"
                                      ".any(1).sum()) for r in range(N)]"},
             "one row counted a token, not one a kept assignment", "each kept assignment"),
    Shortcut("predict_a2a_bytes", {1: "[row_bytes * sum(int((keep[q] & (experts[q] // local =="
                                      " r)).sum()) for q in range(N) if q != r) for r in "
                                      "range(N)]"},
             "the combine's bytes taken for the dispatch's", "receives"),
    Shortcut("predict_a2a_bytes", {2: "dispatch"},
             "the dispatch's bytes taken for the combine's", "received"),
]

HONEST = [
    Shortcut("route_top_k", {1: "queue = experts.t().flatten(); place = (F.one_hot(queue, E)"
                                ".cumsum(0) - 1)[torch.arange(k * T), queue]; keep = (place < "
                                "cap).view(k, T).t()"},
             "the queue by t().flatten(), the place by indexing"),
    Shortcut("ep_moe", {3: "received = all_rows(x[token], send_splits, recv_splits, group); "
                           "y = run_experts(received, which, w1, w2); back = all_rows(y, "
                           "send_splits=recv_splits, recv_splits=send_splits, group=group); "
                           "return torch.zeros_like(x).index_add(0, token, back * "
                           "gate[:, None])"},
             "the combine's splits by keyword, the gate by indexing"),
    Shortcut("sync_ep_dp_grads", {1: "N = dist.get_world_size(); group = dist."
                                     "new_subgroups_by_enumeration([[d * ep + e for "
                                     "d in range(N // ep)] for e in range(ep)])[0]; divisor = "
                                     "dist.get_world_size(group) * ep"},
             "the copies' groups by a nested comprehension, the divisor as copies x EP"),
    Shortcut("predict_a2a_bytes", {1: "[row_bytes * sum(int(e) // local != r for e in "
                                      "experts[r][keep[r]]) for r in range(N)]",
                                   2: "[row_bytes * sum(int((experts[q][keep[q]] // local == r)"
                                      ".sum()) for q in range(N) if q != r) for r in range(N)]"},
             "the kept experts picked by indexing, counted by a generator"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("sync_ep_dp_grads", 1, lambda answer: answer.replace(
    "divisor = N", "divisor = dist.get_world_size(group)"))
