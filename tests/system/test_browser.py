"""What a learner sees in a real browser after `make lab`: the notebook opens with its kernel
(no kernel dialog), Run All shows a BlankNotFilled message, nbgrader's menus for instructors
are absent, and the Validate button opens a dialog with the result.

Needs Chromium (`apt-get install -y chromium`; .ci/run installs it) and Playwright (a dev
dependency; never `playwright install`); without Chromium the tests are skipped and say how.
Run: .venv/bin/python -m pytest tests/system/test_browser.py -q   (about 30 s); screenshots go
to $DISTLAB_SCREENSHOTS (default /tmp/lab-*.png)
"""

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_server import CHROMIUM, CHROMIUM_ARGS, ROOT, LabServer, browser_marks, wait_idle  # noqa: E402

from distlab.source import paths  # noqa: E402

IDS = paths.assignment_ids()
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in front

SHOTS = Path(os.environ.get("DISTLAB_SCREENSHOTS", "/tmp"))

pytestmark = browser_marks()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` on a copy of notebooks/: Validate saves the notebook, and Run All fills it
    with outputs, which must not land in the repository."""
    tmp = tmp_path_factory.mktemp("e2e")
    shutil.copytree(ROOT / "notebooks", tmp / "notebooks")
    server = LabServer(tmp / "server", root_dir=tmp / "notebooks").wait_ready()
    yield server
    assert server.stop() == [], "processes left behind"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module", params=IDS)
def page(request, lab, browser):
    """A fresh browser tab on one notebook, its kernel idle (one notebook after the other)."""
    assignment = request.param
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.assignment = assignment
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    # ?reset: a workspace with this notebook alone. Lab would otherwise reopen the notebooks of
    # the earlier tabs, saved with widget outputs whose models are gone with their kernels
    # ("widget model not found" in the console).
    page.goto(f"{lab.url}/lab/tree/{assignment}/{assignment}.ipynb?reset&token={lab.token}")
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=60_000)
    wait_idle(page, 60_000)
    page.wait_for_timeout(1000)  # a kernel dialog would have shown by now
    try:
        yield page
    finally:
        context.close()
        for session in lab.api("GET", "/api/sessions"):  # its kernel and ranks end with it
            lab.api("DELETE", f"/api/sessions/{session['id']}")


def _shot(page, step: str) -> None:
    page.screenshot(path=str(SHOTS / f"lab-{page.assignment}-{step}.png"))


def test_notebook_opens_with_an_idle_kernel_and_no_dialog(page):
    """Does the notebook open at once on its own kernel (no 'Select Kernel' dialog) with its
    blanks visible, and without nbgrader's instructor menus?"""
    _shot(page, "1-opened")
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").inner_text()
    # clean as opened: nothing for Lab to save (closing it asks nothing)
    assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0
    page.locator(f"{PANEL} .jp-NotebookPanel-toolbar", has_text="Python 3 (ipykernel)").wait_for(
        timeout=30_000)  # the notebook's own kernel, shown in its toolbar
    assert "_____" in page.locator(f"{PANEL} .jp-Notebook").inner_text()
    menus = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel").all_inner_texts()
    assert "Run" in menus and "Nbgrader" not in menus, menus
    assert page.get_by_text("Create Assignment").count() == 0
    assert page.get_by_text("Jupyter news").count() == 0  # no news prompt for learners
    assert page.locator(f"{PANEL} .validate-button").count() == 1


def test_run_all_shows_blank_not_filled(page):
    """Does Run > Run All Cells stop at a check with a short BlankNotFilled message (at most 6
    lines, the message alone), with no warning and no course-internal path in any output?"""
    page.locator("#jp-menu-panel .lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
    output = page.locator(f"{PANEL} .jp-OutputArea-output", has_text="BlankNotFilled").first
    output.wait_for(timeout=120_000)
    wait_idle(page, 120_000)
    page.wait_for_timeout(500)
    output.scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    _shot(page, "2-run-all")
    # textContent, not innerText: Lab renders offscreen cells with content-visibility, and
    # innerText of a cell it has not painted is empty
    texts = "\n".join(page.locator(f"{PANEL} .jp-OutputArea-output").all_text_contents())
    assert "BlankNotFilled" in texts
    assert not re.search(r"\b\w+Warning\b|\[Gloo\]|ProcessGroupGloo", texts), texts
    assert len(output.text_content().strip().splitlines()) <= 6, output.text_content()
    assert not re.search(r"distlab/|autograder/|site-packages", texts), texts
    assert page.locator(".jp-Dialog").count() == 0


def test_validate_button_shows_the_result(page):
    """Does the Validate button save, validate and show a 'Validation Results' dialog that
    starts with "0 of M checks pass", then at most 3 lines per failing check, each naming the
    exercise and a blank that is not filled?"""
    page.locator(f"{PANEL} .validate-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=240_000)
    page.locator("#validation-message").wait_for(timeout=10_000)
    _shot(page, "3-validate")
    text = dialog.inner_text()
    assert "Validation Results" in text, text
    lines = [line for line in page.locator("#validation-message").inner_text().splitlines()
             if line.strip()]
    assert re.fullmatch(r"0 of \d+ checks pass\.", lines[0]), lines[:3]
    entries = "\n".join(lines[1:]).split("\n✗ ")
    assert all(len(entry.splitlines()) <= 3 for entry in entries), entries
    assert "✗ check of" in text and "BlankNotFilled" in text, text[:2000]
    assert not re.search(r"\b\w+Warning\b|distlab/|autograder/", text), text
    page.locator(".jp-Dialog .jp-mod-accept").click()
    dialog.wait_for(state="detached", timeout=10_000)
    assert page.console_errors == [], page.console_errors


@pytest.mark.parametrize("page", IDS[:1], indirect=True)
def test_a_multi_rank_run_shows_a_live_line_while_it_runs(page):
    """Does a cell that runs ranks for a few seconds show a live line (how many ranks, for how
    long) while they still run, then how long they ran? (The line is the launcher's, the same
    in every notebook: one notebook shows it.)"""
    page.locator(f"{PANEL} .jp-Cell").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below, in command mode
    page.keyboard.press("Enter")
    page.keyboard.insert_text('from distlab import run; run(lambda rank, world_size: '
                              '__import__("time").sleep(5), world_size=2)')
    page.keyboard.press("Control+Enter")  # run it in place (Shift+Enter adds a cell below)
    cell = page.locator(f"{PANEL} .jp-CodeCell").last
    live = cell.locator(".jp-OutputArea-output", has_text="⏳")
    live.wait_for(timeout=60_000)
    text = live.text_content()
    _shot(page, "4-live-line")
    assert re.search(r"⏳ (starting 2 rank\(s\)|2 rank\(s\) running for \d+ s)", text), text
    cell.locator(".jp-OutputArea-output", has_text="ran for").wait_for(timeout=60_000)
    wait_idle(page, 60_000)
