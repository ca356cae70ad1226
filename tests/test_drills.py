"""Do drills draw fair blanks over the solved snippets, judge answers the way grading does,
remember weak spots, and say clearly what is wrong with bad input?"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.exercises import all_tests
from distlab import drills
from distlab.drills import __main__ as cli
from distlab.drills import check, history, positions, snippets
from distlab.drills.check import Checker
from distlab.source import paths

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def private_history(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTLAB_DRILLS_DB", str(tmp_path / "drills.sqlite"))


@pytest.fixture(scope="module")
def checker():
    checker = Checker()
    yield checker
    checker.close()


def course(tmp_path, ids=("01_collectives", "02_cost_models"), setting=None):
    """A copy of some solved sources (and a drills.toml), as DISTLAB_SOLUTIONS_DIR sees it."""
    for assignment in ids:
        shutil.copytree(paths.SOLUTIONS / assignment, tmp_path / "solutions" / assignment)
    if setting is not None:
        (tmp_path / "drills.toml").write_text(setting)
    return tmp_path / "solutions"


def blank_of(name, text):
    """(snippet, the position whose text is `text`: the first such)."""
    snippet = snippets.get(name)
    return snippet, next(p for p in positions.maskable(snippet.source, name) if p.text == text)


# ------------------------------------------------------------------ snippets


def test_every_notebook_tags_core_snippets_that_exist_and_have_hidden_tests():
    """Does every notebook contribute 2-4 snippets, each a solved definition with a hidden test?"""
    found = snippets.load(every=True)
    tests = all_tests()
    for assignment in paths.assignment_ids():
        mine = [s for s in found.values() if s.assignment == assignment]
        assert 2 <= len(mine) <= 4, f"{assignment}: {len(mine)} drill snippets"
    for name, snippet in found.items():
        assert snippet.source.startswith(("def ", "class ", "@")), name
        assert name in tests, f"{name}: a drill snippet without a hidden test"


def test_a_tag_that_points_at_nothing_fails_loudly(tmp_path):
    """Does a drill tag naming a function its cell does not define name the file and line?"""
    folder = tmp_path / "solutions" / "99_toy"
    folder.mkdir(parents=True)
    (folder / "99_toy.py").write_text('# %%\nimport math\n\n# %% solution="gone" drill\n'
                                      "def here():\n    return 1\n")
    with pytest.raises(snippets.DrillError, match=r"99_toy.py:4: the drill tag names 'gone'"):
        snippets.load(tmp_path / "solutions")


def test_snippets_are_the_solved_code_without_markers():
    """Is a snippet the solved function with its BLANK/ACCEPT comments cut, and nothing else?"""
    snippet = snippets.get("ring_allreduce")
    raw = (paths.SOLUTIONS / "01_collectives" / "01_collectives.py").read_text()
    assert "BLANK" not in snippet.source and "ACCEPT" not in snippet.source
    assert "    right = [(i + 1) % N for i in range(N)]\n" in snippet.source
    assert "# Phase 1: N-1 steps" in snippet.source  # an ordinary comment stays
    for line in snippet.source.split("\n"):
        assert any(raw_line.startswith(line) for raw_line in raw.split("\n")), line


def test_a_changed_solution_changes_its_drill(tmp_path):
    """Is a snippet read from the solved source each time it changes, never a stale copy?"""
    solutions = course(tmp_path, ids=("02_cost_models",))
    before = snippets.load(solutions)["allreduce_time_ring"].source
    path = solutions / "02_cost_models" / "02_cost_models.py"
    path.write_text(path.read_text().replace("steps = 2 * (n - 1)", "steps = 2 * n - 2"))
    os.utime(path, ns=(1, path.stat().st_mtime_ns + 10**9))  # a coarse clock: a new stamp
    after = snippets.load(solutions)["allreduce_time_ring"].source
    assert "2 * (n - 1)" in before and "steps = 2 * n - 2" in after


def test_the_instructor_setting_filters_the_snippets(tmp_path):
    """Does drills.toml open only the notebooks it lists (all by default)?"""
    solutions = course(tmp_path)
    assert {s.assignment for s in snippets.load(solutions).values()} == \
        {"01_collectives", "02_cost_models"}
    (tmp_path / "drills.toml").write_text('notebooks = ["02_cost_models"]\n')
    assert {s.assignment for s in snippets.load(solutions).values()} == {"02_cost_models"}
    with pytest.raises(snippets.DrillError, match="unknown snippet 'ring_allreduce'"):
        snippets.get("ring_allreduce", solutions)
    (tmp_path / "drills.toml").write_text('notebooks = "01"\n')
    with pytest.raises(snippets.DrillError, match='must be "all" or a list'):
        snippets.load(solutions)


def test_the_course_setting_opens_every_notebook_by_default():
    """Does the course's own drills.toml say "all"?"""
    assert snippets.allowed_notebooks(paths.SOLUTIONS) is None


# ------------------------------------------------------------------ positions


DRILLED = [name for name in snippets.load(every=True) if name in all_tests()]
# seed 000's drill mode: maskable positions of its ring / DDP / TP / pipeline snippets
SEED_COUNTS = {"ring_allreduce": 53, "ddp_train": 63,
               ("column_parallel_forward", "row_parallel_forward"): 51,
               ("gpipe_table", "one_f_one_b_order", "run_stage"): 58}


def trivial(position) -> str | None:
    """Why a drawn position is trivia rather than an idea, or None."""
    import ast
    import builtins
    import keyword

    text = position.text.strip()
    if position.kind not in positions.KINDS:
        return f"kind {position.kind!r}"
    if keyword.iskeyword(text) or not any(c.isalnum() for c in text):
        return "a keyword or punctuation"
    node = ast.parse(text, mode="eval").body if position.kind not in ("step", "index") else None
    if isinstance(node, ast.Constant):
        return "a literal"
    if isinstance(node, ast.Name) and position.kind not in ("tensor", "collective argument"):
        return "a lone name"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and hasattr(builtins, node.func.id) \
            and all(isinstance(a, ast.Name | ast.Constant) for a in node.args):
        return "a builtin on plain names"
    return None


@pytest.mark.parametrize("name", list(snippets.load(every=True)))
def test_positions_are_one_line_spans_of_ideas(name):
    """Is every maskable position a one-line span of real code, an idea and not trivia?"""
    source = snippets.load(every=True)[name].source
    found = positions.maskable(source, name)
    if name in DRILLED:
        assert len(found) >= 2, f"{name}: {len(found)} maskable positions"
    for p in found:
        assert source[p.start:p.end] == p.text and "\n" not in p.text
        assert trivial(p) is None, (p, trivial(p))
    assert len({p.key for p in found}) == len(found)


def test_sampled_draws_across_all_snippets_are_ideas():
    """Do 5 draws of every snippet hold only ideas (index and offset expressions, conditions,
    formulas, collectives and the arguments that matter, the tensor a step moves, steps)?"""
    drawn = []
    for name in DRILLED:
        found = positions.maskable(snippets.get(name).source, name)
        for seed in range(1, 6):
            drawn += positions.choose(found, min(5, len(positions.fitting(found))), seed, name)
    assert len(drawn) > 200
    assert [(p.text, trivial(p)) for p in drawn if trivial(p)] == []
    assert {p.kind for p in drawn} == set(positions.KINDS)


def test_counts_per_snippet_against_the_reference_drill_modes():
    """Are the counts of the ring / DDP / TP / pipeline snippets of the order of seed 000's
    drill mode (53 / 63 / 51 / 58), never above it by much? Theirs count trivia (names,
    literals); ours count ideas the hidden test sees, so they are lower where a test sees
    little (ddp_train: 9 of its 19 ideas; TP's snippets are two short functions: 04's f/g
    blank leaves one maskable position, so it is not drilled)."""
    for names, theirs in SEED_COUNTS.items():
        names = names if isinstance(names, tuple) else (names,)
        ours = sum(len(positions.maskable(snippets.get(n).source, n)) for n in names)
        assert 8 <= ours <= theirs * 1.5, (names, ours, theirs)


def test_the_verdicts_are_current():
    """Has every candidate position of every snippet a verdict computed against its line as it
    is now and its hidden test as it is now? Else run `tests/test_drills.py verdicts`."""
    missing = {name: len(stale(snippets.get(name))) for name in DRILLED}
    assert {n: k for n, k in missing.items() if k} == {}, \
        "stale drill verdicts: run .venv/bin/python tests/test_drills.py verdicts"


@pytest.mark.parametrize(("name", "text"), [("ddp_train", "model.train()"),
                                            ("ddp_train", "check_params_in_sync(model)"),
                                            ("ring_allreduce", "(i - step) % N")])
def test_spans_the_hidden_test_cannot_see_are_not_drilled(name, text):
    """Is a position whose mutants pass the hidden test (model.eval() for model.train(), pass
    for the sync check) a candidate that is never masked?"""
    source = snippets.get(name).source
    assert text in [p.text for p in positions.candidates(source)]
    assert text not in [p.text for p in positions.maskable(source, name)]


def test_no_snippet_cites_the_seed_documents():
    for name, snippet in snippets.load(every=True).items():
        assert "seed" not in snippet.source.lower(), name


@pytest.mark.parametrize("name", ["ring_allreduce", "ShardedOptimizer", "allreduce_time_ring"])
def test_drawn_blanks_never_overlap(name):
    """Do the blanks of a drill never overlap, up to as many as fit?"""
    found = positions.maskable(snippets.get(name).source, name)
    most = len(positions.fitting(found))
    for seed in range(30):
        for count in sorted({1, min(5, most), most}):
            chosen = positions.choose(found, count, seed, name)
            assert len(chosen) == count
            assert not any(a.overlaps(b) for a in chosen for b in chosen if a is not b)


def test_the_same_seed_and_history_give_the_same_blanks():
    """Same seed, same history: same blanks; another seed: other blanks."""
    first = drills.draw("ring_allreduce", 6, seed=7)[2]
    assert drills.draw("ring_allreduce", 6, seed=7)[2] == first
    assert drills.draw("ring_allreduce", 6, seed=8)[2] != first


def test_missed_positions_come_back_unless_history_is_ignored():
    """Is a position missed often masked more often, and does --ignore-history ignore that?"""
    snippet, found, _ = drills.draw("ring_allreduce", 1, seed=0)
    weak = next(p for p in found if p.text == "(i - step + 1) % N")
    for _ in range(10):
        history.record("ring_allreduce", {weak.key: False})
    seeds = range(40)
    with_history = sum(weak in drills.draw("ring_allreduce", 4, s)[2] for s in seeds)
    without = sum(weak in drills.draw("ring_allreduce", 4, s, ignore_history=True)[2]
                  for s in seeds)
    assert with_history > 3 * max(without, 1)
    assert drills.draw("ring_allreduce", 4, 0)[2] == drills.draw("ring_allreduce", 4, 0)[2]


def test_template_puts_blanks_inline_in_their_lines():
    """Does the drill show the code line by line, with each blank where its span was?"""
    snippet, right = blank_of("ring_allreduce", "(i + 1) % N")
    lines = positions.template(snippet.source, [right])
    assert len(lines) == len(snippet.source.split("\n"))
    row = next(line for line in lines if 0 in line)
    assert row == ["    right = [", 0, " for i in range(N)]"]


# ------------------------------------------------------------------ checking


def test_answers_equal_after_normalising_spacing_and_quotes():
    """Are spacing and quote style ignored by the text check, and nothing else?"""
    assert check.normalise("( i+1 )%N") == check.normalise("(i + 1) % N")
    assert check.normalise("'gloo'") == check.normalise('"gloo"')
    assert check.normalise("(1 + i) % N") != check.normalise("(i + 1) % N")


def test_a_text_match_is_right_without_running(checker):
    snippet, right = blank_of("ring_allreduce", "(i + 1) % N")
    verdict, = checker.check(snippet, [right], ["(i+1)%N"])
    assert verdict.right and verdict.why == "as the reference"


def test_an_equivalent_answer_passes_the_hidden_test_and_a_wrong_one_does_not(checker):
    """Is `(1 + i) % N` accepted for `(i + 1) % N` by running, and a wrong index rejected,
    each blank with its own verdict?"""
    snippet, right = blank_of("ring_allreduce", "(i + 1) % N")
    _, chunk = blank_of("ring_allreduce", "(i - step + 1) % N")
    good, bad = checker.check(snippet, [right, chunk], ["(1 + i) % N", "(i - step + 2) % N"])
    assert good.right and good.why == "ran the hidden test: passes"
    assert bad.status == check.WRONG and bad.why.startswith("ran the hidden test: ")
    both, = checker.check(snippet, [right], ["(i + 2) % N"])
    assert both.status == check.WRONG


def test_bad_answers_get_a_clear_verdict_and_keep_the_others(checker):
    """Do an empty answer and one that is not Python say so, without losing the others?"""
    snippet, right = blank_of("ring_allreduce", "(i + 1) % N")
    _, chunk = blank_of("ring_allreduce", "(i - step + 1) % N")
    _, size = blank_of("ring_allreduce", "length // N")
    empty, broken, fine = checker.check(snippet, [right, chunk, size],
                                        ["  ", "(i - step + 1", "length//N"])
    assert (empty.status, empty.why) == (check.EMPTY, "not filled")
    assert broken.status == check.INVALID and "not valid Python here" in broken.why
    assert broken.answer == "(i - step + 1" and fine.right


def test_without_the_grading_side_answers_are_checked_by_text_only():
    """Where autograder is not installed, does the checker say so and compare text?"""
    code = ("import sys; sys.modules['autograder'] = None\n"
            "from distlab.drills import Checker, get, maskable\n"
            "s = get('ring_allreduce'); p = [x for x in maskable(s.source) "
            "if x.text == '(i + 1) % N']\n"
            "c = Checker(); print(c.text_only)\n"
            "print([v.status for v in c.check(s, p, ['(1 + i) % N'])])\n"
            "print([v.status for v in c.check(s, p, ['(i+1) % N'])])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split("\n")
    assert out[:3] == ["the hidden tests are not installed here", "['differs']", "['right']"]


def test_the_checker_finds_the_grading_sides_judge_through_its_entry_point():
    """Is the judge distlab uses the one autograder registers (distlab never imports it)?"""
    from autograder.drill_judge import JUDGE
    from distlab import judges

    assert judges.find_judge() is JUDGE and isinstance(JUDGE, judges.Judge)
    assert Checker().judge is JUDGE and Checker().text_only == ""


def test_without_a_judge_or_with_a_broken_one_the_checker_says_why(monkeypatch):
    from distlab import judges

    class Broken:
        name, value = "broken", "nowhere:JUDGE"

        def load(self):
            raise RuntimeError("no luck")

    for found, why in (([], judges.NOT_INSTALLED),
                       ([Broken()], "the course's judge does not load here "
                                    "(broken: RuntimeError: no luck)")):
        monkeypatch.setattr(judges, "entry_points", lambda group, found=found: found)
        judges._found.cache_clear()
        try:
            assert judges.find_judge() is None and Checker().text_only == why
        finally:
            judges._found.cache_clear()


class ThreeRunner:
    """A runner of the few-line judge below: its hidden test wants a function returning 3.
    `starts` counts its starts; the first `failing_starts` of them fail, as a runner that dies
    while starting does."""

    def __init__(self, starts: list, failing_starts: int = 0):
        self.starts, self.failing_starts = starts, failing_starts

    def start(self):
        self.starts.append(1)
        if len(self.starts) <= self.failing_starts:
            raise RuntimeError("the code under test stopped the process running it")

    def test(self, name, candidate, seconds):
        self.start()
        namespace = {}
        exec(candidate, namespace)
        assert namespace[name]() == 3, "returns the wrong number"

    def close(self):
        pass


class ThreeJudge:
    """distlab.judges.Judge in a few lines, its runners ThreeRunners."""

    def __init__(self, failing_starts: int = 0):
        self.starts, self.failing_starts = [], failing_starts

    def load_test(self, name):
        pass

    def runner(self, cells, call_seconds):
        return ThreeRunner(self.starts, self.failing_starts)

    def released_template(self, name):
        return None


THREE = snippets.Snippet("three", "00_toy", "def three():\n    return 1 + 2\n", (), "toy")


def test_any_judge_that_keeps_to_the_interface_checks_drills():
    """Checker asks only distlab.judges.Judge: a judge of a few lines, whose hidden test wants
    a function returning 3, judges answers run through it."""
    position = next(p for p in positions.candidates(THREE.source) if p.text == "1 + 2")
    checker = Checker(ThreeJudge())
    right, wrong = (checker.check(THREE, [position], [answer])[0] for answer in ("2 + 1", "4"))
    assert right.right and right.why == "ran the hidden test: passes"
    assert wrong.status == check.WRONG and "returns the wrong number" in wrong.why


def test_a_warm_up_that_fails_is_quiet_and_the_check_starts_again(monkeypatch):
    """A runner that dies while warming up in the background (a loaded machine, a killed
    sandbox) prints no thread traceback into the learner's drill: the check that follows starts
    the runner again and passes or says what went wrong."""
    import threading

    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    judge = ThreeJudge(failing_starts=1)
    position = next(p for p in positions.candidates(THREE.source) if p.text == "1 + 2")
    checker = Checker(judge)
    checker.warm(THREE).join(10)
    assert raised == [] and len(judge.starts) == 1
    assert checker.check(THREE, [position], ["2 + 1"])[0].right


def test_unknown_snippets_and_too_many_blanks_are_refused():
    with pytest.raises(drills.DrillError, match="unknown snippet 'nope'; the snippets are: "):
        drills.draw("nope", 3, 0)
    count = len(drills.draw("ring_allreduce", 1, 0)[1])
    with pytest.raises(drills.DrillError, match="1000 blanks asked, but ring_allreduce has "
                                                f"only {count} maskable positions"):
        drills.draw("ring_allreduce", 1000, 0)
    with pytest.raises(drills.DrillError, match="at most .* fit at once"):
        drills.draw("ring_allreduce", count, 0)
    with pytest.raises(drills.DrillError, match="a whole number"):
        drills.draw("ring_allreduce", -1, 0)


# ------------------------------------------------------------------ history


def test_history_lives_outside_the_course_and_resets():
    """Is the default history file in the user's data folder, and does reset() forget?"""
    env = {k: v for k, v in os.environ.items() if k != "DISTLAB_DRILLS_DB"}
    default = subprocess.run([sys.executable, "-c", "from distlab.drills import history; "
                              "print(history.path())"], capture_output=True, text=True,
                             env=env, check=True).stdout.strip()
    assert not Path(default).is_relative_to(ROOT) and default.endswith("distlab/drills.sqlite")
    history.record("ring_allreduce", {"N#0": False, "N#1": True})
    assert history.misses("ring_allreduce") == {"N#0": 1}
    assert history.mastery("ring_allreduce", ["N#0", "N#1"]) == 0.5
    history.record("ring_allreduce", {"N#0": True})
    assert history.misses("ring_allreduce") == {}
    history.reset("ring_allreduce")
    assert history.mastery("ring_allreduce", ["N#0", "N#1"]) == 0.0


# ------------------------------------------------------------------ the command line


def run_cli(*args, env=None):
    """The command line, judging in its own process unless `env` says otherwise (a warm
    server started by a test would outlive it)."""
    env = {**os.environ, "DISTLAB_DRILLS_SERVER": "0", **(env or {})}
    return subprocess.run([sys.executable, "-m", "distlab.drills", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env)


def test_the_warm_server_checks_again_and_stops(tmp_path):
    """Does `write` start a warm checker that `check` asks again (an answer the hidden test must
    run), and does `serve --stop` end it? How fast it answers is measured in `make bench`
    (bench/bench_drills.py: "CLI run check (warm server)", target 2 s), not here."""
    env = {"DISTLAB_DRILLS_SERVER": "1", "DISTLAB_DRILLS_RUN": str(tmp_path / "run")}
    out = tmp_path / "drill.ipynb"
    try:
        assert run_cli("write", "allreduce_time_ring", "--seed", "2", "--blanks", "1", "-o",
                       str(out), env=env).returncode == 0
        nb = json.loads(out.read_text())
        _, (position,), _ = cli._drill_of(out)
        nb["cells"][1]["source"] = nb["cells"][1]["source"].replace(
            "_____", f"({position.text}) * 1", 1)
        out.write_text(json.dumps(nb))
        for _ in range(2):  # the first check starts the server's runner, the second reuses it
            checked = run_cli("check", str(out), env=env)
            assert checked.returncode == 0 and "ran the hidden test: passes" in checked.stdout, \
                checked.stdout + checked.stderr
        assert list((tmp_path / "run").iterdir()), "no warm server was left to ask"
    finally:
        stopped = run_cli("serve", "--stop", env=env)
    assert "stopped the drill server" in stopped.stdout


def test_write_then_check_from_the_terminal(tmp_path):
    """Does `write` give a notebook with numbered blanks, and `check` a verdict per blank?"""
    out = tmp_path / "drill.ipynb"
    first = run_cli("write", "allreduce_time_ring", "--seed", "2", "--blanks", "3", "-o", str(out))
    assert first.returncode == 0 and "6 maskable | 3 masked" in first.stdout
    nb = json.loads(out.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = nb["cells"][1]["source"]
    assert code.count("_____") == 3 and "[1]" in code and "[3]" in code
    snippet, chosen, answers = cli._drill_of(out)
    assert answers == ["", "", ""]
    filled = code
    for position in chosen:
        filled = filled.replace("_____", position.text.replace(" ", ""), 1)
    nb["cells"][1]["source"] = filled
    out.write_text(json.dumps(nb))
    result = run_cli("check", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ✓ ") == 3 and "3 of 3 right" in result.stdout
    again = tmp_path / "again.ipynb"
    run_cli("write", "allreduce_time_ring", "--seed", "2", "--blanks", "3", "-o", str(again))
    assert json.loads(again.read_text())["cells"][1]["source"] == code  # same seed and history


def test_check_names_what_it_cannot_read(tmp_path):
    """Do a drill changed outside its blanks, and a file that is no drill, give rc 2 and why?"""
    out = tmp_path / "drill.ipynb"
    run_cli("write", "allreduce_time_ring", "--blanks", "2", "-o", str(out))
    nb = json.loads(out.read_text())
    nb["cells"][1]["source"] = nb["cells"][1]["source"].replace("def ", "def  x")
    out.write_text(json.dumps(nb))
    result = run_cli("check", str(out))
    assert result.returncode == 2 and "changed outside its blanks" in result.stderr
    (tmp_path / "other.ipynb").write_text("{}")
    result = run_cli("check", str(tmp_path / "other.ipynb"))
    assert result.returncode == 2 and "is not a drill notebook" in result.stderr
    result = run_cli("write", "ring_allreduce", "--blanks", "999")
    assert result.returncode == 2 and result.stderr.startswith("error: 999 blanks asked")


def test_a_kernel_with_a_drill_open_exits_at_once():
    """Does a process that opened a drill (its runner warming up in the background) exit? Its
    exit once waited for ever on the warm-up thread's lock."""
    code = "from distlab.drills.widget import Drill\nDrill()\nprint('made')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0 and "made" in result.stdout, result.stderr


# ------------------------------------------------------------------ what the hidden test sees
# The grading side of positions.maskable: which candidate positions each snippet's hidden test
# sees. It lives here, not in distlab (issue 25: distlab never imports the mutant generator
# or the strength check); `.venv/bin/python tests/test_drills.py verdicts [SNIPPET ...]`
# recomputes the missing or stale entries of src/distlab/drills/verdicts.json.


def hidden_test_digest(name: str) -> str:
    """A digest of the code of the hidden test module of snippet `name`."""
    from autograder.drill_verdicts import test_digest

    return test_digest(name)


def stale(snippet) -> list[str]:
    """The places of the snippet's candidates that have no current verdict."""
    entry = positions.stored()["snippets"].get(snippet.name)
    found = positions.candidates(snippet.source)
    if entry is None or entry.get("test") != hidden_test_digest(snippet.name):
        return positions.places(snippet.source, found)
    return [place for place in positions.places(snippet.source, found)
            if place not in entry["positions"]]


def _mutants(snippet, position, scope, original) -> list[tuple[str, str]]:
    """(kind, the snippet with that wrong answer at `position`) for the strength check's
    mutants of the position's text."""
    import ast

    from autograder.mutants import generate
    from distlab.source.markers import comment_start

    source = snippet.source
    first = source.rfind("\n", 0, position.start) + 1
    last = source.find("\n", position.end)
    line = source[first:last if last >= 0 else len(source)]
    column = comment_start(line)
    code = line if column is None else line[:column]
    before, after = code[:position.start - first], code[position.end - first:]
    made = []
    for mutant in generate(position.text, scope, before, after):
        filled = check.fill(source, {position: mutant.text})
        try:
            if ast.dump(ast.parse(filled)) == original:
                continue
        except SyntaxError:
            continue
        made.append((mutant.kind, filled))
    return made


def compute_verdicts(names=None, jobs=1, log=print) -> dict:
    """Run the strength check's mutants of every stale position through its hidden test (the
    strength check's workers), a position dropped at its first surviving mutant, and write
    verdicts.json; returns {snippet: (positions computed, maskable of them)}."""
    import ast
    import time

    from autograder import strength
    from autograder.mutants import scope_of

    every = snippets.load(every=True)
    data = json.loads(positions.VERDICTS.read_text()) if positions.VERDICTS.exists() else {}
    stored = data.get("snippets", {})
    plans = {}
    for name, snippet in every.items():
        if (names and name not in names) or name not in all_tests():
            continue  # a snippet without a hidden test has no maskable position
        todo = set(stale(snippet))
        if not todo:
            continue
        found = positions.candidates(snippet.source)
        tree = ast.parse(snippet.source)
        scope = scope_of(tree.body[0], strength.namespace(snippet.assignment,
                                                          snippets.solutions_dir()))
        work = [(place, _mutants(snippet, p, scope, ast.dump(tree)))
                for p, place in zip(found, positions.places(snippet.source, found), strict=True)
                if place in todo]
        plans[name] = (snippet, work)
    solutions = str(snippets.solutions_dir())

    def task(key, snippet, source, expect_pass, timeout):
        return {"id": key, "assignment": snippet.assignment, "solutions": solutions,
                "students": [""], "source": source, "tests": [snippet.name],
                "expect_pass": expect_pass, "timeout": timeout}

    started = time.monotonic()
    workers = strength.Workers(jobs)
    try:
        took = {}
        refs = [task(n, s, s.source, True, strength.REFERENCE_TIMEOUT_S)
                for n, (s, _) in plans.items()]
        for name, outcome in workers.run(refs):
            if not outcome.passed:
                raise RuntimeError(f"{name}: the reference fails its hidden test: "
                                   f"{outcome.reason}")
            took[name] = outcome.seconds
        for name, outcome in workers.run([t for t in refs if took[t["id"]] > strength.WARM_S]):
            took[name] = min(took[name], outcome.seconds)
        survivor = {(n, place): None for n, (_, work) in plans.items() for place, _ in work}
        made = {(n, place): m for n, (_, work) in plans.items() for place, m in work}
        wave = 0
        while True:  # the k-th mutant of every position still standing
            tasks = [task((n, place, made[n, place][wave][0]), plans[n][0],
                          made[n, place][wave][1], False,
                          max(strength.MIN_TIMEOUT_S, strength.TIMEOUT_FACTOR * took[n]))
                     for (n, place), kind in survivor.items()
                     if kind is None and wave < len(made[n, place])]
            if not tasks:
                break
            for (n, place, kind), outcome in workers.run(tasks):
                if outcome.passed:
                    survivor[n, place] = kind
            wave += 1
            log(f"  wave {wave}: {len(tasks)} mutants ({time.monotonic() - started:.0f} s)")
    finally:
        workers.close()
    summary = {}
    for name, (snippet, work) in plans.items():
        entry = stored.get(name, {})
        keep = entry.get("positions", {}) if entry.get("test") == hidden_test_digest(name) else {}
        live = set(positions.places(snippet.source, positions.candidates(snippet.source)))
        keep = {place: v for place, v in keep.items() if place in live}
        keep.update({place: [len(m), survivor[name, place]] for place, m in work})
        stored[name] = {"assignment": snippet.assignment, "test": hidden_test_digest(name),
                        "positions": dict(sorted(keep.items()))}
        summary[name] = (len(work), sum(bool(m) and survivor[name, place] is None
                                        for place, m in work))
    stored = {n: e for n, e in stored.items() if n in every}
    about = "which drill positions each snippet's hidden test sees: tests/test_drills.py writes it"
    positions.VERDICTS.write_text(json.dumps(
        {"about": about, "snippets": dict(sorted(stored.items()))}, indent=1) + "\n")
    return summary



# ------------------------------------------------------------------ the widget's state


@pytest.fixture
def drill(monkeypatch):
    """A Drill over ring_allreduce whose checker judges by text (right, else wrong) at once."""
    from distlab.drills import widget

    monkeypatch.setattr(Checker, "warm", lambda self, snippet: None)

    def judge(self, snippet, chosen, answers):
        return [check.Verdict(a, check.RIGHT if check.normalise(a) == check.normalise(p.text)
                              else check.EMPTY if not a.strip() else check.WRONG, "test")
                for p, a in zip(chosen, answers, strict=True)]

    monkeypatch.setattr(Checker, "check", judge)
    made = widget.Drill("ring_allreduce", blanks=4, seed=3)
    yield made
    made.close()


def test_boxes_do_not_reveal_the_answers_length(drill):
    assert len({len(p.text) for p in drill.chosen}) > 1
    assert len({box.layout.width for box in drill.inputs}) == 1


def test_an_edit_after_check_clears_its_mark_and_reveal_takes_it(drill):
    drill.inputs[0].value = drill.chosen[0].text
    drill.check()
    assert drill.marks[0].value == "✓"
    drill.inputs[0].value = "wrong_now"
    assert drill.marks[0].value == ""
    drill.reveal_one()
    assert 0 in drill.revealed and drill.inputs[0].value == drill.chosen[0].text


def test_refresh_clears_the_message_and_verdicts(drill):
    drill.check()
    assert "right" in drill.message.value and drill.verdicts.value
    drill.refresh()
    assert drill.message.value == "" and drill.verdicts.value == ""


def test_check_then_reveal_counts_one_miss(drill):
    drill.inputs[0].value = "wrong"
    drill.check()
    drill.reveal_all()
    assert history.misses("ring_allreduce") == {p.key: 1 for p in drill.chosen}


if __name__ == "__main__":
    if sys.argv[1:2] != ["verdicts"]:
        sys.exit("usage: tests/test_drills.py verdicts [SNIPPET ...]")
    for name, (computed, seen) in compute_verdicts(sys.argv[2:] or None).items():
        print(f"{name:<32} {computed:>3} positions computed, {seen:>3} maskable")
