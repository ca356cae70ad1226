"""Shortcuts through notebook 05's blanks (pipeline parallelism), and honest answers written
otherwise.

Blank numbers as the released cells number them: gpipe_table 1 (forward micro-batch), 2
(backward micro-batch), 3 (is there one), 4 (the bubble ratio); one_f_one_b_order 1 (warm-up),
2 (next forward), 3 (oldest backward); run_stage 1 (the peak), 2 (`pop`), 3 (the gradient
backpropagated), 4 (the gradient sent back); pipelining_step 1 (the stage index), 2 (what is
passed positionally), 3 (what is passed by keyword).

run_stage's peak is measured while it runs (what autograd keeps per micro-batch, the inputs
still alive after their backward, every send and receive with its bytes and peer), so a peak
read off the order, or a stash that never lets go, fails whatever number it reports.
"""

from shortcuts import Shortcut

ORDER_PEAK = ("max(peak, max(sum((a[1] == 'F') - (a[1] == 'B') for a in actions[:i + 1]) "
              "for i in range(len(actions))))")

SHORTCUTS = [
    Shortcut("gpipe_table", {2: "t - s", 4: "(S - 1) / (M + S - 1)"},
             "wrong busy slots behind the closed-form bubble", "needs"),
    Shortcut("gpipe_table", {3: "0 <= mb < M and t < M", 4: "(S - 1) / (M + S - 1)"},
             "slots dropped, the ratio typed in", "never"),
    Shortcut("one_f_one_b_order", {1: "M"}, "all forwards first (GPipe)", "holds"),
    Shortcut("one_f_one_b_order", {1: "0"}, "no warm-up", "takes"),
    Shortcut("run_stage", {1: ORDER_PEAK, 2: "get"},
             "the order's peak reported, the stash never freed", "stash"),
    Shortcut("run_stage", {1: "len(stash)"}, "the count at the last forward, not the most",
             "reports"),
    Shortcut("run_stage", {3: "torch.ones_like(y)"}, "ones backpropagated, not the gradient "
             "received", "gradient"),
    Shortcut("pipelining_step", {3: '{"target": y, "losses": losses}'},
             "every rank handed the targets", "only the last stage"),
]

HONEST = [
    Shortcut("gpipe_table", {4: "(S - 1) / (M + S - 1)"}, "the bubble in closed form"),
    Shortcut("gpipe_table", {1: "-s + t", 3: "mb in range(M)", 4: "1 - active / total"},
             "reordered"),
    Shortcut("one_f_one_b_order", {1: "min(M, S - 1 - s)", 2: "k + warmup"}, "reordered"),
    Shortcut("run_stage", {1: "max(len(stash), peak)", 3: "grad.clone()",
                           4: "x.grad.clone()"}, "copies sent, max turned round"),
    Shortcut("pipelining_step", {3: '{"target": y, "losses": losses} if rank + 1 == '
                                    'world_size else {}'}, "the last rank said otherwise"),
]
