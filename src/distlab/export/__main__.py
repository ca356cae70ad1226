"""python -m distlab.export NOTEBOOK [FUNCTION ...] -o DIR: see distlab/export/__init__.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distlab.blanks import BlankNotFilled
from distlab.export import EXPORTABLE, ExportError, export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m distlab.export",
        description="Write your notebook's real-rank exercises as one torchrun script.",
        epilog=f"Exercises that export: {', '.join(EXPORTABLE)}.")
    parser.add_argument("notebook", type=Path, help="your .ipynb (or a solved source .py)")
    parser.add_argument("functions", nargs="*", help="only these exercises (default: all)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="folder to write to")
    args = parser.parse_args(argv)
    try:
        path = export(args.notebook, args.functions, args.out)
    except (BlankNotFilled, ExportError) as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path}\nrun it: torchrun --standalone --nproc-per-node 4 {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
