"""Hidden tests of notebook 04 (tensor parallelism): every learner function runs on 1, 2 and 4
real gloo ranks, on random shapes in float32 and float64, and what the ranks return is compared
here, outside the ranks, with nn.Linear's formula, a plain sum, or autograd on one process.

As in notebook 01, one module-level harness runs on the ranks (it travels by reference, the
learner's function by value), in its own process group with a short timeout: a collective that
never completes fails its case in seconds. The layers built on f and g (tp_mlp, tp_attention)
are tested with a correct f and g patched in, so a mistake in megatron_f_g costs its own points
only.
"""

from __future__ import annotations

import types

from autograder.exercises import exercise
from autograder.exercises.checks import case as _case
from autograder.exercises.checks import (
    check_tensor,
    first_rank_failure,
    on_ranks,
    rank_failure,
    short_group,
)

WORLD_SIZES = (1, 2, 4)


# ---------------------------------------------------------------- on the ranks


def _plain(value):
    """What a rank sends back: tensors detached (and copied), containers as lists."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "detach"):
        return value.detach().clone()
    return value


def _run_call(fn, rank, n, case):
    """fn(rank, n, *args) on copies of the case's tensors."""
    args = [a.clone() if hasattr(a, "clone") else a for a in case["args"]]
    return fn(rank, n, *args)


def _run_f_g(fn, rank, n, case):
    """f and g of fn() on this rank's x, backward this rank's gradient: (f(x), dx through f,
    g(x), dx through g)."""
    f, g = fn()
    out = []
    for op in (f, g):
        x = case["x"][rank].detach().clone().requires_grad_()
        y = op.apply(x)
        y.backward(case["grad"][rank].clone())
        out += [y, x.grad]
    return out


def _run_layer(fn, rank, n, case):
    """The layer's forward on leaves that require grad, backward grad_y: [y, every grad]."""
    leaves = [t.detach().clone().requires_grad_() for t in case["tensors"]]
    y = fn(rank, n, *leaves, **case.get("kwargs", {}))
    y.backward(case["grad"].clone())
    return [y] + [leaf.grad for leaf in leaves]


def _run_sp(fn, rank, n, case):
    return fn(rank, n, case["t"][rank].clone())


_RUNNERS = {"call": _run_call, "f_g": _run_f_g, "layer": _run_layer, "sp": _run_sp}


def _harness(rank, world_size, fn, kind, cases):
    """Each case through _RUNNERS[kind]. Returns, per case, ("ok", value) or (kind, text) as in
    checks.rank_failure; a case marked "refuse" that raises ValueError is ("ok", "ValueError").
    Stops at the first failure. Nothing is judged here: under the judge this runs next to the
    learner's code."""
    results = []
    with short_group(rank, world_size):
        try:
            for case in cases:
                try:
                    value = _RUNNERS[kind](fn, rank, world_size, case)
                except ValueError as err:
                    if case.get("refuse"):
                        results.append(("ok", "ValueError"))
                        continue
                    results.append(rank_failure(err, "raised"))
                    break
                except Exception as err:  # noqa: BLE001 - reported as the case's failure
                    results.append(rank_failure(err, "raised"))
                    break
                results.append(("ok", _plain(value)))
        except Exception as err:  # noqa: BLE001 - a collective of ours failed: another rank did
            results.append(rank_failure(err, "broken"))
    return results


# ---------------------------------------------------------------- here: inputs and verdicts


def _dtypes():
    import torch

    return torch.float32, torch.float64


def _randn(rng, shape, dtype, scale=1.0):
    import torch

    return torch.from_numpy(rng.standard_normal(shape) * scale).to(dtype)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _entries(results: list, index: int) -> list:
    return [r[index] if index < len(r) else ("broken", "stopped early") for r in results]


def _check_refused(where: str, entries: list, what: str) -> None:
    if all(entry == ("ok", "ValueError") for entry in entries):
        return
    for rank, (kind, value) in enumerate(entries):
        if kind == "ok" and value != "ValueError":
            raise AssertionError(f"{where}: expected a ValueError ({what}), but rank {rank} "
                                 "returned a result")
    first_rank_failure(f"{where}, expected a ValueError ({what})", entries)


def _values(where: str, entries: list, count: int | None = None) -> list:
    """Each rank's value of a case that must succeed (a list of `count` items if given)."""
    first_rank_failure(where, entries)
    values = []
    for rank, (_, value) in enumerate(entries):
        if count is not None and (not isinstance(value, list) or len(value) != count):
            raise AssertionError(f"{where}: rank {rank} returned {type(value).__name__}, "
                                 f"expected a tuple of {count}")
        values.append(value)
    return values


def _autograd(fn, tensors, grad):
    """y = fn(*tensors) and the gradient of every tensor for y.backward(grad), in float64 on
    this process, cast back to the tensors' dtype."""
    import torch

    dtype = tensors[0].dtype
    leaves = [t.detach().double().clone().requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(grad.double())
    return [y.detach().to(dtype)] + [leaf.grad.to(dtype) if leaf.grad is not None
                                     else torch.zeros_like(leaf, dtype=dtype) for leaf in leaves]


def _check_grad_part(where, rank, got, expected, part, what):
    """got: a rank's gradient of a whole parameter, of which it used only `part` (an index):
    equal to the oracle there, zero elsewhere."""
    if got is None:
        raise AssertionError(f"{where}: rank {rank}: no gradient reached {what} (was the "
                             "graph cut, e.g. by a copy or detach?)")
    check_tensor(got[part], expected[part], where, rank, f"the gradient of its part of {what}")
    outside = got.clone()
    outside[part] = 0
    if outside.abs().max() > 0:
        raise AssertionError(f"{where}: rank {rank}'s gradient of {what} is not zero outside "
                             "its own part: it used parts that belong to other ranks")


def _parts(size: int, n: int):
    return [slice(r * size // n, (r + 1) * size // n) for r in range(n)]


# ---------------------------------------------------------------- the linear layers


def _linear_case(rng, n, dtype, three_d, split_dim):
    """Random x, weight, bias; the dimension named by split_dim (0: out, 1: in) a multiple of
    n, the other one any size."""
    batch = int(rng.integers(1, 4))
    lead = (batch, int(rng.integers(1, 4))) if three_d else (batch,)
    divided, other = n * int(rng.integers(1, 4)), int(rng.integers(1, 6))
    out_f, in_f = (divided, other) if split_dim == 0 else (other, divided)
    x = _randn(rng, (*lead, in_f), dtype)
    weight, bias = _randn(rng, (out_f, in_f), dtype), _randn(rng, (out_f,), dtype)
    return x, weight, bias


def _refused_linear(rng, n, dtype, split_dim):
    """A layer whose split dimension is not a multiple of n (n > 1)."""
    size = n * int(rng.integers(1, 3)) + int(rng.integers(1, n))
    out_f, in_f = (size, 3) if split_dim == 0 else (3, size)
    return (_randn(rng, (2, in_f), dtype), _randn(rng, (out_f, in_f), dtype),
            _randn(rng, (out_f,), dtype)), size


def _test_linear_forward(fn, rng, split_dim):
    import torch

    from distlab import require_filled

    require_filled(fn)
    features = ("out_features", "in_features")[split_dim]
    for n in WORLD_SIZES:
        cases, specs = [], []
        for index, dtype in enumerate((*_dtypes(), *_dtypes())):
            x, weight, bias = _linear_case(rng, n, dtype, index >= 2, split_dim)
            where = _case(n, x=tuple(x.shape), weight=tuple(weight.shape), dtype=_name(dtype))
            cases.append({"args": [x, weight, bias]})
            specs.append((where, (x.double() @ weight.double().t() + bias.double()).to(dtype)))
        if n > 1:
            args, size = _refused_linear(rng, n, torch.float64, split_dim)
            cases.append({"args": list(args), "refuse": True})
            specs.append((_case(n, **{features: f"{size} (not a multiple of {n})"}), None))
        results = on_ranks(_harness, fn, n, "call", cases)
        for index, (where, expected) in enumerate(specs):
            entries = _entries(results, index)
            if expected is None:
                _check_refused(where, entries, f"{features} cannot be split evenly")
                continue
            for rank, y in enumerate(_values(where, entries)):
                check_tensor(y, expected, where, rank, "the output",
                             expected_is="nn.Linear gives")


@exercise
def column_parallel_forward(fn, rng):
    _test_linear_forward(fn, rng, split_dim=0)


@exercise
def row_parallel_forward(fn, rng):
    _test_linear_forward(fn, rng, split_dim=1)


def _test_linear_backward(fn, rng, split_dim):
    import torch.nn.functional as F

    from distlab import require_filled

    require_filled(fn)
    for n in WORLD_SIZES:
        cases, specs = [], []
        for dtype in _dtypes():
            for split in ((True, False) if split_dim == 1 else (None,)):
                x, weight, bias = _linear_case(rng, n, dtype, False, split_dim)
                grad_y = _randn(rng, (x.shape[0], weight.shape[0]), dtype)
                _, grad_x, grad_w, grad_b = _autograd(F.linear, [x, weight, bias], grad_y)
                extra = {} if split is None else {"input_is_split": split}
                where = _case(n, x=tuple(x.shape), weight=tuple(weight.shape), **extra,
                              dtype=_name(dtype))
                cases.append({"args": [x, weight, grad_y] + ([] if split is None else [split])})
                specs.append((where, split, grad_x, grad_w, grad_b))
        results = on_ranks(_harness, fn, n, "call", cases)
        for index, (where, split, grad_x, grad_w, grad_b) in enumerate(specs):
            values = _values(where, _entries(results, index), count=3)
            rows = _parts(grad_w.shape[split_dim], n)
            for rank, (got_x, got_w, got_b) in enumerate(values):
                mine = rows[rank]
                if split_dim == 0:  # column-parallel: its rows of W and entries of b
                    want_x, want_w, want_b = grad_x, grad_w[mine], grad_b[mine]
                    named_x = "dL/dx (whole, on every rank)"
                else:  # row-parallel: its columns of W, the whole b
                    want_x = grad_x[:, mine] if split else grad_x
                    want_w, want_b = grad_w[:, mine], grad_b
                    named_x = ("dL/dx (this rank's input features)" if split
                               else "dL/dx (whole, on every rank)")
                check_tensor(got_x, want_x, where, rank, named_x, expected_is="autograd gives")
                check_tensor(got_w, want_w, where, rank, "the gradient of its part of the weight",
                             expected_is="autograd gives")
                check_tensor(got_b, want_b, where, rank, "the bias gradient",
                             expected_is="autograd gives")


@exercise
def column_parallel_backward(fn, rng):
    _test_linear_backward(fn, rng, split_dim=0)


@exercise
def row_parallel_backward(fn, rng):
    _test_linear_backward(fn, rng, split_dim=1)


# ---------------------------------------------------------------- f and g


def _oracle_megatron_f_g():
    """A correct (f, g), standing in for the notebook's in the tests of tp_mlp and tp_attention."""
    import torch
    import torch.distributed as dist

    def total(t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    class f(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return total(grad)

    class g(torch.autograd.Function):
        @staticmethod
        def forward(ctx, partial):
            return total(partial)

        @staticmethod
        def backward(ctx, grad):
            return grad.clone()

    return f, g


def _with_oracle_f_g(fn):
    """fn, calling a correct megatron_f_g."""
    if hasattr(fn, "patched"):  # the judge's stand-in for a function in the sandbox
        return fn.patched(megatron_f_g=_oracle_megatron_f_g)
    globs = getattr(fn, "__globals__", None)
    if not isinstance(fn, types.FunctionType) or globs is None:
        return fn
    patched = types.FunctionType(fn.__code__, {**globs, "megatron_f_g": _oracle_megatron_f_g},
                                 fn.__name__, fn.__defaults__, fn.__closure__)
    patched.__kwdefaults__ = fn.__kwdefaults__
    return patched


@exercise
def megatron_f_g(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for n in WORLD_SIZES:
        cases, specs = [], []
        for dtype in _dtypes():
            shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 4))))
            xs = [_randn(rng, shape, dtype) for _ in range(n)]
            grads = [_randn(rng, shape, dtype) for _ in range(n)]
            cases.append({"x": xs, "grad": grads})
            sums = [torch.stack([t.double() for t in ts]).sum(0).to(dtype) for ts in (xs, grads)]
            specs.append((_case(n, shape=shape, dtype=_name(dtype)), xs, grads, *sums))
        results = on_ranks(_harness, fn, n, "f_g", cases)
        for index, (where, xs, grads, sum_x, sum_grad) in enumerate(specs):
            for rank, (f_y, f_dx, g_y, g_dx) in enumerate(
                    _values(where, _entries(results, index), count=4)):
                for got, want, what, oracle in (
                        (f_y, xs[rank], "f's forward output", "its input is"),
                        (f_dx, sum_grad, "the gradient through f",
                         "the sum of the ranks' gradients is"),
                        (g_y, sum_x, "g's forward output", "the sum of the ranks' inputs is"),
                        (g_dx, grads[rank], "the gradient through g",
                         "the gradient it was given is")):
                    check_tensor(got, want, where, rank, what, expected_is=oracle)


# ---------------------------------------------------------------- the layers


def _check_layer(where, values, expected, parts):
    """values[rank] = [y, grad of every tensor]; expected likewise, from autograd;
    parts[k] = (name, None for a tensor every rank uses whole, else a function rank -> index)."""
    for rank, value in enumerate(values):
        check_tensor(value[0], expected[0], where, rank, "the output",
                     expected_is="the single-device layer gives")
        for k, (name, part) in enumerate(parts):
            got, want = value[1 + k], expected[1 + k]
            if part is None:
                if got is None:
                    raise AssertionError(f"{where}: rank {rank}: no gradient reached {name}")
                check_tensor(got, want, where, rank, f"the gradient of {name}",
                             expected_is="autograd gives")
            else:
                _check_grad_part(where, rank, got, want, part(rank), name)


def _mlp(x, w1, b1, w2, b2):
    import torch.nn.functional as F

    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


@exercise
def tp_mlp(fn, rng):
    from distlab import require_filled

    require_filled(fn)
    fn = _with_oracle_f_g(fn)
    for n in WORLD_SIZES:
        cases, specs = [], []
        for index, dtype in enumerate(_dtypes()):
            d, h = int(rng.integers(1, 6)), n * int(rng.integers(1, 4))
            lead = (int(rng.integers(1, 4)),) + ((int(rng.integers(1, 4)),) if index else ())
            tensors = [_randn(rng, (*lead, d), dtype), _randn(rng, (h, d), dtype, d**-0.5),
                       _randn(rng, (h,), dtype), _randn(rng, (d, h), dtype, h**-0.5),
                       _randn(rng, (d,), dtype)]
            grad = _randn(rng, (*lead, d), dtype)
            cases.append({"tensors": tensors, "grad": grad})
            where = _case(n, x=tuple(tensors[0].shape), hidden=h, dtype=_name(dtype))
            specs.append((where, _autograd(_mlp, tensors, grad), _parts(h, n)))
        results = on_ranks(_harness, fn, n, "layer", cases)
        for index, (where, expected, hidden) in enumerate(specs):
            _check_layer(where, _values(where, _entries(results, index), count=6), expected, [
                ("x", None), ("w1", lambda r, p=hidden: p[r]), ("b1", lambda r, p=hidden: p[r]),
                ("w2", lambda r, p=hidden: (slice(None), p[r])), ("b2", None)])


def _attention(x, wq, wk, wv, wo, bo, num_heads):
    """Causal multi-head attention, written here independently of the notebook's helpers."""
    import torch

    batch, seq, d = x.shape
    head_dim = d // num_heads

    def heads(t):
        return t.reshape(batch, seq, num_heads, head_dim).permute(0, 2, 1, 3)

    q, k, v = heads(x @ wq.t()), heads(x @ wk.t()), heads(x @ wv.t())
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / head_dim**0.5
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    weights = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=x.dtype)).softmax(-1)
    out = torch.einsum("bhij,bhjd->bhid", weights, v).permute(0, 2, 1, 3).reshape(batch, seq, d)
    return out @ wo.t() + bo


@exercise
def tp_attention(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    fn = _with_oracle_f_g(fn)
    for n in WORLD_SIZES:
        cases, specs = [], []
        for dtype in _dtypes():
            num_heads, head_dim = n * int(rng.integers(1, 3)), int(rng.integers(1, 4))
            d = num_heads * head_dim
            batch, seq = int(rng.integers(1, 3)), int(rng.integers(1, 5))
            tensors = [_randn(rng, (batch, seq, d), dtype)]
            tensors += [_randn(rng, (d, d), dtype, d**-0.5) for _ in range(4)]
            tensors.append(_randn(rng, (d,), dtype))
            grad = _randn(rng, (batch, seq, d), dtype)
            cases.append({"tensors": tensors, "grad": grad, "kwargs": {"num_heads": num_heads}})
            where = _case(n, x=(batch, seq, d), num_heads=num_heads, dtype=_name(dtype))
            expected = _autograd(lambda *t, h=num_heads: _attention(*t, h), tensors, grad)
            specs.append((where, expected, _parts(d, n)))
        refused = None
        if n > 1:
            num_heads = n + 1
            tensors = [_randn(rng, (1, 2, num_heads), torch.float64)]
            tensors += [_randn(rng, (num_heads, num_heads), torch.float64) for _ in range(4)]
            tensors.append(_randn(rng, (num_heads,), torch.float64))
            cases.append({"tensors": tensors, "grad": tensors[0], "refuse": True,
                          "kwargs": {"num_heads": num_heads}})
            refused = _case(n, num_heads=f"{num_heads} (not a multiple of {n})")
        results = on_ranks(_harness, fn, n, "layer", cases)
        for index, (where, expected, rows) in enumerate(specs):
            _check_layer(where, _values(where, _entries(results, index), count=7), expected, [
                ("x", None), *[(w, lambda r, p=rows: p[r]) for w in ("wq", "wk", "wv")],
                ("wo", lambda r, p=rows: (slice(None), p[r])), ("bo", None)])
        if refused:
            _check_refused(refused, _entries(results, len(specs)), "the heads cannot be split "
                           "evenly")


# ---------------------------------------------------------------- sequence parallelism


@exercise
def sp_all_reduce(fn, rng):
    import torch

    from distlab import require_filled

    require_filled(fn)
    for n in WORLD_SIZES:
        cases, specs = [], []
        for dtype in _dtypes():
            rest = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 3))))
            shape = (n * int(rng.integers(1, 4)), *rest)
            ts = [_randn(rng, shape, dtype) for _ in range(n)]
            cases.append({"t": ts})
            total = torch.stack([t.double() for t in ts]).sum(0).to(dtype)
            specs.append((_case(n, t=shape, dtype=_name(dtype)), total))
        if n > 1:
            length = n * int(rng.integers(1, 3)) + int(rng.integers(1, n))
            cases.append({"t": [_randn(rng, (length, 2), torch.float64)] * n, "refuse": True})
            specs.append((_case(n, t=f"({length}, 2), {length} not a multiple of {n}"), None))
        results = on_ranks(_harness, fn, n, "sp", cases)
        for index, (where, total) in enumerate(specs):
            entries = _entries(results, index)
            if total is None:
                _check_refused(where, entries, "the rows cannot be split evenly")
                continue
            for rank, (got_total, got_part) in enumerate(_values(where, entries, count=2)):
                check_tensor(got_total, total, where, rank, "the sum",
                             expected_is="the sum over the ranks is")
                check_tensor(got_part, total.chunk(n)[rank], where, rank, "its rows of the sum",
                             expected_is=f"rows {rank}/{n} of the sum are")
