"""Benchmarks (`make bench`): each module's main() prints a table and returns its rows.

`python -m bench --quick` (make test runs it: tests/system/test_bench.py) sets QUICK: every
table is printed as in the full run, from one small size and a repeat or two, so that a
renamed reference function or API breaks the suite, not a user's `make bench`. Its numbers
mean nothing.
"""

QUICK = False


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
