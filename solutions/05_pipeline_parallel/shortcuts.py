"""Shortcuts through notebook 05's blanks (pipeline parallelism), and honest answers written
otherwise.

Blank numbers as the released cells number them: gpipe_table 1 (both phases' micro-batch);
one_f_one_b_order 1 (warm-up); run_stage 1 (what a forward keeps), 2 (the backward);
interleaved_order 1 (the warm-up); zb_h1_order 1 (may a waiting W run now); pipelining_step 1
(positional), 2 (keyword); predicted_activation_bytes 1 (the formula); activation_bytes 1 (the
block's line under the budget).

run_stage is watched while it runs (what autograd keeps per micro-batch, the inputs still alive
after their backward, every send and receive with its bytes and peer), so a stash that never
lets go, or a gradient that does not come from the next stage, fails whatever it returns.
activation_bytes is counted from below too (saved_tensors_hooks around the call, and through
any the function opens): the bytes it reports must be what autograd kept (issue 51's hole: a
count tuned to the checkpointed total with no checkpointing at all).
"""

from shortcuts import Shortcut

BACKWARD = "x, y = stash.pop(mb); y.backward(None if last else receive(nxt, mb)); "
CK = "h = checkpoint(block, h, use_reentrant=False) if saved + "
# the hole of issue 51: no checkpointing, 8 of each block's 9 saved tensors' bytes taken back
# off the count, so that it reports what checkpointing would keep
TUNED = "h = [block(h), saved := saved - 8 * h.numel() * h.element_size()][0]"

SHORTCUTS = [
    Shortcut("gpipe_table", {1: "forward = t - s; backward = t - s"},
             "the backward run as the forward's diagonal", "needs"),
    Shortcut("gpipe_table", {1: "forward = t; backward = t"},
             "every stage on the same micro-batch", "needs"),
    Shortcut("one_f_one_b_order", {1: "M"}, "all forwards first (GPipe)", "holds"),
    Shortcut("one_f_one_b_order", {1: "0"}, "no warm-up", "takes"),
    Shortcut("run_stage", {2: "x, y = stash[mb]; y.backward(None if last else receive(nxt, mb)); "
                              "send(x.grad, prev, mb)"},
             "the stash never freed", "stash"),
    Shortcut("run_stage", {2: "x, y = stash.pop(mb); y.backward(None if last else "
                              "torch.ones(shape)); send(x.grad, prev, mb)"},
             "ones backpropagated, not the gradient from the next stage", "message"),
    Shortcut("run_stage", {2: BACKWARD + "send(x.grad, nxt, mb)"},
             "the input's gradient sent downstream", "message"),
    Shortcut("interleaved_order", {1: "min((v - 1) * S + 2 * (S - 1 - r), v * M)"},
             "Megatron-LM's warm-up, not the minimum asked", "holds"),
    Shortcut("interleaved_order", {1: "min(S - r - 1, len(forwards))"},
             "1F1B's warm-up, blind to the chunks", "deadlock"),
    Shortcut("zb_h1_order", {1: "len(waiting) > 0"}, "every W at once: nothing fills the end",
             "idle"),
    Shortcut("zb_h1_order", {1: "False"}, "every W kept to the end", "idle"),
    Shortcut("pipelining_step", {2: '{"target": y, "losses": losses}'},
             "every rank handed the targets", "only the last stage"),
    Shortcut("predicted_activation_bytes",
             {1: "unit * (depth * (2 if checkpointed else 9) + 1)"},
             "a checkpointed block keeping its input and output", "autograd keeps"),
    Shortcut("activation_bytes", {1: TUNED},
             "no checkpointing, the count tuned to what checkpointing keeps",
             "counted while it ran"),
    Shortcut("activation_bytes", {1: "h = block(h)"}, "no checkpointing at all",
             "only its input"),
    Shortcut("activation_bytes", {1: "h = checkpoint(block, h, use_reentrant=False)"},
             "every block checkpointed, whatever the budget", "only as many as the budget"),
    Shortcut("activation_bytes", {1: CK + "(8 + left) * unit > budget else block(h)"},
             "the loss's saved tensor left out of the budget", "over the budget"),
]

HONEST = [
    Shortcut("gpipe_table", {1: "forward, backward = -s + t, t + s - S + 1"}, "reordered"),
    Shortcut("one_f_one_b_order", {1: "min(M, S - 1 - s)"}, "reordered"),
    Shortcut("run_stage", {1: "[x, y]",
                           2: "x, y = stash.pop(mb)\nif last:\n    y.backward()\nelse:\n"
                              "    y.backward(receive(nxt, mb))\nif not first:\n"
                              "    send(x.grad.clone(), prev, mb)"},
             "a list kept, the backward over several lines"),
    Shortcut("interleaved_order", {1: "min(len(backwards), size * (v - 1) + S - 1 - r)"},
             "reordered"),
    Shortcut("zb_h1_order", {1: "len(waiting) >= s + 1"}, "at least s + 1"),
    Shortcut("pipelining_step", {2: '{"target": y, "losses": losses} if rank + 1 == '
                                    'world_size else {}'}, "the last rank said otherwise"),
    Shortcut("predicted_activation_bytes",
             {1: "(depth + 1) * unit if checkpointed else (9 * depth + 1) * unit"},
             "two formulas"),
    Shortcut("activation_bytes",
             {1: "plain = saved + 9 * unit + (left - 1) * unit + unit <= budget\n"
                 "h = block(h) if plain else checkpoint(block.forward, h, use_reentrant=False)"},
             "the bound forward, the test over two lines"),
    Shortcut("activation_bytes",
             {1: "h = block(h) if 8 * (i + 1) + depth + 1 <= budget / unit else "
                 "checkpoint(block, h, use_reentrant=False)"},
             "the count of plain blocks worked out first"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("one_f_one_b_order", 1, lambda answer: "min(S - s, M)")
