"""Can learner code in `autograder.judge.sandbox` hurt anything but itself?

Run: .venv/bin/python -m pytest tests/judge/test_sandbox.py -q
(about 30 s; needs root and unshare)
"""

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import nbclient
import nbformat
import pytest

from autograder.judge import sandbox
from autograder.judge.sandbox import Limits, kernelspec, wrap
from distlab.source import paths

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
MiB = 1 << 20


WHY_NOT = sandbox.why_unavailable()
needs_namespaces = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)
_uids = (sandbox.uid_for(slot) for slot in range(500, 1000))  # clear of a grading run's slots


def _processes_of(uid: int) -> list[str]:
    """'pid state' of every host process whose real uid is `uid` (zombies included)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid:
            found.append(f"{pid} {fields['State'].strip()} {fields['Name'].strip()}")
    return found


@pytest.fixture
def uid():
    """A fresh uid per test; afterwards not one process of it may be left on the host."""
    uid = next(_uids)
    assert not _processes_of(uid)
    yield uid
    assert not _processes_of(uid), "the sandbox left processes behind"


@pytest.fixture
def outside_tmp():
    """A folder outside /tmp (the sandbox's /tmp is a fresh tmpfs), removed afterwards."""
    folder = tempfile.mkdtemp(dir="/var/tmp", prefix="sandbox-test-")
    os.chmod(folder, 0o755)
    yield Path(folder)
    shutil.rmtree(folder)


def sandboxed(code: str, uid: int, *, timeout: float = 60, **options):
    """Run Python `code` in a sandbox (cwd: the repository); the CompletedProcess."""
    command = wrap([PY, "-c", textwrap.dedent(code)], uid=uid, **options)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def memory_cgroup_parent() -> str | None:
    with open("/proc/self/cgroup") as f:
        paths = [ln.strip().split(":", 2)[2] for ln in f if "memory" in ln.split(":")[1]]
    return f"{sandbox.MEMORY_V1}{paths[0].rstrip('/')}" if paths else None


# ---- wrap() itself: no root needed ----

def test_a_second_grader_on_the_machine_takes_its_own_uids():
    """Does DISTLAB_SANDBOX_FIRST_UID move the slots' uids (two graders at once, as the two
    lanes of make test, must not share one)?"""
    code = "from autograder.judge import sandbox; print(sandbox.uid_for(0), sandbox.uid_for(3))"
    env = {**os.environ, "DISTLAB_SANDBOX_FIRST_UID": "60300"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=paths.ROOT, check=True).stdout
    assert out.split() == ["60300", "60303"]


def test_does_wrap_refuse_to_run_as_root():
    with pytest.raises(ValueError, match="never root"):
        wrap(["true"], uid=0)


def test_does_wrap_refuse_a_writable_folder_that_does_not_exist(tmp_path):
    with pytest.raises(ValueError, match="must exist"):
        wrap(["true"], uid=sandbox.uid_for(0), writable=[str(tmp_path / "nope")])


def test_does_each_grading_slot_get_its_own_uid():
    uids = [sandbox.uid_for(slot) for slot in range(8)]
    assert len(set(uids)) == 8 and min(uids) > 1000  # no login user's


def test_is_a_slot_without_a_uid_refused():
    with pytest.raises(ValueError, match="no sandbox uid"):
        sandbox.uid_for(-1)


def test_does_a_first_uid_past_the_range_say_what_to_set():
    """DISTLAB_SANDBOX_FIRST_UID=65000 leaves no uid for any slot: does the error name the
    variable and a value that works, not only the slot?"""
    code = "from autograder.judge import sandbox; sandbox.uid_for(0)"
    env = {**os.environ, "DISTLAB_SANDBOX_FIRST_UID": "65000"}
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=paths.ROOT).stderr
    assert "set DISTLAB_SANDBOX_FIRST_UID lower" in err and "below 61184" in err, err


def test_does_wrap_refuse_to_hide_a_file(tmp_path):
    (tmp_path / "gradebook.db").write_text("")
    with pytest.raises(ValueError, match="must be folders"):
        wrap(["true"], uid=sandbox.uid_for(0), hidden=[str(tmp_path / "gradebook.db")])


def test_do_the_default_hidden_folders_cover_the_answers_and_the_grading_data():
    hidden = sandbox.default_hidden()
    assert str(paths.SOLUTIONS) in hidden and str(paths.GRADING) in hidden
    assert str(sandbox.git_dir()) in hidden  # every committed solution is in there too
    assert sandbox.git_dir().is_dir()  # also in a git worktree, where .git is a file


def test_does_kernelspec_write_a_sandboxed_ipykernel(tmp_path):
    folder = kernelspec(tmp_path, uid=sandbox.uid_for(0))
    spec = json.loads((tmp_path / "kernels" / "distlab-sandbox" / "kernel.json").read_text())
    assert folder == tmp_path / "kernels" / "distlab-sandbox"
    assert spec["language"] == "python" and spec["display_name"]
    assert spec["argv"][0].endswith("unshare") and "--net" not in spec["argv"]  # ZMQ to outside
    assert spec["argv"][-2:] == ["-f", "{connection_file}"]


# ---- inside the sandbox ----

@needs_namespaces
def test_is_the_wrapper_silent_and_the_exit_status_passed_on(uid):
    quiet = sandboxed("pass", uid)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert sandboxed("raise SystemExit(3)", uid).returncode == 3
    killed = sandboxed("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", uid)
    assert killed.returncode == 128 + signal.SIGTERM  # as a shell reports it


@needs_namespaces
def test_does_it_run_as_the_given_uid_with_no_privileges(uid, monkeypatch):
    monkeypatch.setenv("DISTLAB_SECRET_TOKEN", "x")
    result = sandboxed("""
        import os
        status = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines())
        print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        env = os.environ
        print(status["NoNewPrivs"], status["CapEff"], env["HOME"], env["MPLCONFIGDIR"])
        print("DISTLAB_SECRET_TOKEN" in os.environ, os.environ["PATH"].split(":")[0])
        try:
            os.listdir("/root")
        except PermissionError:
            print("/root closed")
    """, uid)
    lines = result.stdout.splitlines()
    assert lines[0] == f"{uid} {uid} {uid} []", result.stderr
    assert lines[1] == "1 0000000000000000 /tmp /tmp"
    assert lines[2] == f"False {os.path.dirname(PY)}"
    assert lines[3] == "/root closed"


@needs_namespaces
def test_do_writes_outside_tmp_fail_read_only(uid):
    # /var/tmp and /dev/shm (mounted fresh here) are world-writable on the host.
    result = sandboxed(f"""
        for path in ["/var/tmp/learner", "{ROOT}/learner.txt", "/etc/learner"]:
            try:
                open(path, "w")
            except OSError as error:
                print(error.errno)
        open("/dev/null", "w").write("devices still work")
    """, uid)
    assert result.stdout.split() == [str(errno.EROFS)] * 3, result.stderr
    assert not Path("/var/tmp/learner").exists() and not (ROOT / "learner.txt").exists()


@needs_namespaces
def test_is_tmp_private_and_gone_afterwards(uid):
    marker = Path(tempfile.mkstemp(prefix="host-marker-")[1])
    try:
        code = f"""
            import os
            print(os.path.exists("{marker}"), sorted(os.listdir("/tmp")))
            for place in ("/tmp", "/dev/shm"):
                open(f"{{place}}/learner-{uid}", "w").write("left behind?")
        """
        first, second = sandboxed(code, uid), sandboxed(code, uid)
    finally:
        marker.unlink()
    # the repository and the venv, when they live under /tmp (a clone in CI), are shown there
    shown = sorted({Path(p).resolve().parts[2] for p in (sandbox.REPO, sys.prefix)
                    if Path(p).resolve().is_relative_to("/tmp")})
    assert first.stdout == second.stdout == f"False {shown}\n", first.stderr + second.stderr
    assert not Path(f"/tmp/learner-{uid}").exists() and not Path(f"/dev/shm/learner-{uid}").exists()


@needs_namespaces
def test_is_tmp_size_limited(uid):
    result = sandboxed("""
        try:
            open("/tmp/big", "wb").write(bytes(8 << 20))
        except OSError as error:
            print(error.errno)
    """, uid, limits=Limits(tmp_bytes=2 * MiB))
    assert result.stdout.strip() == str(errno.ENOSPC), result.stderr


@needs_namespaces
def test_are_hidden_folders_empty_inside(uid, outside_tmp):
    secret = outside_tmp / "secret"
    secret.mkdir()
    (secret / "answer.txt").write_text("42")
    os.chmod(secret / "answer.txt", 0o644)
    result = sandboxed(f"""
        import os
        for folder in ["{secret}", "{paths.SOLUTIONS}", "{sandbox.git_dir()}"]:
            print(os.listdir(folder))
    """, uid, hidden=[str(secret), *sandbox.default_hidden()])
    assert result.stdout.split("\n")[:3] == ["[]"] * 3, result.stderr
    assert (secret / "answer.txt").read_text() == "42"  # hidden, not harmed


@needs_namespaces
def test_is_a_writable_folder_inside_a_hidden_one_the_only_thing_seen(uid, outside_tmp):
    """The grading case: grading/ hidden, the one submission being graded bound read-write."""
    mine, theirs = outside_tmp / "autograded" / "alice", outside_tmp / "autograded" / "bob"
    mine.mkdir(parents=True), theirs.mkdir()
    (theirs / "bob.ipynb").write_text("{}")
    os.chown(mine, uid, uid)
    result = sandboxed(f"""
        import os
        os.chdir("{mine}")
        open("result.txt", "w").write("kept")
        print(os.listdir("{outside_tmp}"), os.listdir("{outside_tmp / 'autograded'}"))
    """, uid, hidden=[str(outside_tmp)], writable=[str(mine)])
    assert result.stdout == "['autograded'] ['alice']\n", result.stderr
    assert (mine / "result.txt").read_text() == "kept"


@needs_namespaces
def test_is_a_readable_folder_under_a_closed_parent_all_that_is_seen_there(uid, outside_tmp):
    """How pyenv's Python under root's 700 home runs inside: the parent shows nothing else."""
    closed, shown = outside_tmp / "home", outside_tmp / "home" / "python"
    shown.mkdir(parents=True)
    (closed / "private.txt").write_text("no")
    (shown / "lib.py").write_text("yes")
    os.chmod(closed, 0o700)
    result = sandboxed(f"""
        import os
        print(open("{shown / 'lib.py'}").read(), os.path.exists("{closed / 'private.txt'}"))
        open("{shown / 'new.py'}", "w")
    """, uid, readable=[str(shown)])
    assert result.stdout == "yes False\n"
    assert "Read-only file system" in result.stderr


@needs_namespaces
def test_does_a_working_directory_in_a_hidden_folder_see_nothing(uid, outside_tmp):
    """The cwd is looked up again after the mounts: the old one would see under the cover."""
    (outside_tmp / "answer.txt").write_text("42")
    command = wrap([PY, "-c", "import os; print(os.listdir('.'))"], uid=uid,
                   hidden=[str(outside_tmp)])
    result = subprocess.run(command, capture_output=True, text=True, cwd=outside_tmp)
    assert result.stdout == "[]\n", result.stderr


@needs_namespaces
def test_does_a_readable_working_directory_that_is_hidden_itself_stay_hidden(uid, outside_tmp):
    """readable_cwd shows the folder a kernel starts in, but not when that folder is hidden
    (the grading kernel started in the course repository, which kernel_view hides whole):
    the command starts in an empty folder, and what is hidden inside the folder stays so."""
    (outside_tmp / "answer.txt").write_text("42")
    (outside_tmp / "solutions").mkdir()
    command = wrap([PY, "-c", "import os; print(os.listdir('.'))"], uid=uid,
                   hidden=[str(outside_tmp), str(outside_tmp / "solutions")], readable_cwd=True)
    result = subprocess.run(command, capture_output=True, text=True, cwd=outside_tmp)
    assert (result.returncode, result.stdout) == (0, "['solutions']\n"), result.stderr


@needs_namespaces
def test_is_a_working_directory_under_a_hidden_folder_an_error(uid, outside_tmp):
    (outside_tmp / "inner").mkdir()
    command = wrap([PY, "-c", "pass"], uid=uid, hidden=[str(outside_tmp)])
    result = subprocess.run(command, capture_output=True, text=True, cwd=outside_tmp / "inner")
    assert result.returncode == sandbox.FAILED
    assert "is not visible inside" in result.stderr


@needs_namespaces
def test_is_a_missing_command_reported(uid):
    result = subprocess.run(wrap(["no-such-program"], uid=uid), capture_output=True, text=True)
    assert result.returncode == sandbox.NOT_FOUND
    assert result.stderr == "sandbox: cannot run no-such-program: No such file or directory\n"


@needs_namespaces
def test_does_a_daemonized_child_die_with_the_sandbox(uid):
    """Double fork, setsid, a listening port and a zombie: nothing outlives the sandbox."""
    result = sandboxed("""
        import os, socket, sys, time
        if os.fork() == 0:
            os._exit(0)  # never waited for: a zombie
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                server = socket.create_server(("127.0.0.1", 0))
                print(server.getsockname()[1], flush=True)
                time.sleep(300)
            os._exit(0)
        time.sleep(1)
    """, uid, network=True, timeout=30)
    port = int(result.stdout)
    with socket.socket() as s:  # free again on the host
        s.bind(("127.0.0.1", port))
    # (the uid fixture then checks that no process of the uid, zombies included, is left)


@needs_namespaces
def test_does_killing_the_sandbox_kill_everything_in_it(uid):
    """What a caller's wall-clock timeout does: SIGKILL to the process wrap()'s command started
    (unshare; --kill-child takes PID 1 along, and with it the whole namespace)."""
    code = "import os, time; os.fork(); os.fork(); print('up', flush=True); time.sleep(300)"
    proc = subprocess.Popen(wrap([PY, "-c", code], uid=uid), stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    assert proc.stdout.readline() == "up\n"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_of(uid)
    # PID 1 had no time to remove its memory cgroup: the next sandbox of this uid replaces it.
    assert sandboxed("pass", uid).returncode == 0
    parent = memory_cgroup_parent()
    assert not parent or not os.path.exists(f"{parent}/{sandbox.CGROUP_PREFIX}{uid}")


@needs_namespaces
def test_is_a_fork_bomb_stopped_by_the_process_limit(uid):
    limit = 40
    command = wrap([PY, "-c", textwrap.dedent("""
        import os, sys, time
        first = os.getpid()
        while True:
            try:
                os.fork()
            except BlockingIOError:
                if os.getpid() == first:
                    print("fork refused", flush=True)
                    time.sleep(1)
                    sys.exit(0)
                time.sleep(60)
    """)], uid=uid, limits=Limits(processes=limit))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    most = 0
    while proc.poll() is None:
        most = max(most, len(_processes_of(uid)))
        time.sleep(0.05)
    assert proc.stdout.read() == "fork refused\n" and proc.returncode == 0
    assert 0 < most <= limit
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


@needs_namespaces
def test_does_a_memory_hog_die_and_leave_the_host_alone(uid):
    limit = 200 * MiB
    result = sandboxed(f"""
        chunks = []
        while sum(map(len, chunks)) < {2 * limit}:
            chunks.append(b"x" * (8 << 20))  # touched, so really allocated
        print("allocated twice the limit")
    """, uid, limits=Limits(memory_bytes=limit))
    assert "allocated" not in result.stdout
    assert result.returncode == 128 + signal.SIGKILL or "MemoryError" in result.stderr
    parent = memory_cgroup_parent()  # and the cgroup made for it is gone
    assert not parent or not os.path.exists(f"{parent}/{sandbox.CGROUP_PREFIX}{uid}")
    assert len(b"y" * limit) == limit  # the host still allocates


@needs_namespaces
def test_without_a_memory_cgroup_does_rlimit_as_stop_a_memory_hog(uid):
    limit = 200 * MiB
    command = wrap([PY, "-c", f"b'x' * {2 * limit}"], uid=uid, limits=Limits(memory_bytes=limit))
    at = next(i for i, arg in enumerate(command) if arg.startswith("{"))
    command[at] = json.dumps({**json.loads(command[at]), "cgroup": False})
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "MemoryError" in result.stderr


@needs_namespaces
def test_is_cpu_spin_killed_by_the_cpu_limit(uid):
    result = sandboxed("while True: pass", uid, limits=Limits(cpu_seconds=1))
    assert result.returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL)


@needs_namespaces
def test_is_the_wall_time_limit_enforced_inside(uid):
    result = sandboxed("import time; time.sleep(60)", uid, limits=Limits(wall_seconds=1))
    assert result.returncode == 128 + signal.SIGKILL
    assert "wall time limit of 1 s exceeded" in result.stderr


@needs_namespaces
def test_does_a_huge_file_write_stop_at_the_file_limit(uid):
    result = sandboxed("""
        import os
        try:
            with open("/tmp/huge", "wb") as f:
                f.write(bytes(8 << 20))
        except OSError as error:
            print(error.errno, os.path.getsize("/tmp/huge"))
    """, uid, limits=Limits(file_bytes=1 * MiB))
    assert result.stdout.split() == [str(errno.EFBIG), str(MiB)], result.stderr


@needs_namespaces
def test_is_there_only_loopback_and_does_distlab_run_on_it(uid):
    result = sandboxed("""
        import socket
        import torch, torch.distributed as dist
        from distlab import run
        print(socket.if_nameindex())
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=5)  # TEST-NET-1
        except OSError as error:
            print(error.errno)
        def total(rank, world_size):
            t = torch.tensor([rank + 1.0])
            dist.all_reduce(t)
            return t.item()
        print(run(total, world_size=2))
    """, uid, network=False, timeout=120)
    assert result.stdout.splitlines() == ["[(1, 'lo')]", str(errno.ENETUNREACH), "[3.0, 3.0]"], \
        result.stderr


def _notebook_client(spec_dir, cwd, cells, **options):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    return nb, nbclient.NotebookClient(nb, kernel_name=sandbox.KERNEL_NAME, timeout=60,
                                       resources={"metadata": {"path": str(cwd)}}, **options)


@needs_namespaces
def test_does_a_notebook_run_through_the_sandbox_kernelspec(uid, outside_tmp, tmp_path,
                                                           monkeypatch):
    os.chown(outside_tmp, uid, uid)
    kernelspec(tmp_path, uid=uid, writable=[str(outside_tmp)])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb, client = _notebook_client(tmp_path, outside_tmp, [
        "import os\nuid = os.getuid()",
        "print(uid, os.getcwd())\nopen('from-kernel.txt', 'w').write('hi')",
    ])
    client.execute()
    assert nb.cells[1].outputs[0]["text"] == f"{uid} {outside_tmp}\n"
    assert (outside_tmp / "from-kernel.txt").read_text() == "hi"


@needs_namespaces
def test_the_kernel_has_its_zygote_forked_and_loads_nothing_from_the_learners_folder(
        uid, outside_tmp, tmp_path, monkeypatch):
    """Is the ranks' zygote a fork of the kernel (distlab.kernel: no second torch import at
    the first launch), do a learner's distlab/ and numpy.py beside the notebook not stop the
    kernel from starting, is the folder on sys.path for the notebook, as in Lab, is the cyclic
    garbage collector on, and does an empty blank raise BlankNotFilled on the ranks, as in
    Lab (or before they start, where run sees the call)?"""
    (outside_tmp / "distlab").mkdir()
    (outside_tmp / "distlab" / "__init__.py").write_text("raise ImportError('the fake')\n")
    (outside_tmp / "mine.py").write_text("x = 7\n")
    kernelspec(tmp_path, uid=uid)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb, client = _notebook_client(tmp_path, outside_tmp, [
        "from distlab import launch\nprint(type(launch._pool.zygote).__name__)",
        "import os\nprint(launch.run(lambda rank, world_size: os.getppid(), world_size=2)"
        " == [launch._pool.zygote.pid] * 2)",
        "import mine\nprint(mine.x)",
        # the kernel loads with the cyclic collector off: it is on again in the kernel, and in
        # the ranks (their zygote was forked while it was off)
        "import gc\nprint(gc.isenabled(), launch.run("
        "lambda rank, world_size: __import__('gc').isenabled(), world_size=2))",
        # distlab, imported before the shell, still has its hooks in it: a blank statement
        # raises on the ranks (it does not pass silently, leaving them waiting on each other);
        # reached in a list, which run does not look into before it launches
        "def empty():\n    _____\n\ndef uses_one(rank, world_size, fns):\n"
        "    return fns[0]()\n\nlaunch.run(uses_one, [empty], world_size=2)",
        # reached through a call, it is refused before any rank starts, naming the function
        "def uses_it(rank, world_size):\n    return empty()\n\nlaunch.run(uses_it, world_size=2)",
    ], allow_errors=True)
    client.execute()
    texts = [next(out.get("text") or out["evalue"] for out in cell.outputs  # not the live line
                  if out.output_type in ("stream", "error")) for cell in nb.cells]
    assert texts[:4] == ["ForkedZygote\n", "True\n", "7\n", "True [True, True]\n"], texts
    assert texts[4].startswith("rank 0 raised BlankNotFilled"), texts[4]
    assert texts[5].startswith("empty still has 1 blank line(s) to fill"), texts[5]


@needs_namespaces
def test_a_kernel_without_network_is_reached_over_ipc_and_sees_no_host_port(uid, tmp_path,
                                                                          monkeypatch):
    """network=False: does CappedExecute reach the kernel over IPC sockets in a folder made
    for it, while the kernel cannot reach a port listening on the host's loopback, and is
    the folder gone afterwards?"""
    from autograder.preprocessors import CappedExecute

    kernelspec(tmp_path, uid=uid, network=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    with socket.socket() as host:
        host.bind(("127.0.0.1", 0))
        host.listen()
        port = host.getsockname()[1]
        probe = ("import socket\nprint(repr(([n for _, n in socket.if_nameindex()], "
                 f"socket.socket().connect_ex(('127.0.0.1', {port})))))")
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(probe)], metadata={
            "kernelspec": {"name": sandbox.KERNEL_NAME, "display_name": "sandboxed"}})
        executor = CappedExecute(timeout=60, kernel_name=sandbox.KERNEL_NAME, sandboxed=False,
                                 sockets=sandbox.sockets_folder(uid), sockets_uid=uid)
        executor.preprocess(nb, {"metadata": {"path": str(ROOT)}})
    interfaces, refused = eval(nb.cells[0].outputs[0]["text"])
    assert interfaces == ["lo"] and refused != 0
    assert not os.path.exists(sandbox.sockets_folder(uid))  # each kernel's removed after it


@needs_namespaces
def test_can_nbclient_interrupt_a_runaway_cell_in_the_sandbox(uid, tmp_path, monkeypatch):
    kernelspec(tmp_path, uid=uid)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb, client = _notebook_client(tmp_path, ROOT, ["while True: pass", "print('after')"],
                                  allow_errors=True, interrupt_on_timeout=True)
    client.timeout = 3
    client.execute()
    assert nb.cells[0].outputs[0]["ename"] == "KeyboardInterrupt"
    assert nb.cells[1].outputs[0]["text"] == "after\n"


def test_the_course_folder_shown_inside_is_the_repository_root():
    """Is the folder the sandbox shows read-only (where the runner and distlab live) the
    course's root, wherever the clone is (also under /tmp, which the sandbox replaces)?"""
    assert sandbox.REPO == str(ROOT)
