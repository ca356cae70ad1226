"""One slot of `make grade`: an nbgrader that stays up and grades submission after submission.

    python -m autograder.batch.worker SLOT [--GradingLimits.NAME=VALUE ...]

It speaks one JSON line at a time, on stdout (nbgrader's log goes to stderr):

- once nbgrader and nbgrader_config.py are loaded: {"ready": true, "db_url": gradebook URL};
- for {"student": ..., "assignment": ...} on stdin: what `nbgrader autograde --student` and
  then `nbgrader generate_feedback --student` run (their converters, the same config), in
  sandbox slot SLOT; then {"ok": true, "score": ..., "max_score": ...}, or {"ok": false,
  "problem": why it was not graded};
- for {"csv": assignment, "failed": {student: why}, "out": folder}: the assignment's grades
  CSV written from the gradebook; then {"ok": true, "path": ..., "scores": [every graded
  student's score], "max_score": ...}.

Why a worker: starting nbgrader (imports, configuration) costs seconds of CPU. Paid twice per
submission, that was a third of the work on a 2-core machine; paid once per slot, N slots
grade nearly N times as fast as nbgrader's serial autograde. make grade kills a worker whose
submission runs out of time, and starts a fresh one for the next.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import sys
import traceback
from pathlib import Path

from distlab.source import settings

# `module.Name: message` or `NameError: message`, as the last line of a traceback says it
EXCEPTION_LINE = re.compile(r"^\s*(?:(?:[a-z_]\w*\.)+([A-Z]\w*)|(\w*(?:Error|Exception|Interrupt)))"
                            r": ?(.*)$")
# `[AutogradeApp | CRITICAL] message`: what nbgrader logs when it stops without a traceback
LOGGED_ERROR = re.compile(r"^\[\w+ \| (?:ERROR|CRITICAL)\] (.+)$")
# what the exceptions nbgrader stops at mean for a learner
MEANING = {
    "NotJSONError": "the notebook file is not valid JSON (was it saved completely?)",
    "NBFormatError": "the file is not a valid notebook",
    "ValidationError": "the file is not a valid notebook",
    "DeadKernelError": "the notebook's kernel died while it ran (a cell ended the process, or "
                       "used more memory than the limit)",
    "CellTimeoutError": "a cell did not finish within the time limit, or printed more than "
                        "the grader accepts",
}


def problem(log: str) -> str:
    """Why nbgrader could not grade a submission, from its log: the last exception it reports
    (what it means, or its type and message), else its last error message; never a
    traceback's file lines."""
    found = [m for line in log.splitlines() if (m := EXCEPTION_LINE.match(line))]
    # nbgrader re-raises every failure as NbGraderException("Please see the above traceback"):
    # the exception before that wrapper is the reason
    found = [m for m in found if (m[1] or m[2]) != "NbGraderException"] or found
    if not found:
        errors = [m[1] for line in log.splitlines() if (m := LOGGED_ERROR.match(line))]
        return errors[-1][:300] if errors else "the grader failed on this notebook"
    qualified, plain, message = found[-1].groups()
    name = qualified or plain
    if name in MEANING:
        return f"{MEANING[name]} ({name})"
    return f"{name}: {message}"[:300] if message else name


def changed_outside_blanks(autograded: Path) -> str:
    """The graded functions of an autograded notebook whose code the learner changed outside
    the blanks (the judge's verdicts say so; the change earned nothing), space-separated."""
    from autograder.records import verdicts

    return " ".join(function for path in sorted(autograded.glob("*.ipynb"))
                    for function, verdict in verdicts(path).items() if verdict["changed"])


def write_csv(assignment: str, failed: dict[str, str], url: str, out: Path,
              autograded: Path) -> dict:
    """One row per student: each graded cell's score, the total, why if not graded, and which
    functions were changed outside their blanks (they were graded as released). Returns the
    reply: the CSV's path, the graded students' scores and the maximum."""
    from nbgrader.api import Gradebook

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{assignment}.csv"
    with Gradebook(url) as gb:
        cells = [cell.name for notebook in gb.find_assignment(assignment).notebooks
                 for cell in notebook.grade_cells]
        maximum = gb.find_assignment(assignment).max_score
        rows = {}
        for sub in gb.assignment_submissions(assignment):
            by_cell = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            changed = changed_outside_blanks(autograded / sub.student.id / assignment)
            rows[sub.student.id] = [*(by_cell.get(c, 0) for c in cells), sub.score, maximum, "",
                                    changed]
    for student, problem in failed.items():
        rows[student] = [*(0 for _ in cells), 0, maximum, problem, ""]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", *cells, "score", "max_score", "not_graded_because",
                         "changed_outside_blanks"])
        for student in sorted(rows):
            writer.writerow([student, *rows[student]])
    scores = [row[-4] for student, row in rows.items() if student not in failed]
    return {"ok": True, "path": str(path), "scores": scores, "max_score": maximum}


def score(url: str, assignment: str, student: str) -> dict:
    """The points a graded submission earned, and the most it could."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        submission = gb.find_submission(assignment, student)
        return {"score": submission.score, "max_score": submission.max_score}


def _run(converter, log: logging.Logger) -> str:
    """Run one nbgrader converter; '' when it succeeded, else its log and traceback."""
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    log.addHandler(handler)
    try:
        converter.start()
        return ""
    except (Exception, SystemExit):  # noqa: BLE001 - NbGraderException, and what nbgrader missed
        return captured.getvalue() + traceback.format_exc()
    finally:
        log.removeHandler(handler)


def main(argv: list[str]) -> int:
    slot, flags = argv[0], argv[1:]
    # The slot's sandbox uid, for CappedExecute and JudgeGrades (judge/limits.slot)
    os.environ[settings.SLOT] = slot
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever else prints goes to the log

    from nbgrader.apps import AutogradeApp
    from nbgrader.converters import Autograde, GenerateFeedback
    from nbgrader.utils import temp_attrs

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    # Loads nbgrader_config.py from the course root, as the CLI does, but stops at an error in
    # it: nbgrader would log it and grade on, without the sandbox and the judge.
    app = AutogradeApp(raise_config_file_errors=True)
    app.initialize(flags)
    from autograder.judge.limits import GradingLimits

    GradingLimits(parent=app)  # a bad limit stops the worker now, not every submission
    reply({"ready": True, "db_url": app.coursedir.db_url})
    for line in sys.stdin:
        job = json.loads(line)
        if "csv" in job:
            try:
                reply(write_csv(job["csv"], job["failed"], app.coursedir.db_url, Path(job["out"]),
                                Path(app.coursedir.autograded_directory)))
            except Exception as err:  # noqa: BLE001 - make grade reports it
                reply({"ok": False, "problem": f"{type(err).__name__}: {err}"})
            continue
        with temp_attrs(app.coursedir, assignment_id=job["assignment"],
                        student_id=job["student"]):
            failed = _run(Autograde(coursedir=app.coursedir, parent=app, force=True), app.log)
            if not failed:
                failed = _run(GenerateFeedback(coursedir=app.coursedir, parent=app, force=True),
                              app.log)
        if failed:
            reply({"ok": False, "problem": problem(failed)})
        else:
            reply({"ok": True, **score(app.coursedir.db_url, job["assignment"], job["student"])})
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stderr.flush()
    # Without Python's teardown, which takes 0.5-1 s here: every kernel and runner already
    # ended with its submission, and every grade was committed.
    os._exit(status)
