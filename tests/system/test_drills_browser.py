"""Does the drills notebook work in a real browser after `make lab`: the widget shows a snippet
with numbered input boxes of one width (no box tells its answer's length) and the count of
maskable and masked positions, Check marks a blank, an edit clears its mark, Reveal one takes
the edited box and counts one miss (not two), and Refresh hides another set and clears the
old verdicts?

Needs Chromium and Playwright, as tests/system/test_browser.py (skipped without them).
Run: .venv/bin/python -m pytest tests/system/test_drills_browser.py -q   (about 40 s)
"""

import contextlib
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_server import CHROMIUM, CHROMIUM_ARGS, ROOT, LabServer, browser_marks, wait_idle  # noqa: E402

DRILL = ".distlab-drill"
SUMMARY = re.compile(r"(\d+) maskable \| (\d+) masked")

pytestmark = browser_marks()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` on a copy of notebooks/, with a history file of its own."""
    tmp = tmp_path_factory.mktemp("drills")
    shutil.copytree(ROOT / "notebooks", tmp / "notebooks")
    server = LabServer(tmp / "server", root_dir=tmp / "notebooks",
                       env={"DISTLAB_DRILLS_DB": str(tmp / "drills.sqlite")}).wait_ready()
    server.drills_db = tmp / "drills.sqlite"
    yield server
    assert server.stop() == [], "processes left behind"


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{lab.url}/lab/tree/drills/drills.ipynb?reset&token={lab.token}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        # Run All before the kernel is up can be lost on a loaded machine (CI once waited
        # 60 s for a widget that never came): start from an idle kernel, as test_browser does
        wait_idle(page, 120_000)
        try:
            yield page
        finally:
            browser.close()
            for session in lab.api("GET", "/api/sessions"):
                lab.api("DELETE", f"/api/sessions/{session['id']}")


def _misses(lab) -> dict[str, int]:
    """What the widget's history file holds now: {position: misses} over every snippet."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(lab.drills_db)) as db:
        return dict(db.execute("SELECT position, misses FROM positions WHERE misses > 0"))


def _code(page) -> str:
    return page.locator(f"{DRILL} .drill-code").inner_text()


def test_the_drill_checks_a_blank_and_refreshes(lab, page):
    assert page.locator(".jp-Dialog").count() == 0  # the notebook has its kernelspec
    page.locator("#jp-menu-panel .lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
    try:
        page.wait_for_selector(f"{DRILL} .drill-blank input", timeout=120_000)
    except Exception:
        page.screenshot(path="/tmp/lab-drills-failed.png")
        raise
    summary = SUMMARY.search(page.locator(DRILL).inner_text())
    assert summary and int(summary[1]) >= 10 and int(summary[2]) == 5, summary
    assert page.locator(f"{DRILL} .drill-blank input").count() == 5
    widths = {round(box.bounding_box()["width"])
              for box in page.locator(f"{DRILL} .drill-blank input").all()}
    assert len(widths) == 1, f"the empty boxes' widths tell the answers' lengths: {widths}"
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                        ).count() == 0, "a warning reached the learner"

    page.locator(f"{DRILL} .drill-blank input").first.fill("not_the_answer")
    page.locator(f"{DRILL} button", has_text=re.compile("^Check$")).click()
    # the marks, the count and the verdicts are three widgets, each synced on its own: wait
    # for the verdict line itself (CI once read the count before the verdicts had arrived)
    page.locator(f"{DRILL} .drill-mark", has_text="✗").first.wait_for(timeout=120_000)
    page.wait_for_function(f"() => document.querySelector('{DRILL}').innerText.includes("
                           "'[1] ✗ ran the hidden test')", timeout=30_000)
    assert "[2] · not filled" in page.locator(DRILL).inner_text()
    page.locator(f"{DRILL} .drill-blank input").first.fill("another_try")  # the ✗ goes
    page.wait_for_function(f"() => !document.querySelector('{DRILL} .drill-mark')"
                           ".innerText.includes('✗')", timeout=30_000)

    # Reveal one takes the edited box (its ✗ no longer holds), and the miss counts once
    first_box = page.locator(f"{DRILL} .drill-blank input").first
    page.locator(f"{DRILL} button", has_text=re.compile("^Reveal one$")).click()
    page.locator(f"{DRILL} .drill-mark").first.filter(has_text="↺").wait_for(timeout=30_000)
    assert first_box.is_disabled()
    revealed = first_box.input_value()
    assert revealed not in ("another_try", ""), revealed
    assert list(_misses(lab).values()) == [1], _misses(lab)  # Check + Reveal: one miss

    before = _code(page), SUMMARY.search(page.locator(DRILL).inner_text())[0]
    page.locator(f"{DRILL} button", has_text=re.compile("^Refresh$")).click()
    page.wait_for_function(f"() => !document.querySelector('{DRILL}').innerText.includes("
                           "'not filled')", timeout=30_000)  # the verdicts are cleared
    assert _code(page) != before[0]  # another set of spans is hidden
    assert page.locator(f"{DRILL} .drill-blank input").count() == 5
    assert page.locator(f"{DRILL} .drill-mark", has_text="✗").count() == 0
    assert "of 5 right" not in page.locator(DRILL).inner_text()  # the old message went too
    page.screenshot(path="/tmp/lab-drills.png")
