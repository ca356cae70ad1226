"""Can a submission get points it did not earn, change another student's grade, stop the batch,
or leave a process, port or temporary file behind? (a submission can only hurt itself)

Every kind of tests/system/adversarial/ is graded by the real `python -m autograder.batch`, in
batches that also grade the honest students, with small limits (LIMITS) so that the hazards
end quickly. Each batch runs with its own TMPDIR and JUPYTER_RUNTIME_DIR, so that anything
the run leaves in a temporary folder is seen, whatever else runs on the machine.

Run: .venv/bin/python -m pytest tests/system/test_adversarial.py -q -s
(about 5 minutes on 2 cores; -s shows each submission's time). Needs the sandbox (root,
unshare): without it the learner's kernel runs as the grader, and these submissions would
really write into solutions/ and leave daemons behind, so the module is skipped.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from adversarial import ALL, KINDS
from adversarial.snoop import SNOOPS
from nbgrader.api import Gradebook

from autograder import solved
from autograder.judge import sandbox
from distlab.source import paths

ASSIGNMENT = "01_collectives"
ROOT = paths.ROOT
RELEASED = ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
JOBS = 2
# Small limits, so that hazards end fast (the defaults are minutes).
# A cell past its limit is interrupted, and where the kernel does not answer in time nbgrader
# stops the notebook (not graded: 0); so the cell limit is twice the slowest honest cell seen
# under a loaded make test: a solved 01 cell once took over 10 s there, and an honest kind got 0.
LIMITS = {"cell_seconds": 20, "notebook_seconds": 120, "memory_bytes": 2 << 30,
          "call_seconds": 15, "function_seconds": 30}
SUBMISSION_TIMEOUT = 300  # make grade's --timeout: a submission past it is stopped
HONEST = [name for name, kind in KINDS.items() if kind.control]
ADVERSARIES = [name for name, kind in KINDS.items() if not kind.control]
BATCHES = sorted({kind.batch for kind in KINDS.values()})
# what adversaries try to change outside their submission: these trees must stay the same,
# and no file of the course may carry their mark (or the mode they try to set)
GUARDED = [ROOT / "solutions", ROOT / "notebooks"]
COURSE = [ROOT / "solutions", ROOT / "notebooks", ROOT / "autograder", ROOT / "src",
          ROOT / "nbgrader_config.py"]
SANDBOX_UIDS = {sandbox.uid_for(slot) for slot in range(JOBS)}
SANDBOX_CGROUPS = {f"{sandbox.CGROUP_PREFIX}{uid}" for uid in SANDBOX_UIDS}  # not another lane's
HIDDEN_TEST_IMPORT = "from autograder.grade_cell import grade"  # the hidden tests' first line

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="no sandbox here: "
                                f"{sandbox.why_unavailable()}; adversaries would run unconfined")


# ---- what is alive, listening and lying around


def _read(path: str, binary: bool = False):
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data if binary else data.decode(errors="replace")
    except OSError:
        return b"" if binary else ""


def _processes() -> dict[int, dict]:
    """Every process: uid, start time, pid namespace, innermost pid, cmdline, environ."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        status = _read(f"/proc/{pid}/status")
        stat = _read(f"/proc/{pid}/stat")
        if not status or not stat:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        try:
            ns = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            ns = ""
        found[pid] = {
            "uid": int(fields.get("Uid", "-1").split()[0]),
            "start": stat.rsplit(")", 1)[-1].split()[19],
            "ns": ns,
            "inner_pid": fields.get("NSpid", "0").split()[-1],
            "cmdline": _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip(),
            "environ": _read(f"/proc/{pid}/environ").split("\0"),
            "zombie": fields.get("State", "").strip().startswith("Z"),
        }
    return found


def ours(grading: Path) -> dict[int, str]:
    """Live processes of a grading run (pid -> what it is): their command line or environment
    names its grading folder, or so does the init of their (sandbox) pid namespace."""
    procs = _processes()
    inits = {p["ns"]: p for p in procs.values() if p["inner_pid"] == "1" and p["ns"]}
    marker, env = str(grading), f"DISTLAB_GRADING_DIR={grading}"

    def named(p):
        return marker in p["cmdline"] or env in p["environ"]

    return {pid: f"uid={p['uid']}{' zombie' if p['zombie'] else ''}: {p['cmdline'][:160]}"
            for pid, p in procs.items()
            if pid != os.getpid() and (named(p) or (p["ns"] in inits and named(inits[p["ns"]])))}


def listening() -> dict[str, str]:
    """inode -> local address of every listening TCP socket of this network namespace."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).splitlines()[1:]:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A":
                found[parts[9]] = parts[1]
    return found


def socket_owners(inodes: set[str]) -> dict[str, list[int]]:
    owners: dict[str, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    owners.setdefault(link[8:-1], []).append(int(entry))
        except OSError:
            continue
    return owners


def memory_cgroups() -> set[str]:
    """The empty sandbox memory cgroups next to this process's own (cgroup v1), by name: what a
    sandbox leaves when it is killed before it can clean up (one in use has processes)."""
    lines = _read("/proc/self/cgroup").splitlines()
    mine = [ln.split(":", 2)[2] for ln in lines if "memory" in ln.split(":")[1:2][0]]
    folder = Path(sandbox.MEMORY_V1 + (mine[0].rstrip("/") if mine else ""))
    try:
        return {p.name for p in folder.iterdir() if p.name in SANDBOX_CGROUPS
                and not _read(f"{p}/cgroup.procs").strip()}
    except OSError:
        return set()


def files_under(paths):
    for path in paths:
        yield from ([path] if path.is_file() else
                    (p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in
                     p.parts))


def digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files_under(paths)}


# ---- one grading run


def build(names: list[str], grading: Path) -> dict[str, bytes]:
    """Write each student's submission folder; return what each handed in, as one text."""
    solved_nb = solved.load(ASSIGNMENT)
    released = nbformat.read(str(RELEASED), as_version=4)
    handed_in = {}
    for name in names:
        folder = grading / "submitted" / name / ASSIGNMENT
        files = KINDS[name].submission(solved_nb, released, f"{ASSIGNMENT}.ipynb")
        for file, data in files.items():
            (folder / file).parent.mkdir(parents=True, exist_ok=True)
            (folder / file).write_bytes(data)
        handed_in[name] = b"\n".join(files.values())
    return handed_in


def grade_batch(names: list[str], base: Path) -> dict:
    grading, tmp, runtime = base / "grading", base / "tmp", base / "runtime"
    for folder in (tmp, runtime):
        folder.mkdir(parents=True)
    files = build(names, grading)
    before = {"tmp": set(os.listdir("/tmp")), "listening": listening(),
              "cgroups": memory_cgroups(), "guarded": digest(GUARDED),
              "marker": Path("/tmp/marker").exists()}
    env = dict(os.environ, DISTLAB_GRADING_DIR=str(grading), TMPDIR=str(tmp),
               JUPYTER_RUNTIME_DIR=str(runtime),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [sys.executable, "-m", "autograder.batch", ASSIGNMENT, "--jobs", str(JOBS),
               "--timeout", str(SUBMISSION_TIMEOUT),
               *(f"--GradingLimits.{key}={value}" for key, value in LIMITS.items())]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=SUBMISSION_TIMEOUT * (len(names) // JOBS + 2))
    seconds = time.monotonic() - started
    # whatever still runs a moment after the run returned was left behind
    deadline, left = time.monotonic() + 5, ours(grading)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ours(grading)
    new_listening = {i: a for i, a in listening().items() if i not in before["listening"]}
    owners = socket_owners(set(new_listening))
    # a new listening socket is the run's when a process of the run holds it
    ports = {address: owners.get(inode, []) for inode, address in new_listening.items()
             if any(pid in left for pid in owners.get(inode, []))}
    leftover_tmp = sorted(set(os.listdir("/tmp")) - before["tmp"])
    rows = {}
    csv_path = grading / "grades" / f"{ASSIGNMENT}.csv"
    if csv_path.exists():
        with csv_path.open() as handle:
            rows = {row["student"]: row for row in csv.DictReader(handle)}
    feedback = {}
    for name in names:
        page = grading / "feedback" / name / ASSIGNMENT / f"{ASSIGNMENT}.html"
        feedback[name] = page.read_text(errors="replace") if page.exists() else None
    return {
        "names": names, "grading": grading, "files": files, "result": result,
        "seconds": seconds, "rows": rows, "feedback": feedback, "processes": left,
        "ports": ports, "marker_before": before["marker"],
        "tmp_files": sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")),
        "runtime_files": sorted(str(p.relative_to(runtime)) for p in runtime.rglob("*")),
        "host_tmp": [n for n in leftover_tmp if _leftover_in_tmp(n)],
        "cgroups": sorted(memory_cgroups() - before["cgroups"]),
        "guarded_before": before["guarded"],
    }


def _leftover_in_tmp(name: str) -> bool:
    """A new entry of the host's /tmp that the run (not pytest, not other programs) made: an
    adversary's marker, or anything owned by a sandbox uid."""
    if name.startswith("pytest-of-"):
        return False
    try:
        owner = os.lstat(f"/tmp/{name}").st_uid
    except OSError:
        return False
    return name == "marker" or owner in SANDBOX_UIDS


@pytest.fixture(scope="module")
def runs(tmp_path_factory, start_from_release):
    """Every batch graded once: {batch: run}."""
    batches = {}
    for batch in BATCHES:
        names = HONEST + [n for n in ADVERSARIES if KINDS[n].batch == batch]
        base = tmp_path_factory.mktemp(f"batch{batch}")
        (base / "grading").mkdir()
        start_from_release(base / "grading")
        batches[batch] = grade_batch(names, base)
    for batch, run in batches.items():
        print(run["result"].stdout)
        print(f"batch {batch}: {len(run['names'])} submissions in {run['seconds']:.0f} s")
    return batches


@pytest.fixture(scope="module")
def course():
    """Points per graded cell, the maximum, and the reference answers a learner never sees."""
    released = nbformat.read(str(RELEASED), as_version=4)
    visible = "\n".join(cell.source for cell in released.cells)
    points = {cell.metadata["nbgrader"]["grade_id"]: float(cell.metadata["nbgrader"]["points"])
              for cell in released.cells
              if cell.metadata.get("nbgrader", {}).get("grade")}
    secrets = sorted({blank.answer for _, blanks in solved.solution_cells(ASSIGNMENT)
                      for blank in blanks if len(blank.answer) >= 8
                      and blank.answer not in visible})
    return {"points": points, "max": sum(points.values()), "secrets": secrets,
            "hidden_lines": hidden_lines(visible)}


def hidden_lines(visible: str) -> list[str]:
    """Long lines of the hidden tests, the references and the shortcut suites that neither
    the released notebook nor distlab holds: one of them in a feedback page is a leak."""
    shown = visible + "".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    files = [*(ROOT / "autograder" / "exercises").glob("*.py"), ROOT / "autograder" /
             "reference.py", *(ROOT / "tests" / "shortcuts").glob("*.py"),
             *(ROOT / "solutions").glob("*/hidden_tests*.py"),
             *(ROOT / "solutions").glob("*/shortcuts.py")]
    return sorted({line.strip() for path in files for line in path.read_text().splitlines()
                   if len(line.strip()) >= 40 and line.strip() not in shown})


def run_of(runs, name):
    return runs[KINDS[name].batch]


# ---- the batch


@pytest.mark.parametrize("batch", BATCHES)
def test_the_batch_completes_with_a_row_for_every_student(runs, batch):
    """Does make grade finish (exit 0) with a CSV row for every submission, whatever they do?"""
    run = runs[batch]
    result = run["result"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(run["rows"]) == sorted(run["names"]), result.stdout[-3000:]


@pytest.mark.parametrize("batch", BATCHES)
def test_honest_students_get_what_they_get_alone(runs, course, batch):
    """Next to every adversary, do the honest students get exactly their own grade?"""
    rows = runs[batch]["rows"]
    expected = {"max": course["max"], "max-1": course["max"] - 1}
    for name in HONEST:
        assert float(rows[name]["score"]) == expected[KINDS[name].exact], (name, rows[name])
        assert not rows[name]["not_graded_because"], rows[name]


@pytest.mark.parametrize("batch", BATCHES)
def test_nothing_is_left_behind(runs, batch):
    """After the run: no process of it alive, no new listening port, nothing in its temporary
    folders or in /tmp, no sandbox cgroup left?"""
    run = runs[batch]
    assert run["processes"] == {}
    assert run["ports"] == {}
    assert run["tmp_files"] == []
    assert run["runtime_files"] == []
    assert run["host_tmp"] == []
    assert run["cgroups"] == []


@pytest.mark.parametrize("batch", BATCHES)
def test_files_outside_the_submission_are_unchanged(runs, batch):
    """Are solutions/, notebooks/ and the grading code untouched, and is the gradebook still a
    valid database whose grades are the ones in the CSV?"""
    run = runs[batch]
    assert digest(GUARDED) == run["guarded_before"]
    marked = [str(p) for p in files_under(COURSE)
              if b"# pwned" in p.read_bytes() or p.stat().st_mode & 0o777 == 0o777]
    assert marked == []
    assert run["marker_before"] or not Path("/tmp/marker").exists()
    grading = run["grading"]
    with sqlite3.connect(grading / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}") as gb:
        scores = {sub.student.id: sub.score for sub in gb.assignment_submissions(ASSIGNMENT)}
        maximum = gb.find_assignment(ASSIGNMENT).max_score
    for name in HONEST:
        assert scores[name] == float(run["rows"][name]["score"]), (name, scores)
    assert all(score <= maximum for score in scores.values()), scores
    assert (grading / "feedback").is_dir()


# ---- each adversary


@pytest.mark.parametrize("name", ADVERSARIES)
def test_no_points_it_did_not_earn(runs, course, name):
    """Does the adversary score what its code honestly earns: 0 on the cells its attack
    targets, all the points of the functions it solved and left alone, never above the
    maximum?"""
    kind = KINDS[name]
    row = run_of(runs, name)["rows"][name]
    zero = list(course["points"]) if kind.zero == ALL else list(kind.zero)
    for cell in zero:
        assert float(row[cell]) == 0, (cell, row)
    for cell in kind.earns:
        assert float(row[cell]) == course["points"][cell], (kind.doc, cell, row)
    cap = course["max"] - sum(course["points"][cell] for cell in zero)
    assert float(row["score"]) <= cap, (kind.doc, row)
    assert float(row["score"]) == sum(float(row[cell]) for cell in course["points"])
    if kind.exact:
        assert float(row["score"]) == {"max": course["max"], "max-1": course["max"] - 1}[
            kind.exact], (kind.doc, row)


@pytest.mark.parametrize("name", ADVERSARIES)
def test_feedback_exists_and_leaks_nothing(runs, course, name):
    """Is there a feedback page (the not-graded page if need be), small, without hidden-test
    source, reference answers the learner did not write, or a traceback from grading code?"""
    run = run_of(runs, name)
    page = run["feedback"][name]
    assert page is not None, f"no feedback page for {name}"
    assert len(page) < 12 << 20
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    submitted = run["files"][name].decode(errors="replace")
    assert "HIDDEN TESTS" not in text
    if HIDDEN_TEST_IMPORT not in submitted:
        assert HIDDEN_TEST_IMPORT not in text
    assert not re.search(r'File "?[^"\n]*/autograder/', text)
    leaked = [answer for answer in course["secrets"]
              if answer in text and json.dumps(answer)[1:-1] not in submitted]
    assert leaked == []
    hidden = [line for line in course["hidden_lines"]
              if line in text and json.dumps(line)[1:-1] not in submitted]
    assert hidden == [], hidden[:5]
    if why := run["rows"][name]["not_graded_because"]:  # the page says why, in words
        assert "not graded" in page and html.escape(why) in page and len(why.strip()) > 10


@pytest.mark.parametrize("name", sorted(SNOOPS))
def test_a_snoop_ran_in_the_kernel_and_found_nothing(runs, name):
    """Did each snoop (adversarial/snoop.py) run in the grading kernel, find no hidden test,
    reference, shortcut or solved source, and say so in its feedback? (What it would have
    printed is checked by test_feedback_exists_and_leaks_nothing.)"""
    text = html.unescape(re.sub(r"<[^>]+>", "", run_of(runs, name)["feedback"][name]))
    said = re.findall(r"snoop by [^:\n]*: [^\n{]*found \d+", text)
    assert len(said) == 1 and said[0].endswith(" found 0"), said
    assert "FOUND /" not in text and "IMPORTED autograder" not in text


@pytest.mark.parametrize("batch", BATCHES)
def test_the_csv_and_the_class_report_hold_no_hidden_test(runs, course, batch):
    """Do the grades CSV and the class report (`python -m autograder.report`, which shows what
    each student wrote in the blanks and the hidden test's complaint) of a batch full of
    snoops and attacks hold no line of a hidden test, a reference or a shortcut suite?"""
    grading = runs[batch]["grading"]
    env = dict(os.environ, DISTLAB_GRADING_DIR=str(grading))
    result = subprocess.run([sys.executable, "-m", "autograder.report", ASSIGNMENT],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    pages = [html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
             for page in (grading / "reports").glob("*.html")]
    assert pages, result.stdout
    texts = [*pages, (grading / "grades" / f"{ASSIGNMENT}.csv").read_text()]
    found = [line for line in course["hidden_lines"] for text in texts if line in text]
    assert found == [], found[:5]
