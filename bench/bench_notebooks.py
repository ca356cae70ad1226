"""Wall time of each solved notebook run top to bottom, against an empty notebook's.

    python -m bench.bench_notebooks

The baseline is a notebook that only imports distlab (kernel start + torch import), run in
the same way in the same run, so the ratio says what the exercises themselves cost.
"""

from __future__ import annotations

import nbformat

from autograder import solved
from bench import execute_seconds, pick, table
from distlab.source import paths


def main() -> list[dict]:
    empty = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import distlab")])
    baseline = execute_seconds(empty)
    rows = [{"notebook": "baseline: empty (kernel + import distlab)",
             "seconds": f"{baseline:.1f}", "ratio": "1.0x"}]
    for assignment in pick(paths.assignment_ids(), paths.assignment_ids()[:1]):
        seconds = execute_seconds(solved.load(assignment))
        rows.append({"notebook": f"{assignment} (solved)", "seconds": f"{seconds:.1f}",
                     "ratio": f"{seconds / baseline:.1f}x"})
    table("Notebooks executed top to bottom", rows)
    return rows


if __name__ == "__main__":
    main()
