"""Attacks on the grading itself, all on the released notebook with every blank left unfilled:
any point they got would be unearned, so each must score 0 everywhere."""

from __future__ import annotations

import copy
import textwrap
import uuid

from adversarial import ALL, RELEASED, SOLVED, kind
from adversarial.cells import add_after, index, new_cell, prepend_to_function

FAKE_PASS = "✓ ring_allreduce: every hidden test passed\\nscore: 5 / 5"


# ---- locked and graded cells


@kind(base=RELEASED, zero=ALL)
def edit_test_cell(nb):
    """Replaces the hidden-test cell of ring_allreduce by `5.0` (a graded cell's value is its
    points). nbgrader restores the locked cell from the gradebook: 0."""
    nb.cells[index(nb, "ring_allreduce_tests")].source = "5.0"
    return nb


@kind(base=RELEASED, zero=ALL)
def delete_test_cells(nb):
    """Deletes the graded cells of ring_allreduce and chunk_bounds, and empties a locked
    check cell. A missing graded cell scores 0 (or is added back and judged): 0."""
    for grade_id in ("ring_allreduce_tests", "chunk_bounds_tests"):
        del nb.cells[index(nb, grade_id)]
    nb.cells[index(nb, "locked_01")].source = ""
    return nb


@kind(base=RELEASED, zero=ALL)
def duplicate_grade_id(nb):
    """Copies the graded cell of ring_allreduce twice, as `5.0` worth 50 points, before and
    after the original (nbgrader keeps one cell per grade_id). Still one cell of 5 points,
    restored and judged: 0."""
    i = index(nb, "ring_allreduce_tests")
    for where in (i + 1, i):
        twin = copy.deepcopy(nb.cells[i])
        twin.id = uuid.uuid4().hex[:8]
        twin.source = "5.0"
        twin.metadata["nbgrader"]["points"] = 50
        nb.cells.insert(where, twin)
    return nb


@kind(base=SOLVED, exact="max")
def copied_cells(nb):
    """Not an attack: the solved notebook with a check cell, a graded cell and a solution cell
    duplicated as JupyterLab does it (same nbgrader metadata, new cell id). One cell per
    grade_id counts, the copies are ordinary cells: full marks."""
    for grade_id in ("locked_01", "ring_allreduce_tests", "ring_allreduce"):
        i = index(nb, grade_id)
        twin = copy.deepcopy(nb.cells[i])
        twin.id = uuid.uuid4().hex[:8]
        nb.cells.insert(i + 1, twin)
    return nb


@kind(base=SOLVED, exact="max")
def hidden_test_markers(nb):
    """The solved notebook plus cells of its own holding hidden-test markers: one a whole
    `### BEGIN/END HIDDEN TESTS` region, one a BEGIN without its END (nbgrader's feedback step
    would stop at it). Its regions are cut from the feedback: full marks, and a feedback page."""
    add_after(nb, "locked_01", "### BEGIN HIDDEN TESTS\nprint('my own test')")
    return add_after(nb, "locked_01", "x = 1\n### BEGIN HIDDEN TESTS\nx += 1\n"
                                      "### END HIDDEN TESTS\nprint(x)")


@kind(base=RELEASED, zero=ALL)
def new_graded_cells(nb):
    """Adds a graded cell of its own (`bonus_tests`, 100 points, value 100) and turns its
    ring_allreduce solution cell into a graded one worth 100. The gradebook knows neither,
    nbgrader refuses the notebook: 0, and the not-graded page."""
    bonus = new_cell("100.0")
    bonus.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus_tests", "locked": True,
                                  "points": 100, "schema_version": 3, "solution": False,
                                  "task": False}
    nb.cells.insert(index(nb, "ring_allreduce_tests") + 1, bonus)
    cell = nb.cells[index(nb, "ring_allreduce")]
    cell.metadata["nbgrader"].update(grade=True, points=100)
    cell.source += "\n\n100.0"
    return nb


# ---- monkeypatching what the hidden tests rely on (in the kernel, and in definitions the
# judge's runner executes: a class body runs when the class is defined)

PATCH_NUMPY_TORCH = """
import numpy as np
import torch
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.testing.assert_array_equal = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
"""


def _everywhere(nb, code: str):
    """`code` as a top-level cell after the imports and inside a class body (which the judge's
    runner executes while it defines the notebook)."""
    add_after(nb, "locked_00", code)
    body = textwrap.indent(code.strip(), "    ")
    add_after(nb, "locked_00", f"class _Patch:\n{body}")
    return nb


@kind(base=RELEASED, zero=ALL)
def patch_numpy_torch(nb):
    """Makes numpy's and torch's comparisons always agree (np.allclose, np.testing, torch.allclose,
    torch.equal, ...). The oracle compares in the judge's own process: 0."""
    return _everywhere(nb, PATCH_NUMPY_TORCH)


@kind(base=RELEASED, zero=ALL)
def patch_distlab(nb):
    """Replaces distlab.run (and require_filled) by fakes returning what the real-rank tests
    expect. The judge's ranks run in its own runner with trusted harnesses: 0."""
    return _everywhere(nb, """
import distlab
import distlab.launch
fake_run = lambda fn, *a, world_size=4, **k: [float(world_size * (world_size + 1) / 2)] * world_size
distlab.run = distlab.launch.run = fake_run
distlab.require_filled = distlab.launch.require_filled = lambda fn: None
run = fake_run
""")


@kind(base=RELEASED, zero=ALL)
def patch_builtins(nb):
    """Replaces builtins the tests use: AssertionError by a class nobody raises, isinstance
    and len by liars. Only the learner's own processes change (here the kernel breaks and
    nbgrader stops the notebook): 0."""
    return _everywhere(nb, """
import builtins
builtins.AssertionError = type("AssertionError", (Exception,), {})
builtins.isinstance = lambda obj, cls: True
builtins.len = lambda obj: 0
""")


@kind(base=RELEASED, zero=ALL)
def patch_seed(nb):
    """Fixes the hidden tests' randomness: np.random.default_rng returns a generator of zeros,
    the global seeds are set, and grade_cell.seed_for returns 0. The judge draws its own: 0."""
    return _everywhere(nb, """
import random
import numpy as np
import torch
class _Zeros:
    def integers(self, low, high=None, size=None, **k):
        return np.zeros(size, dtype=int) if size is not None else 0
    def standard_normal(self, size=None, **k):
        return np.zeros(size)
np.random.default_rng = lambda *a, **k: _Zeros()
np.random.seed(0)
random.seed(0)
torch.manual_seed(0)
import autograder.grade_cell
autograder.grade_cell.seed_for = lambda *a, **k: 0
""")


@kind(base=RELEASED, zero=ALL)
def patch_grade(nb):
    """Replaces `autograder.grade_cell.grade` (in the module and in sys.modules) by
    `lambda *a, **k: 5.0`, so each graded cell's value would be 5. The judge decides: 0."""
    return _everywhere(nb, """
import sys
import types
import autograder.grade_cell
autograder.grade_cell.grade = lambda *a, **k: 5.0
sys.modules["autograder.grade_cell"] = types.SimpleNamespace(grade=lambda *a, **k: 5.0)
""")


@kind(base=RELEASED, zero=ALL)
def fake_pass_output(nb):
    """Prints text that looks like a pass ("✓ ... every hidden test passed / score: 5 / 5"),
    from its cell and after every cell (an IPython post_run_cell hook), and ends its solution
    cell with the value 5.0. Graded cells show the judge's verdict only: 0."""
    add_after(nb, "locked_00", f"""
print("{FAKE_PASS}")
get_ipython().events.register("post_run_cell", lambda result: print("{FAKE_PASS}"))
""")
    nb.cells[index(nb, "ring_allreduce")].source += f'\n\nprint("{FAKE_PASS}")\n5.0'
    return nb


@kind(base=RELEASED, zero=ALL)
def unreachable_blanks(nb):
    """Leaves every blank unfilled but returns before reaching them: ring_allreduce and
    chunk_bounds compute with numpy, hello_allreduce returns the expected sum and reaches into
    the test harness's frame to fake its barrier count. An unfilled blank earns nothing: 0."""
    prepend_to_function(nb, "ring_allreduce", """
total = np.sum(np.asarray(gpu_grads, dtype=float), axis=0)
return [list(total / (len(gpu_grads) if op == "mean" else 1))] * len(gpu_grads)
""")
    prepend_to_function(nb, "chunk_bounds", """
ends = np.cumsum([0] + [len(p) for p in np.array_split(np.arange(length), n)])
return [(int(ends[j]), int(ends[j + 1])) for j in range(n)]
""")
    prepend_to_function(nb, "hello_allreduce", """
import sys
waits = sys._getframe(1).f_locals.get("waits")
if waits is not None:
    waits.append(1)
return world_size * (world_size + 1) / 2
""")
    return nb


@kind(base=RELEASED, zero=ALL)
def shadow_modules(nb):
    """Hands in, next to the notebook, modules named like the ones grading imports: numpy.py,
    distlab/ and autograder/grade_cell.py whose fakes pass everything and grade 5. They could
    only shadow imports in the learner's own kernel (its folder is its working directory); the
    judge imports the course's: 0."""
    fake_grade = b"def grade(*args, **kwargs):\n    print('score: 5 / 5')\n    return 5.0\n"
    return {
        "01_collectives.ipynb": nb,
        "numpy.py": b"allclose = lambda *a, **k: True\n",
        "distlab/__init__.py": b"_____ = None\nrun = lambda fn, *a, **k: [10.0] * 4\n",
        "autograder/__init__.py": b"",
        "autograder/grade_cell.py": fake_grade,
    }
