"""Submissions that try to hang, crash, flood or escape the grading run. Most are the solved
notebook plus one hazard, so they may earn up to what that code honestly earns; a hazard
inside a graded function costs that function's points (the `zero` cells). A hazard meant to
run where the judge runs a function sits in one of its blanks: code outside the blanks is
graded as released, so it would never run there."""

from __future__ import annotations

from adversarial import SOLVED, kind
from adversarial.cells import JUDGED, add_after, fill_blanks, hazard, hazard_in_every_blank

# ---- time


@kind(base=SOLVED)
def loop_in_cell(nb):
    """A cell that loops forever. The cell is interrupted at the cell limit; the rest of the
    notebook runs and is judged: up to full marks."""
    return add_after(nb, "locked_00", "while True:\n    pass")


@kind(base=SOLVED)
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


@kind(base=SOLVED, zero=("ring_allreduce_tests",))
def loop_in_function(nb):
    """Where the judge runs it, every blank of ring_allreduce loops forever before it gives the
    right answer. The judge's calls time out, the wrong-blank search gives up within its
    budget: ring_allreduce scores 0. (In the kernel the blanks give the answer at once: a cell
    that loops is loop_in_cell's, and would burn another cell limit of CPU here.)"""
    return hazard_in_every_blank(nb, "ring_allreduce", f"{JUDGED}\n    while True:\n        pass")


@kind(base=SOLVED)
def deadlock_in_cell(nb):
    """A cell that starts 2 ranks that each wait for the other forever (run(..., timeout=None)).
    The cell is interrupted at the cell limit: up to full marks."""
    return add_after(nb, "locked_00", """
def stuck(rank, world_size):
    dist.recv(torch.zeros(1), src=(rank + 1) % world_size)

run(stuck, world_size=2, timeout=None)
""")


@kind(base=SOLVED, zero=("ring_allreduce_p2p_tests",))
def deadlock_in_function(nb):
    """ring_allreduce_p2p starts its send with the blocking `send` (blank [1]), so every rank
    waits in its send for a receive that never starts, and its other blanks first receive from
    the right neighbour, which never sends. The harness's timeouts stop it: ring_allreduce_p2p
    scores 0."""
    return hazard_in_every_blank(nb, "ring_allreduce_p2p", """
import torch
import torch.distributed as dist
dist.recv(torch.zeros(1), src=(dist.get_rank() + 1) % dist.get_world_size())
""", b1=lambda answer: "dist.send(outgoing, dst=right)", b2=lambda answer: "copy_")


# ---- memory


HOG = """
blocks = []
while True:
    blocks.append(bytearray(b"x") * (64 << 20))
"""


@kind(base=SOLVED)
def memory_hog_in_cell(nb):
    """A cell that allocates until the memory limit kills the kernel. nbgrader cannot finish a
    notebook whose kernel died: 0 and the not-graded page; the host and the other students'
    kernels are untouched."""
    return add_after(nb, "locked_00", HOG)


@kind(base=SOLVED, zero=("ring_allreduce_uneven_tests",))
def memory_hog_in_function(nb):
    """Every blank of ring_allreduce_uneven allocates until it dies, but only where the judge
    runs it (the notebook's own checks pass). Its runner dies: ring_allreduce_uneven scores 0,
    the rest their points."""
    return hazard_in_every_blank(nb, "ring_allreduce_uneven", JUDGED + "\n" + "\n".join(
        "    " + line for line in HOG.strip().split("\n")))


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


@kind(base=SOLVED)
def orphans_in_cell(nb):
    """A cell that leaves a daemon behind: double fork + setsid + a listening socket + sleep,
    and `sleep 10000` in a new session. Nothing may outlive the kernel: up to full marks."""
    return add_after(nb, "locked_00", DAEMON)


@kind(base=SOLVED)
def orphans_in_function(nb):
    """tree_broadcast leaves a daemon with a listening socket behind on every call (and is
    otherwise right). Nothing may outlive the judge's runner: up to full marks."""
    return fill_blanks(nb, "tree_broadcast", {1: hazard(DAEMON)})


# ---- exits


@kind(base=SOLVED)
def exit_cells(nb):
    """Cells that call sys.exit(3) and raise KeyboardInterrupt. Each is an error in its cell;
    the notebook goes on: up to full marks."""
    add_after(nb, "locked_00", "raise KeyboardInterrupt")
    return add_after(nb, "locked_00", "import sys\nsys.exit(3)")


@kind(base=SOLVED)
def os_exit_cell(nb):
    """A cell that calls os._exit(0): the kernel is gone, nbgrader stops the notebook: 0 and
    the not-graded page; the batch goes on."""
    return add_after(nb, "locked_00", "import os\nos._exit(0)")


@kind(base=SOLVED, zero=("ring_allreduce_tests", "chunk_bounds_tests", "ring_allgather_tests"))
def exits_in_function(nb):
    """Where the judge runs their blanks, ring_allreduce calls sys.exit(), chunk_bounds
    os._exit(0) and ring_allgather raises KeyboardInterrupt. Those three score 0; the exercises
    that only use chunk_bounds are graded with a correct one, and get their points."""
    hazard_in_every_blank(nb, "ring_allreduce", f"{JUDGED}\n    import sys\n    sys.exit()")
    hazard_in_every_blank(nb, "chunk_bounds", f"{JUDGED}\n    import os\n    os._exit(0)")
    return hazard_in_every_blank(nb, "ring_allgather", f"{JUDGED}\n    raise KeyboardInterrupt")


# ---- output


@kind(base=SOLVED)
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
import autograder
root = pathlib.Path(autograder.__file__).resolve().parents[1]
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


@kind(base=SOLVED)
def write_outside_cell(nb):
    """A cell that tries to write the gradebook (and to set every auto_score to 1000), the
    grades CSV, solutions/, notebooks/, the grading code and /tmp/marker. Every write fails or
    stays in a private /tmp: up to full marks, and those files are unchanged."""
    return add_after(nb, "locked_00", WRITE)


@kind(base=SOLVED)
def write_outside_function(nb):
    """alltoall's first blank tries the same writes on every call where the judge runs it (its
    cwd is /, so the grading folder is guessed as <course>/grading). Nothing changes: up to
    full marks."""
    code = WRITE.replace("pathlib.Path.cwd().parents[2], ", "")
    return fill_blanks(nb, "alltoall", {1: hazard(f"{JUDGED}\n" + "\n".join(
        "    " + line for line in code.strip().split("\n")))})
