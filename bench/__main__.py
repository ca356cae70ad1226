"""Run every benchmark: `python -m bench` (or `make bench`).

`--quick`: each table from one small size (what make test runs); names pick some, e.g.
`python -m bench --quick collectives grading`.

A benchmark that fails is reported with its traceback and the others still run; the exit
status is 1 if any failed.
"""

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

import bench

# every bench/bench_<name>.py, found by folder: a new benchmark needs no list kept by hand
MODULES = tuple(sorted(path.stem.removeprefix("bench_")
                       for path in Path(__file__).parent.glob("bench_*.py")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one small size and a repeat or two per table: checks that every "
                        "benchmark runs, its numbers mean nothing")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all): {', '.join(MODULES)}")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.names) - set(MODULES)):
        parser.error(f"no benchmark named {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    bench.QUICK = args.quick
    failed = []
    for name in args.names or MODULES:
        start = time.perf_counter()
        try:
            importlib.import_module(f"bench.bench_{name}").main()
        except Exception:  # noqa: BLE001 - report it, run the rest, fail at the end
            traceback.print_exc()
            failed.append(name)
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
