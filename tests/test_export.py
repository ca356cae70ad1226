"""Does `python -m distlab.export` turn a notebook's real-rank exercises into torchrun scripts
that run, unchanged, on CPU gloo at two world sizes, and fail where the learner is wrong?"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distlab.blanks import BlankNotFilled
from distlab.export import EXPORTABLE, ExportError, chosen_exercises, export
from distlab.export.__main__ import main
from distlab.export.reading import read_notebook
from distlab.export.runtime import Ranks, WorldSizeRefused
from distlab.export.tensor_parallel import check_column_parallel_forward
from distlab.source.cells import solution_sources
from distlab.source.markers import strip_markers
from distlab.source.paths import ROOT, assignment_ids, source_path

HERE = Path(__file__).parent
# the notebooks whose solved source defines an exercise that exports (found, not listed)
EXPORTED = [a for a in assignment_ids()
            if set(EXPORTABLE) & set(read_notebook(source_path(a)).definitions)]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
SMALL = ["--bytes", "65536", "--repeats", "2"]  # the timings, kept short for a test


def torchrun(nproc: int, *args, timeout=240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([*TORCHRUN, "--nproc-per-node", str(nproc), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> dict[str, Path]:
    """Each exported notebook's script, by notebook id."""
    out = tmp_path_factory.mktemp("torchrun")
    return {id: export(source_path(id), [], out) for id in EXPORTED}


@pytest.fixture(scope="module", params=[2, 4])
def together(request, scripts) -> tuple[int, subprocess.CompletedProcess]:
    """Every exported script's exercises on `n` gloo ranks, in one launch."""
    n = request.param
    return n, torchrun(n, HERE / "torchrun_together.py", *scripts.values(), "--", *SMALL,
                       "--backend", "gloo")


@pytest.mark.slow
def test_do_the_solved_exercises_pass_under_torchrun_at_two_world_sizes(together):
    n, done = together
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    names = [e.name for id in EXPORTED for e in chosen_exercises(source_path(id), [])]
    assert {"hello_allreduce", "ring_allreduce_p2p", "fast_all_reduce", "sync_sgd_step",
            "DDPBucketed", "column_parallel_forward", "row_parallel_forward", "run_stage",
            "ShardedOptimizer"} <= set(names)  # 01-06's
    for name in names:
        assert f"✓ {name}\n" in done.stdout, f"{name} did not pass on {n} ranks:\n{done.stdout}"
    assert f"{len(names)} passed on {n} ranks" in done.stdout


@pytest.mark.slow
def test_are_the_collectives_and_ddp_timed_as_algbw_and_busbw(together):
    n, done = together
    timings = re.findall(r"^  (.+): [\d.]+ MiB in [\d.]+ ms, algbw ([\d.]+) GB/s, busbw "
                         r"([\d.]+) GB/s", done.stdout, re.M)
    labels = [label.strip() for label, _, _ in timings]
    assert labels == ["your ring_allreduce_p2p", "dist.all_reduce",
                      "one DDPBucketed step (forward + backward + gradient sync, 2 MiB buckets)"]
    for _, algbw, busbw in timings:  # an all-reduce's bus factor, 2(N-1)/N, to the printed digits
        assert float(busbw) == pytest.approx(float(algbw) * 2 * (n - 1) / n, abs=2e-3)


@pytest.mark.slow
def test_does_the_speed_challenge_print_its_score_as_the_notebook_does(together):
    """02's fast_all_reduce (given code: 02's ring) raced against dist.all_reduce by the same
    runtime.race the notebook's distlab.challenge uses: one line, with both busbws and the
    score, which is the ratio of the two times (same bytes, same bus factor)."""
    n, done = together
    line = re.search(r"^  race at [\d.]+ MiB on (\d) ranks \(gloo\), median of 2 paired runs: "
                     r"yours ([\d.]+) ms, busbw ([\d.]+) GB/s; dist.all_reduce ([\d.]+) ms, "
                     r"busbw ([\d.]+) GB/s; score ([\d.]+)$", done.stdout, re.M)
    assert line, done.stdout
    ranks, *_, score = line.groups()
    assert int(ranks) == n and float(score) > 0


def mutant(tmp_path: Path, id: str, right: str, wrong: str) -> Path:
    """The solved source of `id` with one blank's answer replaced by a wrong one."""
    text = source_path(id).read_text()
    assert text.count(right) == 1, right
    path = tmp_path / f"{id}.py"
    path.write_text(text.replace(right, wrong))
    return path


@pytest.mark.slow
def test_does_a_wrong_answer_fail_under_torchrun_too(tmp_path):
    """ring_reduce_scatter's given add made a copy (`copy_` for `add_`), which
    ring_allreduce_p2p runs: the script itself, started by torchrun, fails and names the
    exercise."""
    source = mutant(tmp_path, "01_collectives", "chunks[recv_index].add_(incoming)",
                    "chunks[recv_index].copy_(incoming)")
    script = export(source, ["ring_allreduce_p2p"], tmp_path / "out")
    done = torchrun(2, script, *SMALL)
    assert done.returncode != 0
    assert "✗ ring_allreduce_p2p: AssertionError: op='sum', length 1001" in done.stderr
    assert "differs from dist.all_reduce's" in done.stderr


def test_does_the_script_hold_only_the_learners_exercises_and_the_code_they_use(scripts):
    text = scripts["01_collectives"].read_text()
    assert "def ring_allreduce_p2p(" in text and "def hello_allreduce(" in text
    # other exercises, the notebook's check cells and the markers' answer lists stay out
    for absent in ("def ring_allreduce(", "def chunk_bounds(", "compare_with_all_reduce",
                   "show_ring", "from distlab", "# BLANK", "REJECT", "ACCEPT"):
        assert absent not in text, absent
    zero = scripts["06_zero"].read_text()  # ShardedOptimizer needs the learner's assign_params
    assert "def assign_params(" in zero and "def model_state_bytes(" not in zero
    compile(text, str(scripts["01_collectives"]), "exec")


def learner_notebook(tmp_path: Path, filled: dict[str, str]) -> Path:
    """The released 01 notebook, with the cells of `filled` (grade id -> code) filled in."""
    released = ROOT / "notebooks" / "01_collectives" / "01_collectives.ipynb"
    notebook = json.loads(released.read_text())
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in filled:
            cell["source"] = filled[grade_id]
    path = tmp_path / "01_collectives.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def test_does_an_unfilled_blank_stop_the_export_with_the_notebooks_message(tmp_path, capsys):
    notebook = learner_notebook(tmp_path, {})  # as released: every blank empty
    with pytest.raises(BlankNotFilled, match=re.escape(
            "exchange still has 1 blank line(s) to fill: blank [1] (line 4).\n"
            "Replace each `_____` with your code")):
        export(notebook, ["ring_allreduce_p2p"], tmp_path / "out")
    assert main([str(notebook), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err  # the whole notebook: every exercise with a blank, in order
    assert err.startswith("BlankNotFilled: hello_allreduce still has 3 blank line(s)")
    assert "\nexchange still has 1 blank line(s)" in err
    assert "\nring_reduce_scatter still has 1 blank line(s)" in err
    assert not (tmp_path / "out").exists()


def test_does_a_learners_filled_notebook_export(tmp_path, capsys):
    sources = solution_sources("01_collectives")
    solved = {name: strip_markers(sources[name]) for name in ("exchange", "ring_reduce_scatter")}
    notebook = learner_notebook(tmp_path, solved)
    assert main([str(notebook), "ring_allreduce_p2p", "-o", str(tmp_path / "out")]) == 0
    script = tmp_path / "out" / "01_collectives.py"
    assert f"wrote {script}" in capsys.readouterr().out
    text = script.read_text()
    assert all(code in text for code in solved.values()) and "def ring_allreduce_p2p(" in text
    assert "def hello_allreduce(" not in text


def test_are_unknown_exercises_and_notebooks_without_any_refused(tmp_path):
    with pytest.raises(ExportError, match="ring_allreduce: not an exercise of 01_collectives.py "
                       "that exports to torchrun; these are: hello_allreduce, ring_allreduce_p2p"):
        export(source_path("01_collectives"), ["ring_allreduce"], tmp_path)
    with pytest.raises(ExportError, match="defines none of the exercises"):
        export(source_path("07_hybrid"), [], tmp_path)
    with pytest.raises(ExportError, match="no such notebook"):
        export(tmp_path / "missing.ipynb", [], tmp_path)


def test_does_a_world_size_the_check_cannot_split_get_a_clear_message():
    ranks = Ranks(0, 3, 0, "gloo", torch.device("cpu"), 1024, 1)
    with pytest.raises(WorldSizeRefused, match="splits nn.Linear\\(64, 32\\)'s 32 output "
                       "features evenly: use a world size that divides 32, not 3"):
        check_column_parallel_forward(ranks, None)


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: the NCCL path of the "
                    "exported scripts runs only where torch sees one")
def test_do_the_exported_scripts_run_on_nccl(scripts):
    n = min(torch.cuda.device_count(), 2)
    done = torchrun(n, HERE / "torchrun_together.py", scripts["01_collectives"],
                    scripts["02_cost_models"], scripts["06_zero"])
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"on {n} ranks (nccl)" in done.stdout


def test_is_torchrun_on_the_path_of_a_learners_environment():
    """The README's commands start `torchrun`: the console script comes with torch."""
    assert shutil.which("torchrun", path=str(Path(sys.executable).parent))
