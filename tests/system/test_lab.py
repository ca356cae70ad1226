"""Does `make lab` keep the learner's promise? The server starts (as root too), the notebook
opens with its kernel and its `_____` blanks, the kernel runs the cells, and nbgrader's
Validate button says what is left to do, or that all is well, with no warning or traceback.

The servers are started by `make lab` itself (tests/system/lab_server.py), with a free port, a
token and no browser. Run: .venv/bin/python -m pytest tests/system/test_lab.py -q   (about 30 s)
"""

import os
import re
import time

import nbformat
import pytest
from lab_server import NOTEBOOK, ROOT, LabServer, recipe, unavailable

from autograder import solved

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# What must never reach a learner: warnings, tracebacks in the server log, gloo's C++ logging.
WARNING = r"\b\w+Warning\b|\bWARNING\b|\[Gloo\]|ProcessGroupGloo|^\s*\[[WE]\d{4} "
NOISY_LOG_LINE = re.compile(rf"{WARNING}|Traceback|^\[[WEC] ")  # [W ...]: jupyter's levels
WARNING_IN_OUTPUT = re.compile(WARNING, re.M)


def filled_notebook():
    """The learner notebook with every blank filled: each learner cell replaced by its solved
    cell (the locked cells, their checksums and the empty graded cells stay as released)."""
    nb = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source
              for cell in solved.load(NOTEBOOK.split("/")[0]).cells
              if cell.metadata.get("nbgrader", {}).get("solution")}
    learner_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert learner_cells and {c.metadata.nbgrader.grade_id for c in learner_cells} == set(answers)
    for cell in learner_cells:
        cell.source = answers[cell.metadata.nbgrader.grade_id]
    assert "_____" not in "".join(c.source for c in learner_cells)
    return nb


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """Two `make lab` servers started at once: as a learner gets it (notebooks/), and one whose
    root folder is a temporary copy with the blanks filled (notebooks/ is never written)."""
    tmp = tmp_path_factory.mktemp("lab")
    filled_root = tmp / "filled"
    (filled_root / NOTEBOOK).parent.mkdir(parents=True)
    nbformat.write(filled_notebook(), filled_root / NOTEBOOK)
    before = (ROOT / "notebooks" / NOTEBOOK).read_bytes()
    servers = {"learner": LabServer(tmp / "learner"),
               "filled": LabServer(tmp / "filled-server", root_dir=filled_root)}
    try:
        for server in servers.values():
            server.wait_ready()
        yield servers
    finally:
        for server in servers.values():
            server.stop()
    assert (ROOT / "notebooks" / NOTEBOOK).read_bytes() == before, "notebooks/ was modified"


def test_make_lab_command_allows_root():
    """Does the command `make lab` runs use lab-config/ and pass --allow-root when run as
    root (the other tests then check that the server starts)?"""
    command = recipe()
    assert "jupyter lab" in command and "lab-config" in command
    assert ("--allow-root" in command) == (os.geteuid() == 0)


def test_server_serves_the_notebook_with_its_kernel_and_blanks(labs):
    """Does /api/contents give the learner notebook, with a kernelspec the server has and
    `_____` blanks in its code cells?"""
    lab = labs["learner"]
    assert lab.api("GET", "/api/status")["started"]
    model = lab.api("GET", f"/api/contents/{NOTEBOOK}", content=1)
    assert model["type"] == "notebook" and model["path"] == NOTEBOOK
    spec = model["content"]["metadata"]["kernelspec"]
    assert spec["name"] == "python3"
    assert spec["name"] in lab.api("GET", "/api/kernelspecs")["kernelspecs"]
    code = [c["source"] for c in model["content"]["cells"] if c["cell_type"] == "code"]
    assert sum(text.count("_____") for text in code) >= 10


def test_kernel_starts_and_runs_the_first_cells(labs):
    """Does a session on the notebook start the notebook's kernel, which then runs the import
    cell quietly and the first visible check with a BlankNotFilled message?"""
    lab = labs["learner"]
    model = lab.api("GET", f"/api/contents/{NOTEBOOK}", content=1)
    kernel_name = model["content"]["metadata"]["kernelspec"]["name"]
    session = lab.api("POST", "/api/sessions", {"path": NOTEBOOK, "type": "notebook",
                                                "name": NOTEBOOK, "kernel": {"name": kernel_name}})
    kernel_id = session["kernel"]["id"]
    assert session["kernel"]["name"] == kernel_name
    code = [c for c in model["content"]["cells"] if c["cell_type"] == "code"]
    first = next(i for i, c in enumerate(code) if c["metadata"]["nbgrader"]["solution"])
    try:
        imports = lab.execute(kernel_id, session["id"], code[0]["source"])
        assert imports["reply"]["status"] == "ok", imports
        assert imports["stderr"] == "" and imports["state"] == "idle", imports
        # the first learner cell, blanks and all, then the visible check below it
        lab.execute(kernel_id, session["id"], code[first]["source"])
        check = lab.execute(kernel_id, session["id"], code[first + 1]["source"])
        assert check["reply"]["status"] == "error"
        assert any(e.startswith("BlankNotFilled") for e in check["errors"]), check
        # the server's view of the kernel follows the kernel's messages, so it may lag a bit
        deadline = time.monotonic() + 30
        while (state := lab.api("GET", f"/api/kernels/{kernel_id}")["execution_state"]) != "idle" \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state == "idle"
    finally:
        lab.api("DELETE", f"/api/sessions/{session['id']}")


def test_validate_lists_the_unfilled_blanks(labs):
    """Does Validate on the untouched learner notebook succeed as a request and answer with the
    course's summary: "0 of M checks pass", then at most 3 lines per failing check, each saying
    a blank is not filled, with no warning and no course-internal path in it?"""
    answer = labs["learner"].validate()
    assert answer["success"] is True, answer["value"]
    result = answer["value"]
    assert set(result) == {"failed"} and len(result["failed"]) == 1, result
    lines = result["failed"][0]["source"].splitlines()
    assert re.fullmatch(r"0 of (\d+) checks pass\.", lines[0]), lines[0]
    checks = int(lines[0].split()[2])
    failing = [line for line in lines if line.startswith("✗ check of ")]
    assert len(failing) == checks >= 8, lines
    entries = "\n".join(lines[1:]).split("\n✗ ")
    assert all(len(entry.splitlines()) <= 3 for entry in entries), entries
    assert sum("BlankNotFilled" in line for line in failing) >= 8, failing
    text = "\n".join(lines)
    assert not WARNING_IN_OUTPUT.search(text)
    assert "distlab/" not in text and "autograder/" not in text, text


def test_validate_passes_the_filled_notebook(labs):
    """Does Validate on the notebook with every blank filled report success (no failed,
    changed or retyped cells)? Validate counts a cell that writes to stderr as failed, so this
    also says that no cell shows a warning or gloo's logging."""
    answer = labs["filled"].validate()
    assert answer["success"] is True, answer["value"]
    assert answer["value"] == {}, answer["value"]


def test_servers_stop_cleanly_with_quiet_logs(labs):
    """Do both servers stop with their kernels and gloo ranks (nothing of theirs left
    running), and did their logs show no traceback or warning?"""
    for name, server in labs.items():
        assert server.stop() == [], f"{name}: processes left behind"
        # not even "Notebook ... is not trusted": a notebook without outputs opens trusted
        noisy = [line for line in server.log().splitlines() if NOISY_LOG_LINE.search(line)]
        assert noisy == [], f"{name} server log:\n" + "\n".join(noisy)
