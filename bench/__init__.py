"""Benchmarks (`make bench`): each module's main() prints a table and returns its rows."""


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
