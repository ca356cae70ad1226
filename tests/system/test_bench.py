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


# the three benchmarks that print their own layout instead of bench.table()'s "## title"
OWN = ("spawn / distlab warm call:", "ring all-reduce (send/recv) vs dist.all_reduce",
       "refresh (draw 8 blanks + lay out)")


def test_every_benchmark_prints_a_table(quick_bench):
    """Does each benchmark print at least one table (found by folder: no list of titles to
    keep), between the end of the one before it and its own "(name: s)" line?"""
    out, start = quick_bench.stdout, 0
    for name in MODULES:
        end = out.index(f"({name}: ", start)
        section = out[start:end]
        assert "\n## " in f"\n{section}" or any(own in section for own in OWN), \
            f"bench_{name} printed no table:\n{section[-2000:]}"
        start = end
    for own in OWN:
        assert own in out


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
