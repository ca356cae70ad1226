"""Hidden tests of notebook 02 (cost models): the alpha-beta times, the crossover, busbw, the
fit, the topology estimates and the per-iteration analyzer, each against an oracle written
here from the formulas (never imported from solutions/), on random parameters, with the limits
a learner can reason about first: one rank costs nothing, an empty message only latency, a huge
one only bandwidth, no crossover for N <= 3.

A function that calls another learner function (the ring time, the analyzer) is tested with
the oracle in its place, so one wrong exercise does not cost points in the next.
"""

from __future__ import annotations

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


def _iteration_time(costs):
    return sum(costs[part] for part in ("compute", "bubble", "dp", "tp", "pp"))


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


def _powers_of_two(rng) -> list[int]:
    """Every power of two from 2 to 1024 (the algorithm needs one)."""
    return [2**k for k in range(1, 11)]


@exercise
def allreduce_time_halving_doubling(fn, rng):
    _check_time(fn, _halving_doubling, rng, "allreduce_time_halving_doubling", _powers_of_two)


@exercise
def ring_tree_crossover(fn, rng):
    for n in (1, 2, 3) + tuple(_ranks(rng)):
        alpha, bw = _log(rng, -7, -3), _log(rng, 8, 12)
        where = _call("ring_tree_crossover", n=n, alpha=alpha, bw=bw)
        got, want = _calling(where, fn, n, alpha, bw), _crossover(n, alpha, bw)
        if want is None:
            if got is not None and got != float("inf"):
                raise AssertionError(f"{where}: returned {got!r}, expected None: with {n} "
                                     "rank(s) the ring takes no more steps than the tree and "
                                     "sends less, so it is never slower")
            continue
        if got is None:
            raise AssertionError(f"{where}: returned None, but the tree is faster for small "
                                 f"messages: expected a crossover at {want:.6g} bytes")
        check_close(got, want, where, "the crossover (bytes)")


@exercise
def bus_bandwidth(fn, rng):
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
            check_close(out[1], algbw * factor(n), where, "busbw (bytes/s)")


@exercise
def fit_alpha_beta(fn, rng):
    for n in (2, 3, 4, 5, 6, 7, 8):
        alpha, beta = _log(rng, -7, -2), _log(rng, -12, -8)
        count = int(rng.integers(8, 31))
        sizes = np.logspace(rng.uniform(0, 2), rng.uniform(6, 9), count).round()
        seconds = [_ring(m, n, alpha, 1 / beta) for m in sizes]
        where = (f"fit_alpha_beta on {count} exact ring times, n={n}, from "
                 f"{sizes[0]:.4g} to {sizes[-1]:.4g} bytes, true alpha={alpha:.4g} s, "
                 f"beta={beta:.4g} s/byte")
        out = _calling(where, fn, sizes.tolist(), seconds, n)
        if not isinstance(out, list | tuple) or len(out) != 2:
            raise AssertionError(f"{where}: returned {out!r}, expected (alpha, beta)")
        check_close(out[0], alpha, where, "alpha", rtol=1e-6, atol=0)
        check_close(out[1], beta, where, "beta", rtol=1e-6, atol=0)


# ---------------------------------------------------------------- two kinds of links


def _topologies(rng):
    """(nodes, gpus_per_node): one node, one GPU per node, two nodes, and random shapes."""
    shapes = [(1, int(rng.integers(2, 9))), (int(rng.integers(2, 9)), 1), (1, 1),
              (2, int(rng.integers(2, 9)))]
    return shapes + [(int(rng.integers(2, 9)), int(rng.integers(2, 9))) for _ in range(8)]


def _flat(nbytes, nodes, gpus, intra, inter):
    alpha, bw = inter if nodes > 1 else intra
    return _ring(nbytes, nodes * gpus, alpha, bw)


def _hierarchical(nbytes, nodes, gpus, intra, inter):
    (alpha_in, bw_in), (alpha_out, bw_out) = intra, inter
    inside = 2 * (gpus - 1) * (alpha_in + nbytes / (gpus * bw_in))
    return inside + _ring(nbytes / gpus, nodes, alpha_out, bw_out)


def _check_topology(fn, oracle, rng, name):
    fn = with_trusted(fn, allreduce_time_ring=_ring)
    for nodes, gpus in _topologies(rng):
        intra, inter = _links(rng)
        nbytes = _log(rng, 0, 10)
        where = (f"{name}(nbytes={nbytes:.4g}, nodes={nodes}, gpus_per_node={gpus}, "
                 f"intra=({intra[0]:.3g} s, {intra[1]:.3g} B/s), "
                 f"inter=({inter[0]:.3g} s, {inter[1]:.3g} B/s))")
        check_close(_calling(where, fn, nbytes, nodes, gpus, intra, inter),
                    oracle(nbytes, nodes, gpus, intra, inter), where, "the time")


@exercise
def flat_ring_time(fn, rng):
    _check_topology(fn, _flat, rng, "flat_ring_time")


@exercise
def hierarchical_allreduce_time(fn, rng):
    _check_topology(fn, _hierarchical, rng, "hierarchical_allreduce_time")


# ---------------------------------------------------------------- the per-iteration analyzer


def _model_and_cluster(rng, micro_batch: int | None = None):
    nodes, gpus = int(rng.choice([1, 2, 4])), int(rng.choice([2, 4, 8]))
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
    for micro_batch in (1, 4, None, None):  # not all 2: that is also the bytes per value
        model, cluster = _model_and_cluster(rng, micro_batch)
        for dp, tp, pp in _layouts(model, cluster):
            where = f"iteration_costs({_describe(model, cluster)}, dp={dp}, tp={tp}, pp={pp})"
            out = _calling(where, fn, model, cluster, dp, tp, pp)
            want = _costs(model, cluster, dp, tp, pp)
            if not isinstance(out, dict) or set(want) - set(out):
                raise AssertionError(f"{where}: expected a dict with keys {sorted(want)}, "
                                     f"got {out!r}"[:300])
            for key in ("compute", "bubble", "dp", "tp", "pp"):
                check_close(out[key], want[key], where, f"{key!r} (s)")
            check_close(out["memory"], want["memory"], where, "'memory' (bytes)")
            if bool(out["fits"]) != want["fits"]:
                raise AssertionError(f"{where}: 'fits' is {out['fits']!r} for "
                                     f"{want['memory']:.4g} bytes on a GPU of "
                                     f"{cluster['memory']:.4g} bytes")


def _race(rng):
    """(model, cluster, expected layouts or None, what the case is), for cases where the
    fastest layout fits, where it does not (but another does), and where nothing fits."""
    kinds = ["all fit", "fastest does not fit", "none fits", "random memory"]
    for kind in kinds * 2:
        for _ in range(100):
            model, cluster = _model_and_cluster(rng)
            table = {lay: _costs(model, {**cluster, "memory": float("inf")}, *lay)
                     for lay in _layouts(model, cluster)}
            fastest = min(table, key=lambda lay: _iteration_time(table[lay]))
            memories = sorted(c["memory"] for c in table.values())
            capacity = {"all fit": 2 * memories[-1], "none fits": memories[0] / 2,
                        "fastest does not fit": table[fastest]["memory"] * (1 - 1e-9),
                        "random memory": rng.uniform(memories[0] / 2, 2 * memories[-1])}[kind]
            fitting = {lay: _iteration_time(c) for lay, c in table.items()
                       if c["memory"] <= capacity}
            if len(table) >= 3 and (fitting or kind != "fastest does not fit"):
                break  # else the fastest is also the smallest: not this kind of case
        best = min(fitting.values()) if fitting else None
        expected = None if best is None else sorted(
            lay for lay, t in fitting.items() if t <= best * (1 + 1e-12))
        yield model, {**cluster, "memory": capacity}, expected, kind


@exercise
def cheapest_layout(fn, rng):
    fn = with_trusted(fn, iteration_costs=_costs, layouts=_layouts, iteration_time=_iteration_time)
    for model, cluster, expected, kind in _race(rng):
        where = (f"cheapest_layout({_describe(model, cluster)}, "
                 f"{cluster['memory']:.4g} bytes per GPU) ({kind})")
        out = _calling(where, fn, model, cluster)
        if expected is None:
            if out is not None:
                raise AssertionError(f"{where}: returned {out!r}, expected None: no layout "
                                     "fits in memory")
            continue
        try:
            got = tuple(int(x) for x in out)
        except (TypeError, ValueError):
            raise AssertionError(f"{where}: returned {out!r}, expected a (dp, tp, pp) "
                                 f"such as {expected[0]}") from None
        if got not in expected:
            table = _costs(model, cluster, *expected[0])
            raise AssertionError(f"{where}: returned {got}, expected {expected[0]}: the fastest "
                                 f"layout that fits ({_iteration_time(table):.4g} s per "
                                 "iteration)")
