"""Notebook 01 (collectives): what is particular to it: the judge grading it outside the kernel,
a hanging ring failing in seconds, the notebook's own checks. (What every exercise promises,
from its markers: tests/test_contract.py.)

Run: .venv/bin/python -m pytest tests/test_collectives.py -q   (about a minute on 2 cores)
"""

import re
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
    ("ring_reduce_scatter", 1, "rank"),  # a correct exchange in
    ("exchange", 1, "dist.send(send, dst=dst); dist.recv(recv, src=src)"),  # it hangs
])
def test_the_judge_grades_these_exercises_outside_the_kernel(name, number, wrong, monkeypatch):
    """Graded by the judge (the learner's code in a separate runner process, only plain values
    coming back), does the reference earn every point and one wrong blank cost one?"""
    from autograder.judge import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)  # the sandbox has its own tests
    earned, possible, report = nb.judge_verdict(name, number, wrong)
    assert earned == possible - 1, report
    assert f"looks wrong: [{number}]" in "\n".join(report), report


def test_a_hanging_ring_fails_in_seconds_and_says_it_hung():
    """Does a ring that deadlocks (every rank first blocks in a send) fail on the ranks' own
    short timeout (not the launcher's long one), saying that a rank waited for a message that
    never came?"""
    complaint = fails("exchange", nb.variant("exchange", 1,
                                             "dist.send(send, dst=dst); dist.recv(recv, src=src)"))
    assert "never came" in complaint and "each waited on another" in complaint, complaint


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
    """Does a ring_reduce_scatter that hands the work to the library's all_reduce (by whatever
    route: module function, process-group method, the backend object) fail, saying it called
    a collective instead of building the ring?"""
    fn = cell_function(f"""
def ring_reduce_scatter(rank, world_size, chunks, op="sum"):
    tensor = torch.cat(chunks)
    {call}
    mine = tensor.tensor_split(world_size)[rank]
    return mine / world_size if op == "mean" else mine
""", "ring_reduce_scatter")
    complaint = fails("ring_reduce_scatter", fn)
    assert "called a collective (all_reduce)" in complaint, complaint
    assert "from sends and receives" in complaint


def test_monitored_barrier_counts_as_the_barrier():
    """Does `dist.monitored_barrier()`, a valid gloo barrier, earn the barrier blank?"""
    assert fails("hello_allreduce", nb.variant("hello_allreduce", 3, "monitored_barrier")) == ""


def test_a_broken_exchange_does_not_cost_the_exercises_that_use_it():
    """With an exchange that does nothing in the notebook, do ring_reduce_scatter and alltoall
    still pass (their tests use a correct one)?"""
    for name in ("ring_reduce_scatter", "alltoall"):
        fn = reference.reference(name)
        globs = dict(fn.__globals__, exchange=lambda send, dst, recv, src: None)
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
    assert out.count("✓") == len(checks) >= 8
    assert "rank 0 -> 1 | isend" in out and "rank 1 <- any | recv" in out  # the traces


# ---------------------------------------------------------------- the pictures


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_ring_picture_ends_with_the_sum_everywhere(n):
    """Do the ring picture's states (autograder: ring_picture) end with every GPU holding the
    full sum, for uneven lengths too, with every copy counting all N contributions?"""
    from autograder.exercises.collectives import ring_picture

    grads = np.random.default_rng(n).integers(0, 9, size=(n, 2 * n + 1)).tolist()
    states = ring_picture(grads)
    assert len(states) == 2 * (n - 1) + 1
    for row in states[-1]["values"]:
        assert np.allclose([v for chunk in row for v in chunk], np.sum(grads, axis=0))
    assert (np.array(states[-1]["counts"]) == n).all()


def test_the_drawn_ring_is_recorded_from_the_grading_side_and_draws_quietly():
    """Is distlab's ring_example.json what ring_picture() gives for the notebook's example
    (rewrite it with autograder.exercises.collectives.write_ring_example), and does each of
    its states draw without a warning?"""
    import json

    from autograder.exercises.collectives import ring_picture

    from distlab import collectives as plots

    assert json.loads(plots.EXAMPLE.read_text()) == ring_picture(), "ring_example.json is stale"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for state in plots.ring_states():
            plots.draw_ring_state(state, 4)
            plots.plt.close("all")


def test_tree_picture_levels_match_the_step_count(monkeypatch):
    """Does the tree picture put rank i at step floor(log2(i+1)), the last step being the
    broadcast's step count?"""
    from distlab import collectives as plots

    for n in range(1, 40):
        assert max(plots.tree_levels(n)) == n.bit_length() - 1
    monkeypatch.setattr(plots.plt, "show", lambda *a, **k: plots.plt.close("all"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.show_tree(10)
        plots.show_ring(step=1)


def test_pictures_in_a_notebook_are_shown_once_and_described_in_words():
    """Does each picture reach a notebook once, with alt text for screen readers (and for
    the feedback page's HTML, which otherwise says no description was provided)?"""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from distlab.collectives import show_ring, show_tree\n"
        "show_tree(4)\nshow_ring(step=1)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nbclient.NotebookClient(nb, timeout=120).execute()
    images = [o for o in nb.cells[0].outputs if "image/png" in o.get("data", {})]
    alts = [o.metadata["image/png"]["alt"] for o in images]
    assert len(images) == 2
    assert alts[0].startswith("Binary-tree broadcast from rank 0 to 4 ranks")
    assert "last rank receives in step 2" in alts[0]
    assert alts[1].startswith("Ring AllReduce over 4 GPUs after step 1 of 6")


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
    assert checked >= 7


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


FRAME_THIEF = '''
def ring_reduce_scatter(rank, world_size, chunks, op="sum"):
    import struct
    import sys

    import torch

    # another rank's input is torch.full((15,), k + 1.0): as a tensor, or as the raw float32
    # bytes any pickle of it holds
    theirs = {k + 1: struct.pack("<15f", *[k + 1.0] * 15) for k in range(world_size) if k != rank}

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
    return torch.full_like(chunks[rank], found)
'''


def test_a_rank_finds_no_other_ranks_input_in_any_frame():
    """Given every rank's input for the test, does the harness hand each rank only its own, so
    that a blank walking every frame of every thread of its process finds no tensor of another
    rank, nor its bytes in any bytes object (the worker's pickled task, say)?"""
    import torch

    from autograder.exercises import collectives as tests_of_01
    from autograder.exercises.checks import on_ranks

    fn = cell_function(FRAME_THIEF, "ring_reduce_scatter")
    n = 3
    cases = [([torch.full((15,), float(r + 1)) for r in range(n)], "sum")]
    results = on_ranks(tests_of_01._rs_harness, fn, n, cases)
    found = {rank: int(entries[0][1]["out"][0]) for rank, entries in enumerate(results)}
    assert found == dict.fromkeys(range(n), 0), found



def tree_with(lines: str) -> str:
    """A correct tree_broadcast (the solved one's sends) that first runs `lines` (its body's
    indent) on every rank."""
    return f"""
def tree_broadcast(rank, world_size, tensor):
    import time

    import torch.distributed as dist

{lines}
    if rank > 0:
        dist.recv(tensor)
    sends = [dist.isend(tensor, dst=c) for c in (2 * rank + 1, 2 * rank + 2) if c < world_size]
    for sending in sends:
        sending.wait()
    return tensor
"""


def store_written(lines: str, n: int = 3) -> list:
    """Each rank's bytes written to the store in one tree_broadcast case of tree_with(lines),
    as the hidden test's harness counts them (every rank asserted to have finished it)."""
    import torch

    from autograder.exercises import collectives as tests_of_01
    from autograder.exercises.checks import on_ranks

    fn = cell_function(tree_with(lines), "tree_broadcast")
    results = on_ranks(tests_of_01._tree_harness, fn, n, [torch.arange(3.0)])
    assert [entries[0][0] for entries in results] == ["ok"] * n, results
    return [entries[0][1]["store"] for entries in results]


# rank 0 comes back from the harness's barrier after the case half a second late, as a rank
# that the machine puts aside just then (make test's three lanes on two cores)
LATE_AFTER_THE_CASE = """
    if rank == 0:
        barrier = dist.barrier

        def late(*args, **kwargs):
            dist.barrier = barrier
            out = barrier(*args, **kwargs)
            time.sleep(0.5)
            return out

        dist.barrier = late
"""


def test_a_rank_leaving_the_group_while_another_measures_is_not_blamed():
    """A rank's FileStore writes 35 B into the store as the rank leaves the group after its
    last case (c10d's "cleanup/" and "refcount/" records): when rank 0 is put aside between the
    barrier after the case and its measure of the store, is a correct answer still not blamed
    for what the leaving ranks wrote ("rank 0 wrote 70 B into the process group's store")?"""
    assert store_written(LATE_AFTER_THE_CASE) == [0, 0, 0]


def test_the_stores_own_records_during_a_case_are_not_blamed():
    """A FileStore on the group's file made and freed during a case (as the library or the
    garbage collector may: c10d's "refcount/" and "cleanup/" records, 53 B a rank): is a correct
    answer not blamed for them?"""
    assert store_written("""
    from autograder.exercises.checks import rendezvous_file

    dist.FileStore(rendezvous_file("check"), world_size)  # made and freed at once
""") == [0, 0, 0]


@pytest.mark.parametrize("write", [
    "store.set('x', 'data')", "store.add('x', 3)", "store.append('x', 'data')",
    "store.compare_set('x', '', 'data')", "store.multi_set(['x', 'y'], ['data', 'more'])",
    "store.delete_key('x')",
    "store.underlying_store.set('x', 'data')",  # beneath the group's prefix
])
def test_a_write_to_the_store_is_still_caught(write):
    """Does one write to the process group's store by rank 0 (through the default store, by
    whatever method) show in what rank 0 did? (Another rank may have measured the store's
    size before the case after rank 0 wrote.)"""
    written = store_written(f"""
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        {write}
""", n=2)
    assert written[0] > 0, written


def test_a_tree_that_hands_its_data_through_the_store_fails_and_says_so():
    """End to end: a tree_broadcast whose rank 0 also writes the data into the store fails,
    with the bytes it wrote."""
    complaint = fails("tree_broadcast", cell_function(tree_with("""
    if rank == 0:
        dist.distributed_c10d._get_default_store().set("x", repr(tensor.tolist()))
"""), "tree_broadcast"))
    assert re.search(r"rank 0 wrote \d+ B into the process group's store: the data must "
                     r"travel in the ranks' messages", complaint), complaint

def test_a_fill_over_several_lines_is_read_back_whole_and_is_no_change():
    """exchange's one blank is its whole body, which a learner writes over several lines: is
    that no change outside the blanks, read back as one fill (the diagnosis puts an answer in
    its place, lines and all), and graded as the reference is?"""
    from autograder.diagnose import read_fills
    from distlab.source.changes import changed_outside_blanks

    released = nbformat.read(RELEASED, as_version=4)
    (template,) = [c.source for c in released.cells if c.source.startswith("def exchange(")]
    learner = template.replace(
        "    _____", "    pending = dist.isend(send, dst=dst)  # start it\n\n"
        "    dist.recv(recv, src=src)\n    pending.wait()", 1)
    assert changed_outside_blanks("exchange", learner, template) is None
    _, _, blanks = reference.locate("exchange")
    filled = read_fills(learner, template, blanks)
    assert filled.fills == {1: "pending = dist.isend(send, dst=dst)\n\ndist.recv(recv, src=src)"
                                "\npending.wait()"}
    swapped = filled.with_answers({1}, {1: "dist.send(send, dst=dst)\ndist.recv(recv, src=src)"})
    assert swapped.endswith("    dist.send(send, dst=dst)\n    dist.recv(recv, src=src)"), swapped
    assert fails("exchange", cell_function(learner, "exchange")) == ""
