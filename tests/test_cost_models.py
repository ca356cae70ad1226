"""Notebook 02 (cost models): what is particular to it: the seed's numbers, the crossover, the
notebook's checks and pictures, the measured sweep, the judge with its oracles. (What every
exercise promises, from its markers: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_cost_models.py -q   (about 15 s on 2 cores)
"""

import math
import warnings

import matplotlib
import numpy as np
import pytest

from autograder import grade_cell, reference

matplotlib.use("Agg")

from notebook_testing import (  # noqa: F401 (stop_ranks: a fixture)
    Notebook,
    assess,
    fails,
    released_earns_nothing,
    stop_ranks,
)

ASSIGNMENT = "02_cost_models"
nb = Notebook(ASSIGNMENT)
NAMES = ["chain_best_pieces", "allreduce_time_halving_doubling",
         "ring_tree_crossover", "bus_bandwidth", "fit_alpha_beta",
         "hierarchical_allreduce_time", "iteration_costs"]


# ---------------------------------------------------------------- wrong blanks fail


def test_a_wrong_ring_costs_no_points_in_the_exercises_that_use_it():
    """With a wrong allreduce_time_ring, allreduce_time_tree and counts in the notebook, do the
    exercises that call them (the crossover, busbw, the fit, the hierarchy, the analyzer) still
    pass?"""
    for name in ("ring_tree_crossover", "bus_bandwidth", "fit_alpha_beta",
                 "hierarchical_allreduce_time", "iteration_costs"):
        fn = reference.reference(name)
        broken = {"allreduce_time_ring": lambda nbytes, n, alpha, bw: 1.0,
                  "allreduce_time_tree": lambda nbytes, n, alpha, bw: 2.0,
                  "counts": lambda f, nbytes, n: (3.0, 4.0)}
        patched = type(fn)(fn.__code__, {**fn.__globals__, **broken}, fn.__name__)
        assert fails(name, patched) == ""


def test_the_released_blanks_earn_nothing_and_say_so():
    """Graded with every blank still `_____`, does each function earn 0 and say which blanks
    are not filled yet, instead of crashing?"""
    for name in NAMES:
        released_earns_nothing(nb, name)


# ---------------------------------------------------------------- the model's facts


def test_seed_example_numbers():
    """Do the reference formulas give the course notes' example (1 MiB, 8 ranks, 10 GB/s,
    1 µs): ring 197.5 µs, tree 635.1 µs, and a crossover near 18.8 kB?"""
    ring, tree = reference.reference("allreduce_time_ring"), reference.reference(
        "allreduce_time_tree")
    assert math.isclose(ring(2**20, 8, 1e-6, 1e10), 197.5008e-6, rel_tol=1e-9)
    assert math.isclose(tree(2**20, 8, 1e-6, 1e10), 635.1456e-6, rel_tol=1e-9)
    cross = reference.reference("ring_tree_crossover")(8, 1e-6, 1e10)
    assert math.isclose(cross, 8e-6 / 4.25e-10, rel_tol=1e-12)


@pytest.mark.parametrize(("n", "nbytes", "alpha", "bw"),
                         [(2, 2**20, 1e-6, 1e10), (3, 2**16, 1e-6, 1e10), (8, 2**20, 1e-6, 1e10),
                          (8, 2**26, 1e-5, 1e9), (64, 2**26, 1e-6, 1e10), (5, 1e4, 1e-4, 1e8)])
def test_the_best_number_of_pieces_is_the_fastest_of_a_scan(n, nbytes, alpha, bw):
    """Is the reference's best number of pieces the fastest of every count up to 20000 (the
    chain's time, a convex function of k, has no other minimum)?"""
    chain = reference.module(ASSIGNMENT).allreduce_time_chain
    best = reference.reference("chain_best_pieces")(nbytes, n, alpha, bw)
    scan = min(range(1, 20001), key=lambda k: chain(nbytes, n, alpha, bw, k))
    assert best < 20000
    assert math.isclose(chain(nbytes, n, alpha, bw, best), chain(nbytes, n, alpha, bw, scan),
                        rel_tol=1e-12)


def test_the_two_node_links_of_the_analyzer():
    """On 2 nodes of 4 GPUs (Megatron's order), does the reference put a DP group of 4 with
    TP 2 on the slow link, and a pipeline of 4 stages with TP 2 on the slow link although each
    pair of neighbouring stages shares a node?"""
    costs = reference.reference("iteration_costs")
    model = {"layers": 8, "hidden": 1024, "seq": 1024, "global_batch": 16, "micro_batch": 1,
             "params": 12 * 8 * 1024**2}
    slow_link = {"nodes": 2, "gpus_per_node": 4, "intra": (3e-6, 3e11), "inter": (1e-5, 5e10),
                 "memory": 8e10, "flops": 4e14}
    fast_link = {**slow_link, "inter": slow_link["intra"]}
    for layout, crosses in (((4, 2, 1), "dp"), ((1, 2, 4), "pp"), ((2, 2, 2), "pp")):
        slow, fast = costs(model, slow_link, *layout), costs(model, fast_link, *layout)
        assert [k for k in ("dp", "tp", "pp") if slow[k] != fast[k]] == [crosses]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_crossover_for_three_ranks_or_fewer(n):
    """Is the ring never slower than the tree for N <= 3, at any size?"""
    ring, tree = reference.reference("allreduce_time_ring"), reference.reference(
        "allreduce_time_tree")
    assert reference.reference("ring_tree_crossover")(n, 1e-5, 1e9) is None
    for size in (0.0, 1.0, 1e3, 1e9):
        assert ring(size, n, 1e-5, 1e9) <= tree(size, n, 1e-5, 1e9)


def test_does_a_tree_with_one_rank_cost_nothing():
    """Does an all-reduce over one rank cost nothing, by any algorithm and topology?"""
    for name in ("allreduce_time_ring", "allreduce_time_tree",
                 "allreduce_time_halving_doubling"):
        assert reference.reference(name)(1e9, 1, 1e-5, 1e9) == 0
    for fn in (reference.module(ASSIGNMENT).flat_ring_time,
               reference.reference("hierarchical_allreduce_time")):
        assert fn(1e9, 1, 1, (1e-6, 1e11), (1e-5, 1e10)) == 0


def test_the_numbers_the_notebook_states_about_the_hierarchy():
    """Do the prose's figures hold: on 4 nodes x 8 GPUs and 1 GB the hierarchy is 4.06x faster
    than the flat ring, its slow phase alone 10.3x, its phases inside the nodes cost more than
    the slow one, and one ring per card overtakes the hierarchy near 100 MB?"""
    module = reference.module(ASSIGNMENT)
    flat, hier = module.flat_ring_time, reference.reference("hierarchical_allreduce_time")
    intra, inter = (3e-6, 300e9), (10e-6, 50e9)  # the notebook's INTRA, INTER
    total = hier(1e9, 4, 8, intra, inter)
    slow = hier(1e9, 4, 8, (0.0, math.inf), inter)
    assert round(flat(1e9, 4, 8, intra, inter) / total, 2) == 4.06
    assert round(flat(1e9, 4, 8, intra, inter) / slow, 1) == 10.3
    assert hier(1e9, 1, 8, intra, inter) > slow
    per_card = module.flat_rings_per_card
    assert per_card(0.8e8, 4, 8, intra, inter) > hier(0.8e8, 4, 8, intra, inter)
    assert per_card(1.3e8, 4, 8, intra, inter) < hier(1.3e8, 4, 8, intra, inter)


def test_copy_bandwidth_is_a_positive_speed():
    """Does the yardstick time a real copy (a speed between 0.1 and 1000 GB/s)?"""
    from distlab.cost_models import copy_bandwidth

    assert 1e8 < copy_bandwidth(4 * 2**20, repeats=3) < 1e12


# ---------------------------------------------------------------- the notebook and pictures


def fake_measure(collectives, sizes, world_sizes=(2,), only=None):
    """Ring-model times with a little noise, in place of the ranks."""
    rng = np.random.default_rng(0)
    ring = reference.reference("allreduce_time_ring")
    return [{"name": name, "n": n, "nbytes": size,
             "seconds": ring(size, n, 1e-4 * n, 2e9) * rng.uniform(0.9, 1.1)}
            for n in world_sizes for name in collectives
            if n in (only or {}).get(name, world_sizes) for size in sizes]


def test_visible_checks_pass_on_the_reference(monkeypatch, capsys):
    """Run top to bottom (graded cells left out, the measurement faked), does every check cell
    of the solved notebook pass and print its ✓, writing no warnings?"""
    from autograder import solved
    from distlab import cost_models as cost

    monkeypatch.setattr(cost.plt, "show", lambda *a, **k: cost.plt.close("all"))
    monkeypatch.setattr(cost, "measure", fake_measure)
    namespace = {"__name__": "__main__"}
    nb = solved.load(ASSIGNMENT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cell in nb.cells:
            if cell.cell_type == "code" and not cell.metadata["nbgrader"].get("grade"):
                exec(compile(cell.source, f"<{cell.id}>", "exec"), namespace)
    out = capsys.readouterr().out
    checks = [c for c in nb.cells if c.cell_type == "code" and "print(\"✓" in c.source]
    assert out.count("✓") == len(checks) == len(NAMES)
    assert "cheapest that fits: dp=8 tp=1 pp=4" in out


def test_pictures_draw_the_functions_they_are_given(monkeypatch):
    """Do the pictures draw whatever functions they are handed (here the references), with a
    crossover line where there is one, without warnings?"""
    from distlab import cost_models as cost

    ref = reference.reference
    described = []
    monkeypatch.setattr(cost, "_show", lambda fig, text: (described.append(text),
                                                           cost.plt.close(fig)))
    curves = {"ring": ref("allreduce_time_ring"), "tree": ref("allreduce_time_tree")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost.show_message_cost(5e-6, 1e10)
        cost.show_allreduce_costs(curves, 1e-6, 1e10, n=8,
                                  crossover=ref("ring_tree_crossover"))
        cost.show_allreduce_costs(curves, 1e-6, 1e10, n=3,
                                  crossover=ref("ring_tree_crossover"))
        flat = reference.module(ASSIGNMENT).flat_ring_time
        cost.show_topology({"flat ring": flat}, 2, 4, (1e-6, 1e11), (1e-5, 1e10))
        records = fake_measure({"ring": None}, [4**k for k in range(1, 8)])
        cost.show_fit(records, {("ring", 2): (2e-4, 5e-10)}, ref("allreduce_time_ring"),
                      held_out=[16, 256])
    cost.show_iteration_costs([("dp1 tp1 pp1", {"compute": 1.0, "bubble": 0.0, "dp": 0.0,
                                                 "tp": 0.0, "pp": 0.0, "memory": 1.0,
                                                 "fits": True})], 2.0, name_best=False)
    assert "above 18.4 KiB" in described[1]
    assert "fastest" not in described[5], "the explorer must leave the search to the learner"
    assert "no crossover" in described[2]
    assert "held-out sizes: ring on 2 ranks" in described[4]


def test_iteration_bars_mark_layouts_that_do_not_fit():
    """Does the stacked bar chart stack the five parts to the iteration time, and say which
    layout is the fastest that fits?"""
    from distlab import cost_models as cost

    costs = reference.reference("iteration_costs")
    model = {"layers": 8, "hidden": 1024, "seq": 1024, "global_batch": 16, "micro_batch": 1,
             "params": 12 * 8 * 1024**2}
    cluster = {"nodes": 1, "gpus_per_node": 8, "intra": (3e-6, 3e11), "inter": (1e-5, 5e10),
               "memory": 0.5e9, "flops": 4e14}
    layouts = reference.module(ASSIGNMENT).layouts(model, cluster)
    rows = [(f"{lay}", costs(model, cluster, *lay)) for lay in layouts]
    fig, totals = cost.draw_iteration_costs(rows, cluster["memory"])
    cost.plt.close(fig)
    total = reference.module(ASSIGNMENT).iteration_time
    assert np.allclose(totals, [total(c) for _, c in rows])
    assert not all(c["fits"] for _, c in rows) and any(c["fits"] for _, c in rows)


def test_measure_times_real_collectives_on_two_ranks():
    """Does the measurement harness time dist.all_reduce and the notebook's send/recv ring on
    2 gloo ranks, giving positive times that grow with the size?"""
    import distlab
    from distlab import cost_models as cost

    ring = reference.module(ASSIGNMENT).ring_all_reduce
    try:
        records = cost.measure({"all_reduce": None, "ring": ring}, [4, 16 * 2**20])
    finally:
        distlab.shutdown()
    assert [(r["name"], r["nbytes"]) for r in records] == [
        ("all_reduce", 4), ("all_reduce", 16 * 2**20), ("ring", 4), ("ring", 16 * 2**20)]
    assert all(r["seconds"] > 0 for r in records)
    assert records[1]["seconds"] > records[0]["seconds"]
    assert records[3]["seconds"] > records[2]["seconds"]


def test_the_notebook_ring_sums_like_all_reduce():
    """Does the send/recv ring the notebook measures compute the same sum as dist.all_reduce,
    for lengths shorter than, equal to and longer than the world size?"""
    import torch

    import distlab

    ring = reference.module(ASSIGNMENT).ring_all_reduce

    def compare(rank, world_size, ring):
        out = []
        for length in (2, 3, 11):
            x = torch.arange(length, dtype=torch.float64) * (rank + 1)
            out.append(torch.equal(ring(x.clone()), x / (rank + 1) * 6))
        return out

    try:
        assert distlab.run(compare, ring, world_size=3) == [[True] * 3] * 3
    finally:
        distlab.shutdown()


def test_the_judge_grades_outside_the_kernel_with_the_oracles_patched_in(monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, the oracles put
    in place of the notebook's other functions there), does a wrong ring cost nothing in
    iteration_costs while one wrong blank of it costs one point and is named?"""
    import sys

    from autograder import judge

    monkeypatch.setattr(judge, "runner_command", lambda *_: [sys.executable, "-m",
                                                                 "autograder.judge.runner"])

    def edit(code):
        code = code.replace("steps = 2 * (n - 1)  # the reduce-scatter's",
                            "steps = 3 * n  # the reduce-scatter's")  # a wrong ring
        return code.replace("bubble = (pp - 1) * stage", "bubble = pp * stage")

    verdicts = grade_cell.verdicts(nb.solved_cells(edit), [("iteration_costs", None),
                                                        ("hierarchical_allreduce_time", None)],
                              "test")
    (earned, possible, report), (hier_earned, hier_possible, _) = verdicts
    assert earned == possible - 1 and "looks wrong: [4]" in "\n".join(report), report
    assert hier_earned == hier_possible == 1
