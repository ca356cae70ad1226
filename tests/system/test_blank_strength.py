"""The blank-strength check on every notebook: every plausible wrong answer of every blank fails
its hidden test, every ACCEPT passes, and no blank is given away. (A test here, not a step
after pytest, so that it runs in a lane of its own beside the grading batches.)

`make test` runs it sampled (`--sample`: one generated mutant per blank, every ACCEPT
and REJECT, 259 of the course's 3266 mutants
now); `make test-all` (pytest --exhaustive) and
`make strength` run every mutant."""

import subprocess
import sys

from distlab.source import paths


def test_every_blank_of_every_notebook_is_strong(request):
    """Does `python -m autograder.strength` pass on the whole course?"""
    sample = [] if request.config.getoption("exhaustive") else ["--sample"]
    result = subprocess.run([sys.executable, "-m", "autograder.strength", "--jobs", "2",
                             *sample], cwd=paths.ROOT, capture_output=True, text=True,
                            timeout=1500)
    assert "blank strength: ok" in result.stdout, result.stdout[-8000:] + result.stderr[-4000:]
    # the give-away verdict per notebook is tests/test_giveaway.py's; here: it ran, and the
    # exit status follows it
    gave_away = "give-away: FAILED" in result.stdout
    assert gave_away or "give-away: ok" in result.stdout, result.stdout[-8000:]
    assert result.returncode == int(gave_away), result.stdout[-8000:] + result.stderr[-4000:]
