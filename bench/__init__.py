"""Benchmarks (`make bench`): each module's main() prints a table and returns its rows.

`python -m bench --quick` (make test runs it: tests/system/test_bench.py) sets QUICK: every
table is printed as in the full run, from one small size and a repeat or two, so that a
renamed reference function or API breaks the suite, not a user's `make bench`. Its numbers
mean nothing.
"""

QUICK = False


def execute(nb) -> None:
    """Run a notebook top to bottom in a fresh python3 kernel, as nbclient does, with the
    kernel's traffic encrypted where pyzmq can (as nbgrader_config.py sets up Validate), so
    ipykernel prints no "running over TCP without encryption" warning into the tables."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    km = KernelManager(kernel_name="python3", transport_encryption="auto")
    try:
        NotebookClient(nb, km=km, timeout=600, allow_errors=False).execute()
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)


_RUN_ONCE: dict[str, float] = {}  # quick mode: notebook JSON -> seconds its one run took


def execute_seconds(nb) -> float:
    """Seconds execute(nb) took. In quick mode a notebook is run once per process: the same
    notebook again (bench_grading's baseline and bench_notebooks' row both run solved 01)
    reports its first run's seconds, since quick mode proves that each table is made and its
    numbers mean nothing; make bench runs every notebook every time."""
    import json
    import time

    key = json.dumps(nb, sort_keys=True) if QUICK else None
    if key in _RUN_ONCE:
        return _RUN_ONCE[key]
    start = time.perf_counter()
    execute(nb)
    seconds = time.perf_counter() - start
    if key is not None:
        _RUN_ONCE[key] = seconds
    return seconds


def pick(full, quick):
    """`full` for make bench, `quick` for its quick mode."""
    return quick if QUICK else full


def table(title: str, rows: list[dict]) -> None:
    """Print rows (dicts with the same keys) as an aligned text table."""
    print(f"\n## {title}")
    if not rows:
        print("(no rows)")
        return
    keys = list(rows[0])
    cells = [[str(row.get(k, "")) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))
