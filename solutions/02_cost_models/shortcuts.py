"""Shortcuts through notebook 02's blanks (cost models), and honest answers written otherwise.

Notebook 02 is closed-form formulas, so a shortcut is a formula that matches the visible checks
(8 ranks, 8 GPUs a node, pp = 2) and nothing else, the count of another algorithm (the ring's
steps in a tree), n where n - 1 belongs, a fit that matches exact times only, a scan where the
minimum should be found, or a group placed where its GPUs do not sit. The hidden tests try many
rank counts, links and sizes, latency alone (the steps) and bandwidth alone (the bytes), noisy
times for the fit, best piece counts in the millions, clusters of several nodes with every
layout, so each fails and says which.

Blank numbers as the released cells number them: chain_best_pieces 1 (the best k; the chain's
cost function is given); allreduce_time_halving_doubling 1 (bytes sent); ring_tree_crossover 1
(None or where the lines meet, a whole statement); bus_bandwidth 1 (the all-gather factor);
fit_alpha_beta 1 (the weights); hierarchical_allreduce_time 1 (the phases inside and across, a
whole block); iteration_costs 1 (the DP group's link), 2 (TP all-reduces), 3 (the pipeline's
link), 4 (bubble).
"""

from shortcuts import Shortcut

CROSS = "(ring_fixed - tree_fixed) / (tree_per_byte - ring_per_byte)"

SHORTCUTS = [
    Shortcut("chain_best_pieces", {1: "math.sqrt(n * nbytes / (alpha * bw))"},
             "n where the fill's n - 2 belongs", "stop falling"),
    Shortcut("chain_best_pieces",
             {1: "min(range(1, 4097), key=lambda k: allreduce_time_chain(nbytes, n, alpha, bw, "
                 "k))"}, "a scan of the counts instead of the minimum", "stop falling"),
    Shortcut("chain_best_pieces", {1: "math.sqrt(nbytes / (alpha * bw))"},
             "the line's length forgotten", "stop falling"),
    Shortcut("allreduce_time_halving_doubling", {1: "rounds * nbytes"},
             "recursive doubling's whole messages", "bytes"),
    Shortcut("allreduce_time_halving_doubling", {1: "2 * nbytes"},
             "the large-N limit of the bytes", "bytes"),
    Shortcut("allreduce_time_halving_doubling", {1: "nbytes * 7 / 4"},
             "the bytes of the 8-rank check", "bytes"),
    Shortcut("ring_tree_crossover", {1: f"return None if n == 1 else {CROSS}"},
             "no crossover for one rank only", "never slower"),
    Shortcut("ring_tree_crossover",
             {1: "return None if ring_fixed <= tree_fixed else (ring_fixed - tree_fixed) / "
                 "tree_per_byte"}, "the tree's bytes alone, the ring's forgotten", "equal"),
    Shortcut("bus_bandwidth", {1: "1"}, "the large-N factor", "all_gather"),
    Shortcut("bus_bandwidth", {1: "7 / 8"}, "the factor of the 8-rank check", "all_gather"),
    Shortcut("fit_alpha_beta", {1: "np.ones_like(t)"},
             "plain least squares: right on exact times only", "relative"),
    Shortcut("fit_alpha_beta", {1: "1 / M"}, "weights from the sizes, not the times",
             "relative"),
    Shortcut("hierarchical_allreduce_time",
             {1: "inside = allreduce_time_ring(nbytes, G, *intra); "
                 "across = allreduce_time_ring(nbytes, nodes, *inter)"},
             "the whole vector across the nodes", "carry across"),
    Shortcut("hierarchical_allreduce_time",
             {1: "inside = allreduce_time_ring(nbytes, 8, *intra); "
                 "across = allreduce_time_ring(nbytes / 8, nodes, *inter)"},
             "the check's 8 GPUs a node", "the time"),
    Shortcut("hierarchical_allreduce_time",
             {1: "inside = allreduce_time_ring(nbytes, G, *intra) / 2; "
                 "across = allreduce_time_ring(nbytes / G, nodes, *inter)"},
             "one phase inside the node, not two", "inside the nodes alone"),
    Shortcut("iteration_costs", {1: "group_link(cluster, 1, dp)"},
             "a DP group taken as consecutive GPUs", "DP all-reduce"),
    Shortcut("iteration_costs", {3: "group_link(cluster, tp * dp, 2)"},
             "one pair of neighbouring stages, not the slowest", "slowest"),
    Shortcut("iteration_costs", {4: "stage"}, "the bubble of 2 stages only", "bubble"),
    Shortcut("iteration_costs", {2: "4 * L * m"}, "every layer's all-reduces, not the stage's",
             "'tp'"),
]

HONEST = [
    Shortcut("chain_best_pieces", {1: "((n - 2) * nbytes / (alpha * bw)) ** 0.5"}, "a power"),
    Shortcut("chain_best_pieces", {1: "math.sqrt((n - 2) * nbytes / alpha / bw)"},
             "divided twice"),
    Shortcut("allreduce_time_halving_doubling", {1: "2 * nbytes * (1 - 1 / n)"},
             "1 - 1/n"),
    Shortcut("allreduce_time_halving_doubling", {1: "2 * (n - 1) / n * nbytes"},
             "the closed form"),
    Shortcut("ring_tree_crossover",
             {1: "return None if n <= 3 else (tree_fixed - ring_fixed) / (ring_per_byte - "
                 "tree_per_byte)"},
             "the groups counted on paper, the difference turned round"),
    Shortcut("ring_tree_crossover", {1: "if not ring_fixed > tree_fixed:\n    return None\n"
                                        f"return {CROSS}"}, "an if over several lines"),
    Shortcut("bus_bandwidth", {1: "1 - 1 / n"}, "expanded"),
    Shortcut("bus_bandwidth", {1: "counts(allreduce_time_ring, 1.0, n)[1] / 2"},
             "half the all-reduce's"),
    Shortcut("fit_alpha_beta", {1: "t ** -1"}, "a power"),
    Shortcut("fit_alpha_beta", {1: "np.reciprocal(t)"}, "numpy's reciprocal"),
    Shortcut("hierarchical_allreduce_time",
             {1: "across = allreduce_time_ring(nbytes / G, nodes, *inter)\n"
                 "inside = 2 * (allreduce_time_ring(nbytes, G, *intra) / 2)"},
             "the two halves added, on two lines"),
    Shortcut("hierarchical_allreduce_time",
             {1: "inside = allreduce_time_ring(nbytes, gpus_per_node, intra[0], intra[1]); "
                 "across = allreduce_time_ring(nbytes / gpus_per_node, nodes, inter[0], "
                 "inter[1])"},
             "the links unpacked"),
    Shortcut("iteration_costs", {1: "group_link(cluster, dp, tp)", 4: "stage * pp - stage"},
             "the span's factors swapped, the bubble expanded"),
    Shortcut("iteration_costs", {2: "4 * m * L / pp", 3: "group_link(cluster, 1, tp * dp * pp)",
                                 4: "stage * (pp - 1)"},
             "the all-reduces counted per stage, the pipeline's span whole, the bubble factored"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("allreduce_time_halving_doubling", 1, lambda answer: "(n - 1) / n * nbytes")
