"""Does the judge run a submission's functions in a separate runner, bring back only plain
values, and stop a call that runs too long or kills its process? (The sandbox around the
runner has tests of its own: here the runner runs without it.)"""

import math
import time

import pytest

from autograder import judge
from autograder.judge import sandbox

CELLS = [
    "import os, time\n",
    "def double(x):\n    return 2 * x\n",
    "def slow():\n    time.sleep(60)\n",
    "def leave():\n    os._exit(3)\n",
    "def fail():\n    raise KeyError('missing')\n",
    "def odd():\n    class Thing: pass\n    return Thing()\n",
    "print('a check cell that must not run in the runner')\nraise SystemExit\n",
]


@pytest.fixture(autouse=True)
def no_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox, "available", lambda: False)


@pytest.fixture
def runner():
    runner = judge.Runner(CELLS, call_seconds=3)
    yield runner
    runner.close()


def test_a_call_comes_back_as_a_plain_value(runner):
    """Does a call of a submitted function return its value?"""
    assert judge.Remote(runner, "double")(21) == 42
    assert judge.Remote(runner, "double")([1]) == [1, 1]


def test_a_builtin_exception_is_raised_as_itself(runner):
    """Does a KeyError in the learner's code come back as a KeyError?"""
    with pytest.raises(KeyError, match="missing"):
        judge.Remote(runner, "fail")()


def test_a_value_that_cannot_cross_is_an_error_not_an_object(runner):
    """Is an object of the learner's class refused on the runner's side?"""
    with pytest.raises(TypeError, match="cannot send a Thing"):
        judge.Remote(runner, "odd")()


def test_a_slow_call_is_stopped_after_call_seconds(runner):
    """Does a call that does not return within call_seconds raise TimeoutError, and is the
    runner replaced for the next call?"""
    with pytest.raises(TimeoutError, match="did not return within 3 s"):
        judge.Remote(runner, "slow")()
    assert judge.Remote(runner, "double")(1) == 2


def test_a_call_that_kills_its_process_is_an_error(runner):
    """Does os._exit in the learner's code fail the call, not the judge?"""
    with pytest.raises(RuntimeError, match="stopped the process"):
        judge.Remote(runner, "leave")()


def test_past_the_deadline_nothing_starts():
    """After the function's deadline, does every request fail at once without a runner?"""
    late = judge.Runner(CELLS, deadline=time.monotonic() - 1)
    with pytest.raises(TimeoutError, match="ran out"):
        judge.Remote(late, "double")(1)
    assert late._proc is None


def test_an_undefined_function_is_a_name_error(runner):
    """Is a graded function the submission never defined a NameError?"""
    with pytest.raises(NameError, match="'missing'"):
        judge.Remote(runner, "missing")()


def test_verdicts_grade_each_function_and_survive_a_broken_one():
    """Does grade_cell.verdicts() (the hidden tests here, the functions in the judge's runner)
    give the reference full points and a missing function zero, in order?"""
    from autograder import grade_cell, reference

    cells = [f"import numpy as np\n{reference.locate('chunk_bounds')[1].source}\n"]
    verdicts = grade_cell.verdicts(cells, [("chunk_bounds", None), ("ring_allreduce", None)],
                                   "t", call_seconds=10, function_seconds=math.inf)
    (earned, possible, _), (zero, _, report) = verdicts
    assert earned == possible > 0
    assert zero == 0 and "ring_allreduce" in report[0]


def test_each_fork_starts_from_the_cells_not_from_what_the_last_one_left():
    """Does a fresh fork see the cells as defined, not a global an earlier call changed, while
    the runner process itself (its start-up paid once) stays the same?"""
    cells = ["def remember(x, seen=[]):\n    seen.append(x)\n    return list(seen)\n"]
    runner = judge.Runner(cells, call_seconds=10)
    try:
        assert judge.Remote(runner, "remember")(1) == [1]
        assert judge.Remote(runner, "remember")(2) == [1, 2]  # the same child: state kept
        pid = runner._proc.pid
        runner.fork()
        assert judge.Remote(runner, "remember")(3) == [3]
        runner.fork("def remember(x):\n    return ['candidate', x]\n")
        assert judge.Remote(runner, "remember")(4) == ["candidate", 4]
        assert runner._proc.pid == pid
    finally:
        runner.close()


def test_the_runner_preloads_only_public_modules_of_trusted_packages():
    """Are torch, numpy and distlab modules the cells import the ones the runner imports before
    it forks, and never the grading side (not even the graded cells' grade_cell: the runner's
    sandbox hides it), a name the learner picks elsewhere, a private module or a __main__
    (importing those may run something)?"""
    from autograder.judge.runner import preloadable

    cells = ["import os\nimport numpy as np\nimport torch.distributed as dist\n"
             "from distlab.pipeline_parallel import show_schedule\n",
             "from autograder.grade_cell import grade\nimport autograder.batch.__main__\n"
             "from distlab.drills.__main__ import main\nimport torch._dynamo\nimport antigravity\n"
             "from . import sibling\nimport numpy\n",
             "def f():\n    import distlab.zero  # inside a function: not at import time\n"]
    assert preloadable(cells) == ["numpy", "torch.distributed", "distlab.pipeline_parallel"]


def test_a_child_that_changes_a_preloaded_module_leaves_the_next_child_a_clean_one():
    """numpy is loaded in the runner before it forks: does a change one graded function makes
    to it stay in that function's process?"""
    cells = ["import numpy as np\n",
             "def poison():\n    np.poisoned = True\n    return True\n",
             "def poisoned():\n    return getattr(np, 'poisoned', False)\n"]
    runner = judge.Runner(cells, call_seconds=10)
    try:
        assert judge.Remote(runner, "poison")() is True
        assert judge.Remote(runner, "poisoned")() is True  # the same child
        runner.fork()
        assert judge.Remote(runner, "poisoned")() is False
    finally:
        runner.close()


# ---- the runner's sandbox: no hidden test, oracle or answer within reach

REAL_AVAILABLE = sandbox.available  # this module's tests run the runner without its sandbox
needs_sandbox = pytest.mark.skipif(bool(sandbox.why_unavailable()),
                                   reason=f"the runner's sandbox: {sandbox.why_unavailable()}")

PROBE = '''
def probe(modules, folders):
    import importlib, os
    seen = {}
    for name in modules:
        try:
            importlib.import_module(name)
            seen[name] = "imported"
        except ImportError as err:
            seen[name] = type(err).__name__
    for path in folders:
        seen[path] = sorted(os.listdir(path)) if os.path.isdir(path) else "absent"
    return seen
'''


@pytest.fixture
def sandboxed(monkeypatch):
    """The runner in its sandbox, as grading starts it."""
    monkeypatch.setattr(sandbox, "available", REAL_AVAILABLE)


@needs_sandbox
def test_the_runner_sees_distlab_and_the_judge_and_nothing_else_of_the_course(sandboxed):
    """In the runner's sandbox, can the learner's code import distlab and the judge's own
    modules, but no hidden test, oracle or reference, and find no solution, test or other
    grading module to read?"""
    from distlab.source.paths import ROOT

    runner = judge.Runner([PROBE], call_seconds=30)
    try:
        hidden = ["autograder.exercises", "autograder.exercises.collectives",
                  "autograder.reference", "autograder.grade_cell", "autograder.solved",
                  "autograder.mutants", "autograder.drill_judge"]
        folders = [str(ROOT), str(ROOT / "autograder"), str(ROOT / "solutions"),
                   str(ROOT / "tests")]
        seen = judge.Remote(runner, "probe")(hidden + ["distlab.collectives",
                                                       "autograder.judge.wire"], folders)
    finally:
        runner.close()
    assert {name: seen[name] for name in hidden} == dict.fromkeys(hidden, "ModuleNotFoundError")
    assert seen["distlab.collectives"] == seen["autograder.judge.wire"] == "imported"
    assert set(seen[str(ROOT)]) <= {"autograder", "src", ".venv", "solutions", "grading", ".git"}
    assert seen[str(ROOT / "autograder")] == ["judge"]
    assert seen[str(ROOT / "solutions")] in ([], "absent")
    assert seen[str(ROOT / "tests")] == "absent"


ORACLE = '__import__("autograder.exercises.collectives", fromlist=["_"])._oracle_bounds'
SHORTCUT_FILE = ('__import__("distlab.source.paths", fromlist=["_"]).ROOT / "tests" / "shortcuts"'
                 ' / "01_collectives.py"')
# ring_allreduce's blank [2], read from the honest answers of the shortcut suite
FROM_SHORTCUTS = (f'eval(__import__("re").search(r\'"ring_allreduce", \\{{2: "(.*?)"\', '
                  f'open({SHORTCUT_FILE}).read())[1], {{"i": i, "step": step}}) % N')
# chunk_bounds's blank, from the hidden test's oracle
FROM_ORACLE = {1: f"(oracle := {ORACLE}(length, n))[j][1] - oracle[j][0]"}


@needs_sandbox
def test_a_blank_that_takes_the_answer_from_the_grading_side_earns_nothing(sandboxed):
    """Without the runner's allowlist, chunk_bounds whose blanks call the hidden test's oracle
    (exercises.collectives._oracle_bounds) earned its point, and ring_allreduce whose blank [2]
    reads its answer from tests/shortcuts/ its 5. In the sandbox, does neither blank earn its
    point, failing on the import and the read?"""
    from notebook_testing import answered

    from autograder import grade_cell, reference, solved

    edits = {"chunk_bounds": FROM_ORACLE, "ring_allreduce": {2: FROM_SHORTCUTS}}
    cells = []
    for cell in solved.load("01_collectives").cells:
        name = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code":
            source = cell.source
            if name in edits:
                source = answered(source, reference.locate(name)[2], edits[name], name)
            cells.append(source)
    (oracle, _, oracle_report), (read, possible, read_report) = grade_cell.verdicts(
        cells, [("chunk_bounds", None), ("ring_allreduce", None)], "t", call_seconds=30)
    assert oracle == 0, oracle_report
    assert "No module named 'autograder.exercises'" in "\n".join(oracle_report), oracle_report
    assert read == possible - 1, read_report  # blank [2] earns nothing
    assert "No such file or directory" in "\n".join(read_report), read_report
