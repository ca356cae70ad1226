"""Grade every submission with nbgrader, in parallel (`make grade`).

    python -m autograder.batch [assignment ...] [--jobs N] [--timeout SECONDS]
                               [--GradingLimits.NAME=VALUE ...]

Submissions live in grading/submitted/<student>/<assignment>/<assignment>.ipynb (nbgrader's
layout; `nbgrader collect` or `nbgrader zip_collect` put them there). N slots grade them at
once (nbgrader's own autograde is serial): each slot has its own sandbox uid and a long-lived
worker (autograder/batch/worker.py) running what `nbgrader autograde --student` and
`nbgrader generate_feedback --student` run, submission after submission; its log is
grading/logs/slot<N>.log. Then one CSV per assignment is written to grading/grades/.
Regrading is idempotent: the same submissions give the same grades, and nothing else in the
gradebook is touched.

`--GradingLimits.NAME=VALUE` flags (say `--GradingLimits.cell_seconds=30`) are passed on to
every worker, where they override nbgrader_config.py's limits for this run.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue

from autograder import nbgrader_cli
from autograder.batch import worker
from autograder.judge import sandbox, wire
from autograder.records import db_path
from distlab.source import paths

GRADING = paths.GRADING
SUBMITTED = GRADING / "submitted"
GRADES = GRADING / "grades"
FEEDBACK = GRADING / "feedback"
LOGS = GRADING / "logs"
LIMIT_FLAG = re.compile(r"^--GradingLimits\.\w+=\S+$")


@dataclass
class Outcome:
    student: str
    assignment: str
    ok: bool
    seconds: float
    problem: str = ""
    score: float = 0.0
    max_score: float = 0.0


def release_if_changed(ids: list[str], url: str) -> None:
    """Fill the gradebook from a release of each assignment, unless its source is unchanged
    since the last one (the gradebook at `url` learns cells, checksums and hidden tests from
    it)."""
    digests = {assignment: hashlib.sha256(paths.source_path(assignment).read_bytes()).hexdigest()
               for assignment in ids}
    stamps = {assignment: GRADING / "release" / assignment / ".source-sha256" for assignment in ids}
    gradebook = Path(db_path(url)).exists()
    changed = [assignment for assignment in ids
               if not (gradebook and stamps[assignment].exists()
                       and stamps[assignment].read_text() == digests[assignment])]
    if not changed:
        return
    from autograder import release  # here: it imports nbgrader

    release.release(changed, release_dir=GRADING / "release")
    for assignment in changed:
        stamps[assignment].write_text(digests[assignment])


def submissions(ids: list[str], submitted: Path = SUBMITTED) -> list[tuple[str, str]]:
    """(student, assignment) for every submitted assignment folder, sorted."""
    return sorted(
        (folder.parent.name, folder.name)
        for folder in submitted.glob("*/*")
        if folder.is_dir() and folder.name in ids
    )


class WorkerDied(Exception):
    """A slot's worker ended (or never started); the message says why, from its log."""


class Slot:
    """Sandbox slot `number` and the worker (autograder/batch/worker.py) grading in it, one
    submission at a time. The worker runs in a PID namespace of its own (nbgrader_cli.CONTAIN):
    killing it when a submission runs out of time ends its kernel and runners too; the next
    submission starts a fresh worker."""

    def __init__(self, number: int, limits: list[str], log: Path):
        self.number, self.limits, self.log = number, list(limits), log
        self.proc: subprocess.Popen | None = None
        self.db_url = ""  # the gradebook the worker grades into, as it read nbgrader's config
        log.unlink(missing_ok=True)  # this run's log only; a restarted worker appends

    def start(self) -> Slot:
        """Start the worker, unless it runs; it loads nbgrader and its config meanwhile."""
        if self.proc is None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self._logged = self.log.stat().st_size if self.log.exists() else 0
            with self.log.open("a") as log:
                self.proc = nbgrader_cli.popen(
                    [sys.executable, "-m", "autograder.batch.worker", str(self.number),
                     *self.limits], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
            self._ready = False
        return self

    def _reply(self, deadline: float) -> dict | None:
        """The worker's next line; None when `deadline` (time.monotonic) passes first.
        WorkerDied when it ends before answering (its log since `_logged` says why)."""
        try:
            line = wire.read_line(self.proc.stdout, deadline)
        except wire.Closed:
            self.close(kill=True)
            with self.log.open(errors="replace") as log:
                log.seek(self._logged)
                raise WorkerDied(worker.problem(log.read()[-20000:])) from None
        return None if line is None else json.loads(line)

    def ready(self, timeout: float = 300) -> Slot:
        """Wait until the worker has loaded nbgrader and its configuration."""
        self.start()
        if not self._ready:
            reply = self._reply(time.monotonic() + timeout)
            if reply is None:
                self.close(kill=True)
                raise WorkerDied(f"the grading worker did not start within {timeout:g} s")
            self.db_url, self._ready = reply["db_url"], True
        return self

    def grade(self, student: str, assignment: str, timeout: float) -> Outcome:
        """Autograde and write feedback for one submission; stop it after `timeout` s."""
        began = time.monotonic()

        def outcome(ok: bool, problem: str = "", *points: float) -> Outcome:
            return Outcome(student, assignment, ok, time.monotonic() - began, problem, *points)

        try:
            self.ready()  # a fresh worker's start-up does not count against the submission
            deadline = time.monotonic() + timeout
            self._logged = self.log.stat().st_size  # this submission's part of the log
            self.proc.stdin.write(json.dumps({"student": student, "assignment": assignment}
                                             ).encode() + b"\n")
            self.proc.stdin.flush()
            reply = self._reply(deadline)
        except WorkerDied as died:
            return outcome(False, str(died))
        except BrokenPipeError:
            self.close(kill=True)
            return outcome(False, "the grader failed on this notebook")
        if reply is None:
            self.close(kill=True)
            return outcome(False, f"grading took longer than {timeout:g} s and was stopped")
        return outcome(reply["ok"], reply.get("problem", ""), reply.get("score", 0.0),
                       reply.get("max_score", 0.0))

    def export(self, assignment: str, failed: dict[str, str], out: Path = GRADES) -> dict:
        """Have the worker write the assignment's grades CSV from the gradebook (`failed`:
        why some students were not graded); its path, the scores and the maximum."""
        self.ready()
        self.proc.stdin.write(json.dumps({"csv": assignment, "failed": failed, "out": str(out)}
                                         ).encode() + b"\n")
        self.proc.stdin.flush()
        reply = self._reply(time.monotonic() + 600)
        if reply is None or not reply["ok"]:
            raise WorkerDied(f"writing {assignment}'s grades failed: "
                             f"{reply['problem'] if reply else 'timed out'}")
        return reply

    def kill(self) -> None:
        """Stop the worker now, from any thread: grade() then reports that it died."""
        if (proc := self.proc) is not None:
            proc.kill()

    def end(self) -> None:
        """Tell the worker there is nothing more to grade: it exits when it is idle."""
        if self.proc is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def close(self, kill: bool = False) -> None:
        """End the worker and wait for it: at once with kill, else once it is idle."""
        if self.proc is None:
            return
        if kill:
            self.proc.kill()  # CONTAIN: its kernel and everything else it started die with it
        self.end()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc = None


def failure_feedback(outcome: Outcome) -> None:
    """A feedback page for a submission nbgrader could not grade, saying why, with the
    submission's timestamp and secret beside it as nbgrader's feedback has them
    (`nbgrader release_feedback` stops at a feedback folder without them)."""
    folder = FEEDBACK / outcome.student / outcome.assignment
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("timestamp.txt", "submission_secret.txt"):  # written by `nbgrader submit`
        submitted = SUBMITTED / outcome.student / outcome.assignment / name
        if submitted.is_file():
            (folder / name).write_bytes(submitted.read_bytes())
    (folder / f"{outcome.assignment}.html").write_text(
        f"<html><body><h1>{html.escape(outcome.assignment)}: not graded</h1>"
        f"<p>Your submission could not be graded: {html.escape(outcome.problem)}</p>"
        "<p>Score: 0. Check that the notebook opens in JupyterLab and runs top to bottom, "
        "then hand it in again.</p></body></html>\n")


def enrol_students(url: str, students: set[str]) -> None:
    """Put every student of the batch in the gradebook before grading starts, one writer for
    all: two slots grading one student's two assignments at once would each add the student,
    and one would fail ("UNIQUE constraint failed: student.id": not graded). A student the
    gradebook knows by id only (nbgrader's autograde adds them so, and the formgrader then
    lists "None, None") gets a last name, the id, and an empty first name. Names given in the
    gradebook (`nbgrader db student import`, the formgrader's Students page) stay."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gb:
        for student_id in sorted(students):
            try:
                student = gb.find_student(student_id)
            except MissingEntry:
                student = None
            if student is None or (student.first_name is None and student.last_name is None):
                gb.update_or_create_student(student_id, last_name=student_id, first_name="")


def summary(export: dict, failed: dict[str, str]) -> str:
    """`grades: PATH (n graded, mean m / max; k not graded)`."""
    scores, most = export["scores"], export["max_score"]
    graded = f"{len(scores)} graded, mean {sum(scores) / len(scores):.1f} / {most:g}" if scores \
        else "none graded"
    missed = f"; {len(failed)} not graded (see not_graded_because)" if failed else ""
    return f"grades: {export['path']} ({graded}{missed})"


def progress(done: int, total: int, outcome: Outcome, started: float) -> None:
    width = 24
    filled = width * done // total
    rate = done / max(time.perf_counter() - started, 1e-9)
    eta = (total - done) / rate if rate else 0
    status = (f"{outcome.score:g}/{outcome.max_score:g}" if outcome.ok
              else f"NOT GRADED: {outcome.problem.splitlines()[0][:300]}")
    line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            f"{outcome.assignment}/{outcome.student} {outcome.seconds:.0f}s {status} "
            f"(eta {eta:.0f}s)")
    print(line, flush=True)


def grade_all(todo: list[tuple[str, str]], slots: list[Slot], timeout: float
              ) -> list[Outcome]:
    """Grade every (student, assignment), each in the next free slot; print progress."""
    free = SimpleQueue()  # each running submission holds one slot until it finishes
    for slot in slots:
        free.put(slot)

    def task(student, assignment):
        slot = free.get()
        try:
            return slot.grade(student, assignment, timeout)
        finally:
            free.put(slot)

    outcomes: list[Outcome] = []
    started = time.perf_counter()
    pool = ThreadPoolExecutor(len(slots))
    try:
        futures = [pool.submit(task, s, a) for s, a in todo]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            if not outcome.ok:
                failure_feedback(outcome)
            progress(len(outcomes), len(todo), outcome, started)
    except BaseException:  # Ctrl-C: stop the submissions being graded, grade no more
        for slot in slots:
            slot.kill()
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="submissions graded at once (default: one per core)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds one submission may take before it is stopped")
    args, unknown = parser.parse_known_args(argv)
    limits = [flag for flag in unknown if LIMIT_FLAG.match(flag)]
    if rest := [flag for flag in unknown if flag not in limits]:
        parser.error(f"unrecognized arguments: {' '.join(rest)} (limits: "
                     "--GradingLimits.NAME=VALUE)")
    ids = args.ids or paths.assignment_ids()
    todo = submissions(ids)
    if not todo:
        print(f"no submissions under {SUBMITTED}/<student>/<assignment>/")
        return 0
    # Workers start first: their start-up overlaps the release check below.
    slots = [Slot(number, limits, LOGS / f"slot{number}.log").start()
             for number in range(min(args.jobs, len(todo)))]
    try:
        url = slots[0].ready().db_url  # what nbgrader_config.py says, read by the worker
        release_if_changed(ids, url)
        if path := db_path(url):
            # WAL: a grader reading the gradebook never blocks another one saving its grades
            with sqlite3.connect(path) as db:
                db.execute("PRAGMA journal_mode=WAL")
        enrol_students(url, {student for student, _ in todo})
        print(f"grading {len(todo)} submission(s), {len(slots)} at a time", flush=True)
        outcomes = grade_all(todo, slots, args.timeout)
        for slot in slots[1:]:
            slot.end()  # they exit on their own, all at once, while the CSVs are written
        for assignment in sorted({a for _, a in todo}):
            failed = {o.student: o.problem for o in outcomes
                      if o.assignment == assignment and not o.ok}
            print(summary(slots[0].export(assignment, failed), failed))
    except BaseException as err:  # a worker failed, or Ctrl-C: stop everything now
        for slot in slots:
            slot.close(kill=True)
        if isinstance(err, WorkerDied):
            sys.exit(f"make grade: a grading worker failed: {err}\n(its log: {slots[0].log})")
        raise
    finally:
        for slot in slots:
            slot.close()
        if sandbox.available():  # memory cgroups of sandboxes that were killed, not ended
            sandbox.remove_leftovers(sandbox.uid_for(slot.number) for slot in slots)
    print(f"feedback: {FEEDBACK}/<student>/<assignment>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
