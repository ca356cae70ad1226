"""`make bench` runs to the end: its quick mode (`python -m bench --quick`) prints every table
from one small size, so a renamed reference function, a moved helper or a changed API fails
here, not in a user's `make bench`. Its numbers are not checked: timings belong to make bench.
"""

import subprocess
import sys

import pytest

from bench.__main__ import MODULES, main
from distlab.source import paths


@pytest.fixture(scope="module")
def quick_bench():
    return subprocess.run([sys.executable, "-m", "bench", "--quick"], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=900)


def test_every_benchmark_runs_to_the_end_in_quick_mode(quick_bench):
    out = quick_bench.stdout + quick_bench.stderr
    assert quick_bench.returncode == 0, out[-6000:]
    assert "Traceback" not in out, out[-6000:]
    assert "WARNING" not in out and "Warning" not in out, out[-6000:]  # warnings are defects
    for name in MODULES:
        assert f"({name}: " in quick_bench.stdout, f"{name} did not finish:\n{out[-3000:]}"


TABLES = ("speed challenge", "02 cost models", "04 tensor-parallel", "05 pipeline",
          "03 data parallel", "06 ZeRO", "07 hybrid", "08 context parallel", "09 expert parallel",
          "Notebooks executed", "Grading throughput",
          "The judge's fresh process", "A class of", "Validate button")
# (bench.table()'s titles; three benchmarks print their own)


def test_every_table_is_printed(quick_bench):
    titles = [line[3:] for line in quick_bench.stdout.splitlines() if line.startswith("## ")]
    assert sorted(next((t for t in TABLES if title.startswith(t)), title) for title in titles) \
        == sorted(TABLES)
    for own in ("spawn / distlab warm call:", "ring all-reduce (send/recv) vs dist.all_reduce",
                "refresh (draw 8 blanks + lay out)"):
        assert own in quick_bench.stdout


def test_every_benchmark_is_found_by_folder_and_has_a_main():
    import importlib

    assert {"launch", "collectives", "grading", "drills"} <= set(MODULES)
    for name in MODULES:
        assert callable(importlib.import_module(f"bench.bench_{name}").main), name


def test_a_benchmark_that_fails_is_named_and_the_others_still_run(monkeypatch, capsys):
    ran = []

    def fake_import(name):
        ran.append(name)
        if name == "bench.bench_cost_models":
            raise KeyError("no solution cell in solutions/ defines a function named 'x'")
        return type("Bench", (), {"main": staticmethod(lambda: None)})

    monkeypatch.setattr("bench.QUICK", False)  # main() sets it: put it back after
    monkeypatch.setattr("importlib.import_module", fake_import)
    assert main(["--quick", "collectives", "cost_models", "zero"]) == 1
    assert ran == ["bench.bench_collectives", "bench.bench_cost_models", "bench.bench_zero"]
    err = capsys.readouterr().err
    assert "KeyError" in err and "benchmarks that failed: cost_models" in err
