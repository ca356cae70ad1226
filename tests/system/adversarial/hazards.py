"""Submissions that try to hang, crash, flood or escape the grading run. Each is the released
notebook with a few functions solved (chunk_bounds, a pure function, by default) plus one
hazard. A hazard the grader survives leaves the solved functions their points (the `earns`
cells); a hazard inside a graded function costs that function's points (the `zero` cells); one
that stops the notebook costs everything (not graded: 0). A hazard meant to run where the judge
runs a function sits in one of its blanks: code outside the blanks is graded as released, so it
would never run there."""

from __future__ import annotations

import textwrap

from adversarial import ALL, RELEASED, kind
from adversarial.cells import JUDGED, add_after, fill_blanks, hazard, hazard_in_every_blank

SOUND = "chunk_bounds"  # the function solved next to a hazard: it must keep its points
SOUND_TESTS = f"{SOUND}_tests"

# ---- time


@kind(base=RELEASED, solve=[SOUND], earns=[SOUND_TESTS])
def loop_in_cell(nb):
    """A cell that loops forever. The cell is interrupted at the cell limit; the rest of the
    notebook runs and is judged: chunk_bounds earns its points."""
    return add_after(nb, "locked_00", "while True:\n    pass")


@kind(base=RELEASED, solve=[SOUND], zero=ALL)
def unstoppable_loop_in_cell(nb):
    """A cell that ignores interrupts (SIGINT ignored, KeyboardInterrupt swallowed) and loops
    forever. At the cell limit the interrupt does nothing, nbgrader stops the notebook: 0 and
    the not-graded page (a cell did not finish in time); the batch goes on."""
    return add_after(nb, "locked_00", """
import signal
import time
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    try:
        time.sleep(1)
    except BaseException:
        pass
""")


@kind(base=RELEASED, solve=["ring_allreduce", SOUND], zero=["ring_allreduce_tests"],
      earns=[SOUND_TESTS])
def loop_in_function(nb):
    """Where the judge runs it, every blank of ring_allreduce loops forever before it gives the
    right answer. The judge's calls time out, the wrong-blank search gives up within its
    budget: ring_allreduce scores 0, chunk_bounds its points. (In the kernel the blanks give the
    answer at once: a cell that loops is loop_in_cell's, and would burn another cell limit of
    CPU here.)"""
    return hazard_in_every_blank(nb, "ring_allreduce", f"{JUDGED}\n    while True:\n        pass")


@kind(base=RELEASED, solve=[SOUND], earns=[SOUND_TESTS])
def deadlock_in_cell(nb):
    """A cell that starts 2 ranks that each wait for the other forever (run(..., timeout=None)).
    The cell is interrupted at the cell limit, the rest runs: chunk_bounds earns its points."""
    return add_after(nb, "locked_00", """
def stuck(rank, world_size):
    dist.recv(torch.zeros(1), src=(rank + 1) % world_size)

run(stuck, world_size=2, timeout=None)
""")


@kind(base=RELEASED, solve=["exchange", SOUND], zero=["exchange_tests"], earns=[SOUND_TESTS])
def deadlock_in_function(nb):
    """exchange's body (its one blank) starts with the blocking `send`, so every rank waits in
    its send for a receive that never starts. The harness's timeouts stop it: exchange scores
    0, chunk_bounds its points."""
    return hazard_in_every_blank(nb, "exchange", """
import torch
import torch.distributed as dist
dist.recv(torch.zeros(1), src=(dist.get_rank() + 1) % dist.get_world_size())
""", b1=lambda answer: "dist.send(send, dst=dst); " + answer)


# ---- memory


HOG = """
blocks = []
while True:
    blocks.append(bytearray(b"x") * (64 << 20))
"""


@kind(base=RELEASED, solve=[SOUND], zero=ALL)
def memory_hog_in_cell(nb):
    """A cell that allocates until the memory limit kills the kernel. nbgrader cannot finish a
    notebook whose kernel died: 0 and the not-graded page; the host and the other students'
    kernels are untouched."""
    return add_after(nb, "locked_00", HOG)


@kind(base=RELEASED, solve=["ring_allreduce", SOUND],
      zero=["ring_allreduce_tests"], earns=[SOUND_TESTS])
def memory_hog_in_function(nb):
    """Every blank of ring_allreduce allocates until it dies, but only where the judge runs it
    (the notebook's own checks pass). Its runner dies: ring_allreduce scores 0, chunk_bounds
    its points."""
    return hazard_in_every_blank(nb, "ring_allreduce",
                                 JUDGED + "\n" + textwrap.indent(HOG.strip(), "    "))


# ---- processes and ports


DAEMON = """
import os, socket, subprocess, time
subprocess.Popen(["sleep", "10000"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", 0))
        server.listen()
        time.sleep(10000)
    os._exit(0)
time.sleep(0.2)
"""


@kind(base=RELEASED, solve=[SOUND], earns=[SOUND_TESTS])
def orphans_in_cell(nb):
    """A cell that leaves a daemon behind: double fork + setsid + a listening socket + sleep,
    and `sleep 10000` in a new session. Nothing may outlive the kernel; chunk_bounds earns its
    points."""
    return add_after(nb, "locked_00", DAEMON)


@kind(base=RELEASED, solve=["tree_broadcast"], earns=["tree_broadcast_tests"])
def orphans_in_function(nb):
    """tree_broadcast leaves a daemon with a listening socket behind on its first call (and is
    otherwise right). Nothing may outlive the judge's runner; tree_broadcast earns its points.
    (A daemon on every call would soon meet the sandbox's process limit: a later call could
    not fork, and the function would fairly lose points.)"""
    once = 'import os\nif not os.path.exists("/tmp/daemon-started"):\n' \
        '    open("/tmp/daemon-started", "w").close()\n' + textwrap.indent(DAEMON, "    ")
    return fill_blanks(nb, "tree_broadcast", {1: hazard(once)})


# ---- exits


@kind(base=RELEASED, solve=[SOUND], earns=[SOUND_TESTS])
def exit_cells(nb):
    """Cells that call sys.exit(3) and raise KeyboardInterrupt. Each is an error in its cell;
    the notebook goes on: chunk_bounds earns its points."""
    add_after(nb, "locked_00", "raise KeyboardInterrupt")
    return add_after(nb, "locked_00", "import sys\nsys.exit(3)")


@kind(base=RELEASED, solve=[SOUND], zero=ALL)
def os_exit_cell(nb):
    """A cell that calls os._exit(0): the kernel is gone, nbgrader stops the notebook: 0 and
    the not-graded page; the batch goes on."""
    return add_after(nb, "locked_00", "import os\nos._exit(0)")


@kind(base=RELEASED, solve=["ring_allreduce", SOUND, "exchange", "ring_reduce_scatter",
                           "alltoall"],
      zero=["ring_allreduce_tests", SOUND_TESTS, "exchange_tests"],
      earns=["ring_reduce_scatter_tests", "alltoall_tests"])
def exits_in_function(nb):
    """Where the judge runs their blanks, ring_allreduce calls sys.exit(), chunk_bounds
    os._exit(0) and exchange raises KeyboardInterrupt. Those three score 0; the exercises built
    on exchange (ring_reduce_scatter, alltoall) are graded with a correct one, and get their
    points."""
    hazard_in_every_blank(nb, "ring_allreduce", f"{JUDGED}\n    import sys\n    sys.exit()")
    hazard_in_every_blank(nb, "chunk_bounds", f"{JUDGED}\n    import os\n    os._exit(0)")
    return hazard_in_every_blank(nb, "exchange", f"{JUDGED}\n    raise KeyboardInterrupt")


# ---- output


@kind(base=RELEASED, solve=[SOUND], zero=ALL)
def huge_output(nb):
    """Prints 100 MB in one line, then floods stdout and stderr until the cell limit. The
    grader keeps 1 MiB of a cell's output and refuses messages over 64 MiB, so its memory and
    the feedback stay small; a refused message loses the kernel's later output, and nbgrader
    stops the notebook: 0 and the not-graded page."""
    add_after(nb, "locked_00", """
import sys
while True:
    sys.stdout.write("y" * 65536 + "\\n")
    sys.stderr.write("z" * 65536 + "\\n")
""")
    return add_after(nb, "locked_00", 'print("x" * 100_000_000)')


# ---- files


WRITE = """
import os, pathlib, sqlite3
root = pathlib.Path(COURSE)  # the course's folder (where the judge runs, autograder has no file)
grading = [pathlib.Path.cwd().parents[2], root / "grading"]
targets = [root / "solutions" / "01_collectives" / "01_collectives.py",
           root / "notebooks" / "01_collectives" / "01_collectives.ipynb",
           root / "autograder" / "grade_cell.py", root / "nbgrader_config.py",
           pathlib.Path("/tmp/marker")]
targets += [g / name for g in grading
            for name in ("gradebook.db", "marker", "grades/01_collectives.csv")]
for path in targets:
    try:
        with open(path, "a") as f:
            f.write("\\n# pwned\\n")
    except Exception:
        pass
    try:
        os.chmod(path, 0o777)
    except Exception:
        pass
    try:
        db = sqlite3.connect(path)
        db.execute("UPDATE grade SET auto_score = 1000")
        db.commit()
    except Exception:
        pass
for g in grading:
    try:
        (g / "feedback").rename(g / "feedback-gone")
    except Exception:
        pass
"""


def write() -> str:
    """WRITE aimed at this course's folder, as if the attacker knew where it is."""
    from distlab.source import paths

    return WRITE.replace("COURSE", repr(str(paths.ROOT)))


@kind(base=RELEASED, solve=[SOUND], earns=[SOUND_TESTS])
def write_outside_cell(nb):
    """A cell that tries to write the gradebook (and to set every auto_score to 1000), the
    grades CSV, solutions/, notebooks/, the grading code and /tmp/marker. Every write fails or
    stays in a private /tmp: those files are unchanged, and chunk_bounds earns its points."""
    return add_after(nb, "locked_00", write())


@kind(base=RELEASED, solve=["alltoall"], earns=["alltoall_tests"])
def write_outside_function(nb):
    """alltoall's first blank tries the same writes on every call where the judge runs it (its
    cwd is /, so the grading folder is guessed as <course>/grading). Nothing changes, and
    alltoall earns its point."""
    code = write().replace("pathlib.Path.cwd().parents[2], ", "")
    return fill_blanks(nb, "alltoall",
                       {1: hazard(f"{JUDGED}\n" + textwrap.indent(code.strip(), "    "))})
