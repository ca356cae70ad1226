"""Shortcuts through notebook 08's blanks (context parallelism), and honest answers written
otherwise.

Blank numbers as the released cells number them: merge_block 1 (the new state: maximum,
normaliser, weighted sum); RingPass 1 (the backward's exchange); ring_attention 1 (whose block
is here), 2 (which pairs of chunks are skipped or masked); zigzag_chunks 1; ulysses_attention 1
(to_heads: what goes into the all-to-all and how what arrives is put together);
predicted_bytes 1 (ring), 2 (Ulysses), forward and backward.

ring_attention is watched on every rank while it runs (the recorder: each message's kind, peer
and bytes in a forward without gradients, a forward and a backward; the tensor bytes alive at
each message; the matmul FLOPs), so a fill that reaches the right values with every block on
every rank, or with a message to every rank, fails whatever it returns.
"""

from shortcuts import Shortcut

# every block on every rank: one all-gather at step 0, then each step reads its block from it
ALL_GATHER = ("[gathered := [torch.empty_like(kv) for _ in range(n)] if step == 0 else gathered, "
              "dist.all_gather(gathered, kv) if step == 0 else None, "
              "kv := gathered[(rank - step) % n], (rank - step) % n][-1]")
# every rank's block sent to every rank at step 0, by hand
TO_EVERY_RANK = ("[requests := [dist.isend(kv, dst=j) for j in range(n) if j != rank] if step == 0 "
                 "else [], blocks := {j: torch.empty_like(kv) for j in range(n)} if step == 0 "
                 "else blocks, [dist.recv(blocks[j], src=j) for j in range(n) if j != rank "
                 "and step == 0], [r.wait() for r in requests], "
                 "blocks.__setitem__(rank, kv) if step == 0 else None, "
                 "kv := blocks[(rank - step) % n], (rank - step) % n][-1]")

MAX = "m_new = torch.maximum(m, scores.amax(-1, keepdim=True)); p = torch.exp(scores - m_new); "
RESCALED = ("l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True); "
            "acc = acc * torch.exp(m - m_new) + p @ v")
SEND = "send = x.reshape(b, n, h // n, length, d).transpose(0, 1).contiguous(); "
BACK = "got = all_to_all(send); return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)"

SHORTCUTS = [
    Shortcut("merge_block", {1: MAX + "l = l + p.sum(-1, keepdim=True); acc = acc + p @ v"},
             "the earlier terms never rescaled", "the sum of e^(s - m)"),
    Shortcut("merge_block", {1: "m_new = scores.amax(-1, keepdim=True); "
                                "p = torch.exp(scores - m_new); " + RESCALED},
             "the block's own maximum, the earlier ones forgotten", "largest score so far"),
    Shortcut("RingPass", {1: "request = dist.isend(grad.contiguous(), dst=(rank + 1) % n); "
                             "dist.recv(received, src=(rank - 1) % n); request.wait()"},
             "the gradient sent the way x went", "where did this rank's x go"),
    Shortcut("RingPass", {1: "received = grad.clone()"},
             "the gradient kept on the rank", "one of each"),
    Shortcut("ring_attention", {1: ALL_GATHER},
             "an all-gather of the whole key/value sequence", "all-gather"),
    Shortcut("ring_attention", {1: TO_EVERY_RANK},
             "every block sent to every rank at once", "one neighbour only"),
    Shortcut("ring_attention", {1: "[kept := (kept if step else []) + [kv], (rank - step) % n]"
                                   "[-1]"},
             "every block that arrived kept", "the block it works on and the one arriving"),
    Shortcut("ring_attention", {2: "False, causal and b == a"},
             "future chunks attended to", "attention on one process"),
    Shortcut("zigzag_chunks", {1: "[rank, n + rank]"}, "a second chunk shifted, not mirrored",
             "the same"),
    Shortcut("ulysses_attention",
             {1: "send = x.reshape(b, h // n, n, length, d).permute(2, 0, 1, 3, 4).contiguous(); "
                 + BACK},
             "heads dealt round-robin, put back in blocks by to_seq", "attention on one process"),
    Shortcut("ulysses_attention",
             {1: "import torch.distributed.nn.functional as fn; got = fn.all_gather(x); "
                 "r = dist.get_rank(); "
                 "return torch.cat(got, dim=2)[:, r * (h // n):(r + 1) * (h // n)]"},
             "every rank gathers the whole sequence, then keeps its heads", "never gathers"),
    Shortcut("predicted_bytes", {1: "(n - 1) * 2 * local"}, "the ring's backward left out",
             "forward and backward"),
    Shortcut("predicted_bytes", {1: "2 * n * 2 * local"}, "the ring's last pass counted",
             "ring attention's point-to-point sends"),
    Shortcut("predicted_bytes", {2: "8 * local"}, "the piece a rank keeps counted as sent",
             "Ulysses"),
    Shortcut("predicted_bytes", {2: "4 * local * (n - 1) // n"}, "Ulysses' backward left out",
             "Ulysses' all-to-alls, forward and backward"),
]

HONEST = [
    Shortcut("merge_block", {1: "m_new = torch.max(m, scores.max(dim=-1, keepdim=True).values)\n"
                                "p = torch.exp(scores - m_new)\nscale = torch.exp(m - m_new)\n"
                                "l = scale * l + p.sum(-1, keepdim=True)\n"
                                "acc = scale * acc + p @ v"},
             "torch.max, a scale, five lines"),
    Shortcut("RingPass", {1: "request = dist.irecv(received, src=(rank + 1) % n)\n"
                             "dist.send(grad.contiguous(), dst=(rank - 1) % n)\nrequest.wait()"},
             "receive first, on three lines"),
    Shortcut("ring_attention", {1: "(rank + n - step) % n",
                                2: "(causal and b > a), (causal and a == b)"},
             "rewritten"),
    Shortcut("zigzag_chunks", {1: "[2 * n - 1 - rank, rank]"}, "the late chunk first"),
    Shortcut("zigzag_chunks", {1: "[n - 1 - rank, n + rank]"},
             "the mirror pairs, dealt the other way"),
    Shortcut("ulysses_attention",
             {1: "pieces = torch.stack(x.chunk(n, dim=1))\narrived = all_to_all(pieces)\n"
                 "return torch.cat([arrived[j] for j in range(n)], dim=2)"},
             "chunk, stack, cat"),
    Shortcut("predicted_bytes", {1: "4 * local * (n - 1)", 2: "8 * (local - local // n)"},
             "rewritten"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("ring_attention", 2, lambda answer: answer.replace("b > a", "b >= a"))
