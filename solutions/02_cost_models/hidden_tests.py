"""Hidden tests of notebook 02 (cost models): the alpha-beta times (the ring, the tree and the
pipelined chain are given in the notebook and keep their tests for the drills; the chain's best
number of pieces and halving-doubling are asked), the crossover, busbw, the fit, the
hierarchical estimate and the per-iteration analyzer, each against an oracle written
here from the formulas (never imported from solutions/), on random parameters, with the limits
a learner can reason about first: one rank costs nothing, an empty message only latency, a huge
one only bandwidth, no crossover for N <= 3.

The best number of pieces is judged by the time it gives, against the oracle's, on messages
whose best count runs to millions of pieces: a scan of the counts cannot reach it in time, and
one that stops early loses time the test sees. The analyzer's links are tested on clusters of
several nodes with every layout, so that a group placed at the wrong stride crosses a node
boundary the right one does not.

A function that calls another learner function (the ring and tree times, the notebook's
`counts`) is tested with the oracle in its place, so one wrong exercise does not cost points in
the next. The fit is tested on exact ring times (any weighting recovers alpha and beta) and on
noisy ones, where only relative errors give the oracle's answer.
"""

from __future__ import annotations

import math

import numpy as np

from autograder.exercises import exercise
from autograder.exercises.checks import check_close, with_trusted

# ---------------------------------------------------------------- oracles


def _ring(nbytes, n, alpha, bw):
    """Ring all-reduce: a reduce-scatter and an all-gather of n-1 steps of nbytes/n each."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) * nbytes / (n * bw)


def _tree(nbytes, n, alpha, bw):
    """Binomial tree: ceil(log2 n) steps up and as many down, the whole message each."""
    depth = (n - 1).bit_length()
    return 2 * depth * alpha + 2 * depth * nbytes / bw


def _counts(f, nbytes, n):
    """The notebook's `counts`: (steps, bytes one rank sends) of the cost function f."""
    return f(nbytes, n, 1.0, float("inf")), f(nbytes, n, 0.0, 1.0)


def _chain(nbytes, n, alpha, bw, pieces):
    """A pipelined reduce along n ranks, then a pipelined broadcast back: n - 1 steps to fill
    the line, pieces - 1 more for the rest, twice; each step one piece."""
    if n == 1:
        return 0.0
    return 2 * (n + pieces - 2) * (alpha + nbytes / pieces / bw)


def _best_pieces(nbytes, n, alpha, bw):
    """The whole number of pieces where the chain's time, 2 (n - 2) alpha + 2 M / B + 2 k alpha
    + 2 (n - 2) M / (k B), stops falling: k* = sqrt((n - 2) M / (alpha B)), floor or ceiling."""
    if n == 1:
        return 1
    best = math.sqrt((n - 2) * nbytes / (alpha * bw))
    around = {max(1, math.floor(best)), max(1, math.ceil(best))}
    return min(around, key=lambda k: _chain(nbytes, n, alpha, bw, k))


def _one(nbytes, n, alpha, bw):
    return 2 * (n - 1) * (alpha + nbytes / bw)


def _halving_doubling(nbytes, n, alpha, bw):
    """Rabenseifner: log2 n exchanges of halves, quarters, ... (reduce-scatter by recursive
    halving), then the same back (all-gather by recursive doubling); a rank sends
    M/2 + M/4 + ... + M/n = (n-1)/n M per phase."""
    rounds = n.bit_length() - 1
    return 2 * rounds * alpha + 2 * (n - 1) / n * nbytes / bw


def _crossover(n, alpha, bw):
    depth = (n - 1).bit_length()
    if n - 1 <= depth:
        return None
    return alpha * bw * (n - 1 - depth) / (depth - (n - 1) / n)


FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}


def _group_link(cluster, stride, size):
    return cluster["intra"] if stride * size <= cluster["gpus_per_node"] else cluster["inter"]


def _costs(model, cluster, dp, tp, pp):
    """The analyzer, from its definition: a GPU holds 1/(tp*pp) of the parameters, ..."""
    layers, h, s, b = model["layers"], model["hidden"], model["seq"], model["micro_batch"]
    m = model["global_batch"] // (dp * b)
    psi = model["params"] / (tp * pp)
    act = 2.0 * b * s * h
    alpha, bw = _group_link(cluster, tp, dp)
    dp_time = _ring(2.0 * psi, dp, alpha, bw)
    alpha, bw = _group_link(cluster, 1, tp)
    tp_time = 4 * m * layers / pp * _ring(act, tp, alpha, bw)
    alpha, bw = _group_link(cluster, tp * dp, pp)
    pp_time = 2 * m * (alpha + act / bw) if pp > 1 else 0.0
    stage = 6 * psi * b * s / cluster["flops"]
    memory = 16 * psi + min(m, pp) * layers / pp * s * b * h * (10 + 24 / tp)
    return {"compute": m * stage, "bubble": (pp - 1) * stage, "dp": dp_time, "tp": tp_time,
            "pp": pp_time, "memory": memory, "fits": memory <= cluster["memory"]}


def _layouts(model, cluster):
    gpus = cluster["nodes"] * cluster["gpus_per_node"]
    return [(gpus // (tp * pp), tp, pp) for tp in range(1, gpus + 1)
            for pp in range(1, gpus + 1) if gpus % (tp * pp) == 0
            and model["hidden"] % tp == 0 and model["layers"] % pp == 0
            and model["global_batch"] % (gpus // (tp * pp) * model["micro_batch"]) == 0]


# ---------------------------------------------------------------- random parameters


def _calling(where: str, fn, *args):
    """fn(*args); a crash becomes a failure of this case, named."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - any crash of learner code fails the case
        raise AssertionError(f"{where}: raised {type(err).__name__}: {err}".splitlines()[0]
                             ) from None


def _log(rng, low: float, high: float) -> float:
    """A random number between 10**low and 10**high, uniform in its exponent."""
    return float(10 ** rng.uniform(low, high))


def _call(name: str, **args) -> str:
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v!r}"
                      for k, v in args.items())
    return f"{name}({shown})"


def _ranks(rng) -> list[int]:
    """Rank counts: the small ones, powers of two and their neighbours, some large."""
    return [1, 2, 3, 4, 5, 7, 8, 9, 16, 17] + [int(x) for x in rng.integers(18, 1001, size=4)]


def _links(rng) -> tuple[tuple[float, float], tuple[float, float]]:
    """(intra, inter) links: inside a node always lower latency and higher bandwidth."""
    alpha_in, bw_in = _log(rng, -7, -5), _log(rng, 10.5, 12)
    return (alpha_in, bw_in), (alpha_in * _log(rng, 0.3, 1.5), bw_in / _log(rng, 0.3, 1.5))


# ---------------------------------------------------------------- the alpha-beta times


def _check_time(fn, oracle, rng, name, ranks=None):
    """One rank, then latency alone (the steps), bandwidth alone (the bytes), both, and a huge
    message. ranks(rng): the rank counts to try."""
    ranks = ranks or _ranks
    for n in (1, 1, 1):
        nbytes, alpha, bw = _log(rng, 0, 9), _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call(name, nbytes=nbytes, n=n, alpha=alpha, bw=bw)
        check_close(_calling(where, fn, nbytes, n, alpha, bw), 0.0,
                    f"{where}: one rank has nobody to talk to, so no steps", "the time", atol=1e-15)
    for n in ranks(rng):
        alpha, bw = _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call(name, nbytes=0.0, n=n, alpha=alpha, bw=bw) + " (latency only: it " \
            "counts the steps)"
        check_close(_calling(where, fn, 0.0, n, alpha, bw), oracle(0.0, n, alpha, bw), where,
                    "the time")
    for n in ranks(rng):
        nbytes, bw = _log(rng, 0, 10), _log(rng, 8, 12)
        where = _call(name, nbytes=nbytes, n=n, alpha=0.0, bw=bw) + " (bandwidth only: it " \
            "counts the bytes a rank sends)"
        check_close(_calling(where, fn, nbytes, n, 0.0, bw), oracle(nbytes, n, 0.0, bw), where,
                    "the time")
    for n in ranks(rng):
        nbytes, alpha, bw = _log(rng, 0, 10), _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call(name, nbytes=nbytes, n=n, alpha=alpha, bw=bw)
        check_close(_calling(where, fn, nbytes, n, alpha, bw), oracle(nbytes, n, alpha, bw),
                    where, "the time")
    huge = (2, 8, int(rng.integers(3, 200))) if ranks is _ranks else (2, 64, 1024)
    for n in huge:
        nbytes, alpha, bw = 1e15, _log(rng, -7, -5), _log(rng, 9, 11)
        where = _call(name, nbytes=nbytes, n=n, alpha=alpha, bw=bw) + " (a huge message: " \
            "almost all of it is the bandwidth term)"
        check_close(_calling(where, fn, nbytes, n, alpha, bw), oracle(nbytes, n, alpha, bw),
                    where, "the time", rtol=1e-6)


@exercise
def allreduce_time_ring(fn, rng):
    _check_time(fn, _ring, rng, "allreduce_time_ring")


@exercise
def allreduce_time_tree(fn, rng):
    _check_time(fn, _tree, rng, "allreduce_time_tree")


@exercise
def allreduce_time_one(fn, rng):
    _check_time(fn, _one, rng, "allreduce_time_one")


@exercise
def allreduce_time_chain(fn, rng):
    name = "allreduce_time_chain"
    cases = [(1, 1), (1, 7), (2, 1), (2, 2), (2, 9), (3, 1), (3, 4), (4, 3), (8, 1), (8, 64)]
    cases += [(int(rng.integers(2, 1001)), int(rng.integers(2, 10001))) for _ in range(6)]
    for n, pieces in cases:
        alpha, bw = _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call(name, nbytes=0.0, n=n, alpha=alpha, bw=bw, pieces=pieces) + \
            " (latency only: it counts the steps)"
        check_close(_calling(where, fn, 0.0, n, alpha, bw, pieces),
                    _chain(0.0, n, alpha, bw, pieces), where, "the time")
        nbytes = _log(rng, 0, 10)
        where = _call(name, nbytes=nbytes, n=n, alpha=alpha, bw=bw, pieces=pieces)
        check_close(_calling(where, fn, nbytes, n, alpha, bw, pieces),
                    _chain(nbytes, n, alpha, bw, pieces), where, "the time")


@exercise
def chain_best_pieces(fn, rng):
    fn = with_trusted(fn, allreduce_time_chain=_chain)
    name = "chain_best_pieces"
    cases = [(n, _log(rng, 0, 10), _log(rng, -7, -3), _log(rng, 8, 12))
             for n in (2, 2, 3, 3, 4, 5, 8, 9, 16, 17)]
    cases += [(int(rng.integers(18, 1001)), _log(rng, 3, 10), _log(rng, -7, -4),
               _log(rng, 9, 12)) for _ in range(4)]
    cases += [(n, _log(rng, 11, 12), 1e-8, _log(rng, 8, 8.5)) for n in (3, 4, 6)]  # ~1e6 pieces
    for n, nbytes, alpha, bw in cases:
        where = _call(name, nbytes=nbytes, n=n, alpha=alpha, bw=bw)
        got = _calling(where, fn, nbytes, n, alpha, bw)
        if isinstance(got, bool) or not isinstance(got, int | float | np.integer | np.floating) \
                or not float(got).is_integer() or got < 1:
            raise AssertionError(f"{where}: returned {got!r}, expected a whole number of pieces, "
                                 "at least 1")
        want = _best_pieces(nbytes, n, alpha, bw)
        mine, best = _chain(nbytes, n, alpha, bw, int(got)), _chain(nbytes, n, alpha, bw, want)
        if mine > best * (1 + 1e-12):
            raise AssertionError(f"{where}: {int(got)} pieces take {mine:.10g} s, {want} take "
                                 f"{best:.10g} s (where does the chain's time stop falling?)")
    where = _call(name, nbytes=1e6, n=1, alpha=1e-6, bw=1e10)
    got = _calling(where, fn, 1e6, 1, 1e-6, 1e10)
    if not isinstance(got, int | float | np.integer) or got < 1:
        raise AssertionError(f"{where}: returned {got!r}, expected a whole number of pieces")


def _powers_of_two(rng) -> list[int]:
    """Every power of two from 2 to 1024 (the algorithm needs one)."""
    return [2**k for k in range(1, 11)]


@exercise
def allreduce_time_halving_doubling(fn, rng):
    _check_time(fn, _halving_doubling, rng, "allreduce_time_halving_doubling", _powers_of_two)


@exercise
def ring_tree_crossover(fn, rng):
    fn = with_trusted(fn, allreduce_time_ring=_ring, allreduce_time_tree=_tree)
    for n in (1, 2, 3) + tuple(_ranks(rng)):
        alpha, bw = _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call("ring_tree_crossover", n=n, alpha=alpha, bw=bw)
        got, want = _calling(where, fn, n, alpha, bw), _crossover(n, alpha, bw)
        if want is None:
            if got is not None and got != float("inf"):
                raise AssertionError(f"{where}: returned {got!r}, expected None: with {n} "
                                     "rank(s) the ring is never slower than the tree, at any "
                                     "size (when is the ring never slower?)")
            continue
        if got is None:
            raise AssertionError(f"{where}: returned None, but the tree is faster for small "
                                 f"messages here (when is the ring never slower?)")
        check_close(got, want, where, "the crossover (bytes), where the two times are equal")


@exercise
def bus_bandwidth(fn, rng):
    fn = with_trusted(fn, allreduce_time_ring=_ring, counts=_counts)
    for collective, factor in FACTORS.items():
        for n in (1, 2, 3, 8, int(rng.integers(4, 65))):
            nbytes, seconds = _log(rng, 0, 10), _log(rng, -6, 1)
            where = _call("bus_bandwidth", nbytes=nbytes, seconds=seconds, n=n,
                          collective=collective)
            out = _calling(where, fn, nbytes, seconds, n, collective)
            if not isinstance(out, list | tuple) or len(out) != 2:
                raise AssertionError(f"{where}: returned {out!r}, expected (algbw, busbw)")
            algbw = nbytes / seconds
            check_close(out[0], algbw, where, "algbw (bytes/s)")
            check_close(out[1], algbw * factor(n), where, f"busbw (bytes/s), from the bytes a "
                        f"rank sends in a {collective}")


def _fit(sizes, seconds, n):
    """Least squares of t = S alpha + V beta, every equation divided by its time (relative
    errors)."""
    t = np.asarray(seconds, dtype=float)
    rows = np.array([[2.0 * (n - 1), 2.0 * (n - 1) / n * m] for m in sizes]) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(rows, t / t, rcond=None)
    return float(alpha), float(beta)


@exercise
def fit_alpha_beta(fn, rng):
    fn = with_trusted(fn, allreduce_time_ring=_ring, counts=_counts)
    for noise in (0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3):
        n = int(rng.integers(2, 9))
        alpha, beta = _log(rng, -7, -2), _log(rng, -12, -8)
        count = int(rng.integers(8, 31))
        sizes = np.logspace(rng.uniform(0, 2), rng.uniform(6, 9), count).round()
        seconds = np.array([_ring(m, n, alpha, 1 / beta) for m in sizes])
        seconds *= rng.uniform(1 - noise, 1 + noise, count)
        kind = "exact ring times" if not noise else f"ring times with ±{noise:.0%} noise"
        where = (f"fit_alpha_beta on {count} {kind}, n={n}, from {sizes[0]:.4g} to "
                 f"{sizes[-1]:.4g} bytes, true alpha={alpha:.4g} s, beta={beta:.4g} s/byte")
        out = _calling(where, fn, sizes.tolist(), seconds.tolist(), n)
        if not isinstance(out, list | tuple) or len(out) != 2:
            raise AssertionError(f"{where}: returned {out!r}, expected (alpha, beta)")
        if not noise:
            check_close(out[0], alpha, where, "alpha", rtol=1e-6, atol=0)
            check_close(out[1], beta, where, "beta", rtol=1e-6, atol=0)
            continue
        want = _fit(sizes, seconds, n)
        what = ("{} of the fit where every size counts the same (each measurement's error "
                "counted relative to its time)")
        check_close(out[0], want[0], where, what.format("alpha"), rtol=1e-6, atol=0)
        check_close(out[1], want[1], where, what.format("beta"), rtol=1e-6, atol=0)


# ---------------------------------------------------------------- two kinds of links


def _topologies(rng):
    """(nodes, gpus_per_node): one node, one GPU per node, two nodes, and random shapes."""
    shapes = [(1, int(rng.integers(2, 9))), (int(rng.integers(2, 9)), 1), (1, 1),
              (2, int(rng.integers(2, 9)))]
    return shapes + [(int(rng.integers(2, 9)), int(rng.integers(2, 9))) for _ in range(8)]


def _hierarchical(nbytes, nodes, gpus, intra, inter):
    """A ring reduce-scatter and all-gather inside the node (n-1 steps of nbytes/n each), and
    between them a ring over the nodes of the 1/gpus of the data each GPU is left with."""
    (alpha_in, bw_in), (alpha_out, bw_out) = intra, inter
    inside = 2 * (gpus - 1) * (alpha_in + nbytes / (gpus * bw_in))
    return inside + _ring(nbytes / gpus, nodes, alpha_out, bw_out)


def _check_topology(fn, oracle, rng, name):
    """Each topology three times: free links between nodes (phases 1 and 3 alone), free links
    inside the nodes (phase 2 alone), then both links as drawn."""
    fn = with_trusted(fn, allreduce_time_ring=_ring)
    free = (0.0, float("inf"))
    for nodes, gpus in _topologies(rng):
        drawn_intra, drawn_inter = _links(rng)
        nbytes = _log(rng, 0, 10)
        for intra, inter, what in (
                (drawn_intra, free, "the time with free links between nodes (the phases "
                                    "inside the nodes alone)"),
                (free, drawn_inter, "the time with free links inside the nodes (the phase "
                                    "across them alone: what does each GPU carry across?)"),
                (drawn_intra, drawn_inter, "the time")):
            where = (f"{name}(nbytes={nbytes:.4g}, nodes={nodes}, gpus_per_node={gpus}, "
                     f"intra=({intra[0]:.3g} s, {intra[1]:.3g} B/s), "
                     f"inter=({inter[0]:.3g} s, {inter[1]:.3g} B/s))")
            check_close(_calling(where, fn, nbytes, nodes, gpus, intra, inter),
                        oracle(nbytes, nodes, gpus, intra, inter), where, what)


@exercise
def hierarchical_allreduce_time(fn, rng):
    _check_topology(fn, _hierarchical, rng, "hierarchical_allreduce_time")


# ---------------------------------------------------------------- the per-iteration analyzer


def _model_and_cluster(rng, micro_batch: int | None = None, nodes: int | None = None):
    nodes, gpus = nodes or int(rng.choice([1, 2, 4])), int(rng.choice([2, 4, 8]))
    intra, inter = _links(rng)
    cluster = {"nodes": nodes, "gpus_per_node": gpus, "intra": intra, "inter": inter,
               "memory": _log(rng, 9.5, 11.5), "flops": _log(rng, 13, 15)}
    layers, hidden = int(rng.choice([4, 8, 12, 16, 32])), int(rng.choice([512, 1024, 4096]))
    b = micro_batch or int(rng.choice([1, 2, 4]))
    model = {"layers": layers, "hidden": hidden, "seq": int(rng.choice([256, 1024, 4096])),
             "micro_batch": b, "global_batch": nodes * gpus * b * int(rng.choice([1, 2, 8])),
             "params": 12 * layers * hidden**2 * rng.uniform(1.0, 1.3)}  # + embeddings
    return model, cluster


def _describe(model, cluster) -> str:
    return (f"layers={model['layers']}, hidden={model['hidden']}, seq={model['seq']}, "
            f"micro_batch={model['micro_batch']}, global_batch={model['global_batch']}, "
            f"params={model['params']:.4g} on {cluster['nodes']} node(s) x "
            f"{cluster['gpus_per_node']} GPUs")


@exercise
def iteration_costs(fn, rng):
    fn = with_trusted(fn, allreduce_time_ring=_ring, group_link=_group_link)
    small = {"layers": 8, "hidden": 1024, "seq": 256, "micro_batch": 1, "global_batch": 64,
             "params": 12 * 8 * 1024**2 * 1.1}
    fixed = [(small, {"nodes": nodes, "gpus_per_node": gpus, "intra": intra, "inter": inter,
                      "memory": 1e11, "flops": 1e14})
             for (nodes, gpus), (intra, inter) in (((1, 8), _links(rng)), ((2, 4), _links(rng)),
                                                   ((4, 2), _links(rng)), ((2, 8), _links(rng)))]
    drawn = [_model_and_cluster(rng, micro_batch, nodes)  # not all 2: also the bytes per value
             for micro_batch, nodes in ((1, 2), (4, 4), (None, 1), (None, None))]
    for model, cluster in fixed + drawn:
        for dp, tp, pp in _layouts(model, cluster):
            where = f"iteration_costs({_describe(model, cluster)}, dp={dp}, tp={tp}, pp={pp})"
            out = _calling(where, fn, model, cluster, dp, tp, pp)
            want = _costs(model, cluster, dp, tp, pp)
            if not isinstance(out, dict) or set(want) - set(out):
                raise AssertionError(f"{where}: expected a dict with keys {sorted(want)}, "
                                     f"got {out!r}"[:300])
            for key, what in (("compute", ""), ("bubble", ""),
                              ("dp", ": the DP all-reduce, on the link its group's GPUs share"),
                              ("tp", ""),
                              ("pp", ": the stage boundaries, on the link of the slowest")):
                check_close(out[key], want[key], where, f"{key!r} (s){what}")
            check_close(out["memory"], want["memory"], where, "'memory' (bytes)")
            if bool(out["fits"]) != want["fits"]:
                raise AssertionError(f"{where}: 'fits' is {out['fits']!r} for "
                                     f"{want['memory']:.4g} bytes on a GPU of "
                                     f"{cluster['memory']:.4g} bytes")
