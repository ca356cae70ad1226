"""Notebook 01 (collectives): what is particular to it: the judge grading it outside the kernel,
a hanging ring failing in seconds, the notebook's own checks. (What every exercise promises,
from its markers: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_collectives.py -q   (about a minute on 2 cores)
"""

import os
import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest

from autograder import reference
from distlab.source.markers import blank_source

matplotlib.use("Agg")

from notebook_testing import Notebook, assess, fails, stop_ranks  # noqa: F401 (stop_ranks: a fixture)

ASSIGNMENT = "01_collectives"
nb = Notebook(ASSIGNMENT)
RELEASED = Path(__file__).resolve().parents[1] / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


# ---------------------------------------------------------------- one wrong blank fails


@pytest.mark.parametrize(("name", "number", "wrong"), [
    ("ring_allreduce_uneven", 1, "(i - step) % N"),  # the judge patches in a correct chunk_bounds
    ("ring_allreduce_p2p", 1, "dist.send(outgoing, dst=right)"),  # on ranks in the runner; it hangs
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does the reference earn every point and one wrong blank cost one?"""
    from autograder import judge
    from autograder.judge import sandbox

    # the runner without its sandbox: the sandbox has tests of its own
    monkeypatch.setattr(sandbox, "available", lambda: False)

    def edit(code):
        if f"def {name}(" not in code:
            return code
        blank = reference.locate(name)[2][number - 1]
        lines = code.split("\n")
        row = next(i for i, line in enumerate(lines) if blank.answer in line and "BLANK" in line
                   and blank.hint in line)
        lines[row] = lines[row].replace(blank.answer, wrong, 1)
        return "\n".join(lines)

    [(earned, possible, report)] = judge.verdicts(nb.solved_cells(edit), [(name, None)], "test")
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


def test_a_hanging_ring_fails_in_seconds_and_says_it_hung():
    """Does a ring that deadlocks (every rank first blocks in a send) fail on the ranks' own
    short timeout (not the launcher's long one), saying that a rank waited for a message that
    never came?"""
    complaint = fails("ring_allreduce_p2p",
                      nb.variant("ring_allreduce_p2p", 1, "dist.send(outgoing, dst=right)"))
    assert "never came" in complaint, complaint


def cell_function(source: str, name: str):
    """Function `name` defined by `source` as a notebook cell defines it (shipped to the ranks
    by value), over the notebook's reference definitions and imports."""
    namespace = dict(vars(reference.module(ASSIGNMENT)))
    namespace["__name__"] = "__main__"
    exec(compile(source, f"<cell-{name}>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("call", [
    "dist.all_reduce(tensor)", "dist.distributed_c10d.all_reduce(tensor)",
    "dist.group.WORLD.allreduce([tensor]).wait()",  # the process group's own method
    "dist.group.WORLD._get_backend(tensor.device).allreduce([tensor]).wait()",  # gloo's
])
def test_a_ring_that_calls_the_library_collective_fails(call):
    """Does a ring_allreduce_p2p that hands the work to the library's all_reduce (by whatever
    route: module function, process-group method, the backend object) fail, saying it called
    a collective instead of building the ring?"""
    fn = cell_function(f"""
def ring_allreduce_p2p(rank, world_size, tensor, op="sum"):
    {call}
    return tensor / world_size if op == "mean" else tensor
""", "ring_allreduce_p2p")
    complaint = fails("ring_allreduce_p2p", fn)
    assert "called a collective (all_reduce)" in complaint, complaint
    assert "isend and recv" in complaint


def test_monitored_barrier_counts_as_the_barrier():
    """Does `dist.monitored_barrier()`, a valid gloo barrier, earn the barrier blank?"""
    assert fails("hello_allreduce", nb.variant("hello_allreduce", 3, "monitored_barrier")) == ""


def test_a_broken_chunk_bounds_does_not_cost_the_exercises_that_use_it():
    """With a wrong chunk_bounds in the notebook, do ring_allreduce_uneven and
    ring_reduce_scatter still pass (their tests use a correct one)?"""
    for name in ("ring_allreduce_uneven", "ring_reduce_scatter"):
        fn = reference.reference(name)
        globs = dict(fn.__globals__, chunk_bounds=lambda length, n: [(0, length)] * n)
        broken = type(fn)(fn.__code__, globs, fn.__name__, fn.__defaults__)
        assert fails(name, broken) == ""


# ---------------------------------------------------------------- the notebook's own checks


def test_ring_allreduce_refuses_a_length_it_would_truncate():
    """Does the first ring raise ValueError for a length that is not a multiple of N, instead
    of silently dropping the remainder as the seed's code does?"""
    ring = reference.reference("ring_allreduce")
    with pytest.raises(ValueError, match="not a multiple"):
        ring([[1, 2, 3], [4, 5, 6]], op="sum")


def test_visible_checks_pass_on_the_reference(monkeypatch, capsys):
    """Run top to bottom (graded cells left out), does every check cell of the solved notebook
    pass and print its ✓?"""
    from autograder import solved
    from distlab import collectives as plots

    monkeypatch.setattr(plots.plt, "show", lambda *a, **k: plots.plt.close("all"))
    namespace = {"__name__": "__main__"}
    nb = solved.load(ASSIGNMENT)
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.metadata["nbgrader"].get("grade"):
            exec(compile(cell.source, f"<{cell.id}>", "exec"), namespace)
    out = capsys.readouterr().out
    checks = [c for c in nb.cells if c.cell_type == "code" and "✓" in c.source]
    assert out.count("✓") == len(checks) >= 9
    assert "every rank: [0.0, 3.0, 6.0, 9.0, 12.0]" in out
    assert "rank 0 -> 1 | isend" in out  # the trace demo traced


# ---------------------------------------------------------------- the pictures


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_ring_picture_ends_with_the_sum_everywhere(n):
    """Do the ring picture's states end with every GPU holding the full sum, for uneven lengths
    too, with every copy counting all N contributions?"""
    from distlab import collectives as plots

    grads = np.random.default_rng(n).integers(0, 9, size=(n, 2 * n + 1)).tolist()
    states = plots.ring_states(grads)
    assert len(states) == 2 * (n - 1) + 1
    for row in states[-1].values:
        assert np.allclose([v for chunk in row for v in chunk], np.sum(grads, axis=0))
    assert (states[-1].counts == n).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for state in states:
            plots.draw_ring_state(state, n)
            plots.plt.close("all")


def test_tree_picture_levels_match_the_step_count(monkeypatch):
    """Does the tree picture put rank i at step floor(log2(i+1)), the last step being the
    broadcast's step count?"""
    from distlab import collectives as plots

    broadcast = reference.reference("tree_broadcast")
    for n in range(1, 40):
        assert max(plots.tree_levels(n)) == broadcast([1], n)[1]
    monkeypatch.setattr(plots.plt, "show", lambda *a, **k: plots.plt.close("all"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.show_tree(10)
        plots.show_ring([[1, 2], [3, 4]], step=1)


def test_pictures_in_a_notebook_are_shown_once_and_described_in_words():
    """Does each picture reach a notebook once, with alt text for screen readers (and for
    the feedback page's HTML, which otherwise says no description was provided)?"""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from distlab.collectives import show_ring, show_tree\n"
        "show_tree(4)\nshow_ring([[1, 2], [3, 4]], step=1)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nbclient.NotebookClient(nb, timeout=120).execute()
    images = [o for o in nb.cells[0].outputs if "image/png" in o.get("data", {})]
    alts = [o.metadata["image/png"]["alt"] for o in images]
    assert len(images) == 2
    assert alts[0].startswith("Binary-tree broadcast from rank 0 to 4 ranks")
    assert "last rank receives in step 2" in alts[0]
    assert alts[1].startswith("Ring AllReduce over 2 GPUs after step 1 of 2")


# ---------------------------------------------------------------- blanks that teach


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_no_formula_answer_is_spelled_out_nearby():
    """Is no blank's answer that is a formula (spaces ignored) written in the notebook's
    markdown, in the released cell around it (code, hints, docstring), or in the picture
    module a learner can read with `show_ring??`?"""
    import inspect

    from autograder import solved
    from distlab import collectives as plots

    nb = solved.load(ASSIGNMENT)
    markdown = _squash("\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    pictures = _squash(inspect.getsource(plots))
    assert "%n" not in pictures.lower(), "the pictures compute a ring index formula"
    checked = 0
    for cell, blanks in solved.solution_cells(ASSIGNMENT):
        template = _squash(blank_source(cell.source)[0])
        for blank in blanks:
            answer = _squash(blank.answer)
            if not re.search(r"[-+*%/]", answer):
                continue  # an API name or a variable: shown first on purpose
            checked += 1
            for where, text in (("markdown", markdown), ("the released cell", template),
                                ("distlab.collectives", pictures)):
                assert answer not in text, f"{blank.answer!r} is spelled out in {where}"
    assert checked >= 10


def test_pictures_come_before_their_exercise_and_run_unsolved():
    """Do the ring and tree pictures come before the exercises they explain, and do they run in
    the released notebook before any blank is filled (they never call the learner's code)?"""
    from autograder import solved

    cells = solved.load(ASSIGNMENT).cells
    grade_ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    for picture, exercise in (("show_ring(", "ring_allreduce"), ("show_tree(", "tree_broadcast")):
        first = next(i for i, c in enumerate(cells)
                     if c.cell_type == "code" and c.source.startswith(picture))
        assert first < grade_ids.index(exercise), f"{picture} comes after {exercise}"

    released = nbformat.read(RELEASED, as_version=4)
    namespace = {"__name__": "__main__"}
    code = [c for c in released.cells if c.cell_type == "code"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cell in code[:2]:  # the imports, then the ring picture
            exec(compile(cell.source, "<released>", "exec"), namespace)
    assert code[1].source.startswith("show_ring(")
    plots_module = namespace["show_ring"].__module__
    assert plots_module == "distlab.collectives"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_torchrun_script_in_the_notebook_runs(tmp_path):
    """Does the notebook's torchrun script, next to a hello.py holding hello_allreduce, run on
    2 ranks started by torchrun (rendezvous and ranks from the environment) and all-reduce?"""
    from autograder import solved

    nb = solved.load(ASSIGNMENT)
    (text,) = [c.source for c in nb.cells if c.cell_type == "markdown" and "torchrun" in c.source
               and "```python" in c.source]
    script = re.search(r"```python\n(.*?)```", text, re.S)[1]
    command = re.search(r"```bash\n(.*?)```", text, re.S)[1].split()
    assert command[:3] == ["torchrun", "--nproc-per-node", "4"], command
    (tmp_path / command[-1]).write_text(script)
    _, cell, _ = reference.locate("hello_allreduce")
    (tmp_path / "hello.py").write_text("import torch\nimport torch.distributed as dist\n\n\n"
                                       + cell.source + "\n")
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT",
                                                            "RANK", "WORLD_SIZE")}
    done = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port",
                           str(_free_port()), command[-1]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("after all_reduce:  3.0") == 2, done.stdout
    assert "every rank is past the barrier" in done.stdout


FRAME_THIEF = '''
def ring_allreduce_p2p(rank, world_size, tensor, op="sum"):
    import struct
    import sys

    import torch

    # another rank's input is torch.full((5,), k + 1.0): as a tensor, or as the raw float32
    # bytes any pickle of it holds
    theirs = {k + 1: struct.pack("<5f", *[k + 1.0] * 5) for k in range(world_size) if k != rank}

    def others(value, depth=0):
        if isinstance(value, bytes | bytearray):
            return sum(pattern in value for pattern in theirs.values())
        if isinstance(value, torch.Tensor):
            return int(value.numel() > 0 and bool((value == value.flatten()[0]).all())
                       and float(value.flatten()[0]) in theirs)
        if depth < 5 and isinstance(value, list | tuple | set):
            return sum(others(v, depth + 1) for v in value)
        if depth < 5 and isinstance(value, dict):
            return sum(others(v, depth + 1) for v in value.values())
        return 0

    found, mine = 0, sys._getframe().f_code  # (this frame holds the patterns themselves)
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code is not mine:
                found += sum(others(v) for v in list(frame.f_locals.values()))
            frame = frame.f_back
    return torch.full_like(tensor, found)
'''


def test_a_rank_finds_no_other_ranks_input_in_any_frame():
    """Given every rank's input for the test, does the harness hand each rank only its own, so
    that a blank walking every frame of every thread of its process finds no tensor of another
    rank, nor its bytes in any bytes object (the worker's pickled task, say)?"""
    import torch

    from autograder.exercises import collectives as tests_of_01
    from autograder.exercises.checks import on_ranks

    fn = cell_function(FRAME_THIEF, "ring_allreduce_p2p")
    n = 3
    cases = [([torch.full((5,), float(r + 1)) for r in range(n)], "sum")]
    results = on_ranks(tests_of_01._p2p_harness, fn, n, cases)
    found = {rank: int(entries[0][1]["out"][0]) for rank, entries in enumerate(results)}
    assert found == dict.fromkeys(range(n), 0), found


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_hidden_tests_ring_is_the_ring_the_notebook_draws(n):
    """Do the grading oracle's step-by-step states (autograder: `_ring_states`, what
    `ring_allreduce(..., trace=True)` is held to) equal the states distlab.collectives draws
    for the learner (`ring_states`), after every one of the 2(N-1) steps?"""
    from autograder.exercises.collectives import _ring_states
    from distlab.collectives import ring_states

    grads = [list(np.random.default_rng(n).integers(0, 9, size=3 * n).astype(float))
             for _ in range(n)]
    drawn, graded = ring_states(grads)[1:], _ring_states(grads, n)
    assert len(drawn) == len(graded) == 2 * (n - 1)
    for step, (shown, held) in enumerate(zip(drawn, graded, strict=True)):
        for gpu in range(n):
            for chunk in range(n):
                assert np.allclose(shown.values[gpu][chunk], held[gpu][chunk]), (step, gpu, chunk)
