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
