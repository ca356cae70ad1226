"""Shortcuts through notebook 02's blanks (cost models), and honest answers written otherwise.

Notebook 02 is closed-form formulas, so a shortcut is a formula that matches the visible checks
(8 ranks, 8 GPUs a node, 2 measured ranks, pp = 2) and nothing else, the formula of another
algorithm (the ring's steps in a tree, recursive doubling's bytes in Rabenseifner's), or n where
n - 1 belongs. The hidden tests try many rank counts, links and sizes, latency alone (the steps)
and bandwidth alone (the bytes), so each fails and says which.

Blank numbers as the released cells number them: allreduce_time_ring 1 (steps), 2 (bytes per
step); allreduce_time_tree 1 (depth), 2 (steps); allreduce_time_halving_doubling 1 (steps),
2 (bytes sent); ring_tree_crossover 1 (extra latency), 2 (extra per byte); bus_bandwidth
1 (all-reduce factor), 2 (all-gather factor); fit_alpha_beta 1 (alpha's column), 2 (beta's);
flat_ring_time 1 (the link); hierarchical_allreduce_time 1 (phase 1), 2 (the shard);
iteration_costs 1 (parameters per GPU), 2 (TP all-reduces), 3 (PP messages), 4 (bubble);
cheapest_layout 1 (who stays in the race).
"""

from shortcuts import Shortcut

SHORTCUTS = [
    Shortcut("allreduce_time_ring", {2: "nbytes / 8"}, "the chunk of the 8-rank check only",
             "bytes"),
    Shortcut("allreduce_time_ring", {1: "2 * n"}, "n steps a phase, not n - 1", "steps"),
    Shortcut("allreduce_time_tree", {1: "int(math.log2(n))"},
             "a depth right for powers of two only", "steps"),
    Shortcut("allreduce_time_tree", {1: "n - 1"}, "a chain, the ring's step count", "steps"),
    Shortcut("allreduce_time_halving_doubling", {1: "2 * (n - 1)"}, "the ring's steps",
             "steps"),
    Shortcut("allreduce_time_halving_doubling", {2: "rounds * nbytes"},
             "recursive doubling's whole messages", "bytes"),
    Shortcut("allreduce_time_halving_doubling", {2: "2 * nbytes"},
             "the large-N limit of the bytes", "bytes"),
    Shortcut("ring_tree_crossover", {1: "2 * (n - depth) * alpha"},
             "n steps a phase, not n - 1", "crossover"),
    Shortcut("ring_tree_crossover", {2: "2 * (depth - 1) / bw"},
             "the ring's bytes as if N were large", "crossover"),
    Shortcut("bus_bandwidth", {1: "2", 2: "1"}, "the large-N factors", "busbw"),
    Shortcut("bus_bandwidth", {2: "1 / 2"}, "the all-gather factor of 2 ranks", "busbw"),
    Shortcut("fit_alpha_beta", {1: "np.full_like(M, 2)", 2: "M"},
             "the columns of the 2 ranks measured", "alpha"),
    Shortcut("fit_alpha_beta", {2: "M"}, "beta's column of 2 ranks", "beta"),
    Shortcut("flat_ring_time", {1: "inter"}, "the slow link even inside one node", "nodes=1"),
    Shortcut("flat_ring_time", {1: "intra"}, "the fast link everywhere", "the time"),
    Shortcut("hierarchical_allreduce_time", {2: "nbytes / 8"}, "the check's 8 GPUs a node",
             "gpus_per_node"),
    Shortcut("hierarchical_allreduce_time", {1: "(G - 1) * (alpha_in + nbytes / 8 / bw_in)"},
             "phase 1 with the check's 8 GPUs", "gpus_per_node"),
    Shortcut("iteration_costs", {4: "stage"}, "the bubble of 2 stages only", "bubble"),
    Shortcut("iteration_costs", {1: 'model["params"] / 4'},
             "the parameters of the check's tp = pp = 2", "tp="),
    Shortcut("cheapest_layout", {1: "True"}, "every layout races, fitting or not", "fits"),
]

HONEST = [
    Shortcut("allreduce_time_ring", {1: "(n - 1) * 2", 2: "nbytes * n ** -1"},
             "the same steps and chunk, reordered"),
    Shortcut("allreduce_time_tree", {1: "(n - 1).bit_length()", 2: "depth * 2"},
             "the depth from the bits of n - 1"),
    Shortcut("allreduce_time_tree", {1: "0 if n == 1 else math.ceil(math.log2(n))"},
             "one rank said apart"),
    Shortcut("allreduce_time_halving_doubling", {1: "2 * math.log2(n)",
                                                 2: "2 * nbytes * (1 - 1 / n)"},
             "log2 and 1 - 1/n"),
    Shortcut("allreduce_time_halving_doubling",
             {2: "2 * sum(nbytes / 2**k for k in range(1, rounds + 1))"},
             "the halves, quarters, ... added up"),
    Shortcut("ring_tree_crossover", {1: "(2 * n - 2 - 2 * depth) * alpha",
                                     2: "(2 * depth - 2 + 2 / n) / bw"}, "expanded"),
    Shortcut("bus_bandwidth", {1: "(2 * n - 2) / n", 2: "1 - 1 / n"}, "expanded"),
    Shortcut("fit_alpha_beta", {1: "2 * (n - 1) + 0 * M", 2: "M * (2 - 2 / n)"},
             "a broadcast column and an expanded factor"),
    Shortcut("flat_ring_time", {1: "intra if nodes == 1 else inter"}, "the test turned round"),
    Shortcut("hierarchical_allreduce_time", {2: "nbytes * (1 / G)"}, "times 1/G"),
    Shortcut("iteration_costs", {1: 'model["params"] / tp / pp', 4: "stage * pp - stage"},
             "divided twice, and expanded"),
    Shortcut("cheapest_layout", {1: 'not costs["memory"] > cluster["memory"]'},
             "the memory compared directly"),
    # answers to two blanks at once (once tests/test_cost_models.py's RIGHT list)
    Shortcut("allreduce_time_ring", {1: "2 * n - 2", 2: "nbytes * (1 / n)"}, "times 1/n"),
    Shortcut("allreduce_time_tree", {1: "(n - 1).bit_length()", 2: "depth + depth"},
             "the depth added twice"),
    Shortcut("allreduce_time_halving_doubling", {1: "rounds + rounds",
                                                 2: "2 * (nbytes - nbytes / n)"},
             "the rounds added twice"),
    Shortcut("ring_tree_crossover", {1: "(n - 1 - depth) * alpha",
                                     2: "(depth - (n - 1) / n) / bw"},
             "both sides halved: the same crossing"),
    Shortcut("ring_tree_crossover", {1: "(2 * (n - 1) - 2 * depth) * alpha",
                                     2: "(2 * depth - 2 * (n - 1) / n) * (1 / bw)"},
             "the difference term by term"),
    Shortcut("bus_bandwidth", {1: "2 * (1 - 1 / n)", 2: "1 - 1 / n"}, "factored"),
    Shortcut("fit_alpha_beta", {1: "np.ones_like(M) * (2 * n - 2)", 2: "(2 * (n - 1) / n) * M"},
             "np.ones_like for the column"),
    Shortcut("iteration_costs", {2: "4 * m * L / pp", 4: "stage * (pp - 1)"},
             "the all-reduces counted per stage, the bubble factored"),
]
