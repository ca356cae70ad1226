"""Run untrusted code (a learner's kernel, a submission) so that it can only hurt itself.

    if available():                                  # root, unshare, namespaces allowed
        cmd = wrap(["python", "-c", "print('hi')"], uid=uid_for(slot))  # a uid per parallel slot
        proc = subprocess.Popen(cmd); proc.wait(Limits().wall_seconds)   # timeout: proc.kill()

wrap() returns a command line: util-linux `unshare` makes new mount, PID, IPC and (unless
network=True) network namespaces and starts this very file (stage 2, as root) as PID 1 in them.
PID 1 puts a memory cgroup around the command, forks it and reaps. When the command exits or is
killed, PID 1 kills everything else in the namespace, removes the cgroup and exits with the
command's status (128+N after signal N, as a shell reports it). When unshare itself is killed,
--kill-child takes PID 1 with it and the kernel kills the whole namespace. Either way no orphan,
zombie or listening port outlives the sandbox. unshare ignores SIGTERM and SIGINT: stop a
sandbox with SIGKILL, or signal its process group (which reaches the command directly).

Before exec, the command's process gets a mount namespace of its own (PID 1 keeps a writable
/sys/fs/cgroup to clean up with): every mount read-only, a fresh size-limited tmpfs at /tmp and
/dev/shm, an empty tmpfs over each hidden folder, the `writable` folders bound read-write (the
uid still needs permission there: chown them to it); then resource limits, and last uid=gid=uid,
no supplementary groups, no_new_privs, HOME=/tmp and a minimal environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

KERNEL_NAME = "distlab-sandbox"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course
# Sandbox uids: in Debian's reserved 60000-64999 block, under systemd's DynamicUser range
# (61184-65519) and inside the 0-65535 that user-namespaced containers usually map. Graders
# that run on one machine at the same time (make test's lanes) each take their own range:
# a uid's process limit, memory cgroup and kernel sockets belong to one sandbox at a time.
LAST_UID = 61184  # the first uid of systemd's DynamicUser range: never a slot's
CGROUP_PREFIX = "distlab-sandbox-uid"  # + uid: reused after a killed sandbox left it behind
MEMORY_V1 = "/sys/fs/cgroup/memory"  # where cgroup v1 mounts the memory controller
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
CLONE_NEWNS, PR_SET_NO_NEW_PRIVS = 0x20000, 38
FAILED, CANNOT_EXEC, NOT_FOUND = 125, 126, 127  # stage-2 exit codes, as env(1) and docker use


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 600  # whole command: PID 1 kills the tree then (and the caller may)
    cpu_seconds: int = 600  # RLIMIT_CPU, per process: SIGXCPU, then SIGKILL a second later
    memory_bytes: int = 6 << 30  # memory cgroup of the whole tree; else RLIMIT_AS of twice that
    processes: int = 256  # RLIMIT_NPROC counts every process of the uid: one uid per sandbox
    file_bytes: int = 256 << 20  # RLIMIT_FSIZE: largest file a process may write
    tmp_bytes: int = 512 << 20  # size of each private tmpfs (/tmp, /dev/shm)


def uid_for(slot: int) -> int:
    """The uid of parallel grading slot `slot` (0, 1, ...): one uid per concurrent sandbox."""
    # imported here: stage 2 runs this file as `python -I -S` (the standard library only)
    from distlab.source import settings

    first = settings.sandbox_first_uid()
    if not 0 <= slot < LAST_UID - first:
        raise ValueError(f"no sandbox uid for slot {slot}: slots take uids from "
                         f"DISTLAB_SANDBOX_FIRST_UID={first} up, below {LAST_UID} (systemd's "
                         f"dynamic users); set DISTLAB_SANDBOX_FIRST_UID lower, e.g. 60100")
    return first + slot


@functools.cache
def why_unavailable() -> str:
    """Why sandboxes cannot run here ('' when they can): root, unshare, namespaces allowed."""
    if os.geteuid() != 0:
        return "the sandbox needs root (namespaces, mounts, setuid)"
    if shutil.which("unshare") is None:
        return "util-linux `unshare` is not installed"
    probe = subprocess.run(["unshare", "--mount", "--pid", "--ipc", "--net", "--fork",
                            "--kill-child", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"cannot make namespaces here (no CAP_SYS_ADMIN?): {probe.stderr.strip()}"
    return ""


def available() -> bool:
    return not why_unavailable()


def git_dir() -> Path:
    """The repository's git folder: ROOT/.git, or the one it names where it is a file (a git
    worktree: `gitdir: <main>/.git/worktrees/<name>`), then that one's shared folder (every
    object and ref is there)."""
    # imported here: stage 2 runs this file with the standard library only
    from distlab.source.paths import ROOT

    found = ROOT / ".git"
    if found.is_file():
        named = found.read_text().partition("gitdir:")[2].strip()
        found = (ROOT / named).resolve() if named else found
        common = found / "commondir"
        if common.is_file():
            found = (found / common.read_text().strip()).resolve()
    return found


def default_hidden() -> list[str]:
    """The answers and other students' work: solutions/, the grading folder (gradebook,
    submissions) and the repository's git folder (every solution ever committed is in it)."""
    from distlab.source.paths import GRADING, SOLUTIONS  # here: as in git_dir()

    return [str(SOLUTIONS), str(GRADING), str(git_dir())]


def default_env() -> dict:
    path = os.pathsep.join([sysconfig.get_path("scripts"), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


def _in_private(path: str) -> bool:
    """Is path under /tmp or /dev/shm, which the sandbox replaces by empty ones of its own?"""
    return any(path == top or path.startswith(top + "/") for top in ("/tmp", "/dev/shm"))


def _inside(path: str, folders: list[str]) -> bool:
    """Is path inside one of folders (not one of them)?"""
    return any(path.startswith(folder.rstrip("/") + "/") for folder in folders)


def _closed(path: str) -> bool:
    """Is there a folder above path that other users may not enter (mode without o+x)?"""
    return any(not os.stat(parent).st_mode & 0o001 for parent in Path(path).parents)


def wrap(argv: list[str], *, uid: int, limits: Limits = Limits(), network: bool = False,
         writable: list[str] = (), hidden: list[str] | None = None, env: dict | None = None,
         readable: list[str] = (), copy_in: list[str] = (), readable_cwd: bool = False
         ) -> list[str]:
    """The command line that runs argv sandboxed.

    writable: folders bound read-write. hidden: folders shown empty (default: default_hidden()).
    readable: folders shown read-only even where a hidden folder or a parent closed to the uid
    would keep them out of sight; the Python running this and the course repository (unless
    hidden itself) are added when they live in such a place (pyenv under root's 700 home, a
    .venv inside a hidden repository). A writable or readable folder
    inside a hidden one is all there is to see in it (say the one submission being graded).
    copy_in: files (say a kernel's connection file, in root's private runtime dir) copied into
    the sandbox's /tmp, readable by uid; an argv item equal to such a path becomes the copy's.
    readable_cwd: also show the working directory the command starts in, read-only (a kernel
    that nbgrader starts in the one submission it grades, inside the hidden grading folder).
    """
    if not isinstance(uid, int) or isinstance(uid, bool) or uid <= 0:
        raise ValueError(f"uid must be a positive int (never root), not {uid!r}")
    writable, readable = ([os.path.realpath(p) for p in paths] for paths in (writable, readable))
    if missing := [p for p in writable + readable if not os.path.isdir(p)]:
        raise ValueError(f"writable and readable folders must exist: {', '.join(missing)}")
    hidden = [os.path.realpath(p) for p in (default_hidden() if hidden is None else hidden)]
    # The course repository is needed unless it is hidden itself (the judge's runner shows only
    # parts of it); the Python running this also where it lives inside a hidden folder.
    needed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, REPO)} - set(hidden)
    readable += sorted(p for p in needed if (_closed(p) or _in_private(p) or _inside(p, hidden))
                       and p not in readable)
    if files := [p for p in hidden if os.path.exists(p) and not os.path.isdir(p)]:
        raise ValueError(f"hidden must be folders (hide the folder around a file): {files}")
    config = {"uid": uid, "limits": asdict(limits), "network": network, "writable": writable,
              "readable": readable, "hidden": hidden, "readable_cwd": readable_cwd,
              "env": default_env() if env is None else dict(env)}
    spaces = ["--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
    return [shutil.which("unshare") or "unshare", *spaces, *([] if network else ["--net"]),
            sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(config),
            *copy_in, "--", *argv]


def sockets_folder(uid: int) -> str:
    """Where the sandboxed kernels of `uid` keep their ZMQ sockets (see kernelspec): short,
    because a Unix socket's path may not exceed 107 bytes."""
    return f"/tmp/distlab-sockets-{uid}"


def kernelspec(dir, *, uid: int, limits: Limits = Limits(), writable: list[str] = (),
               hidden: list[str] | None = None, env: dict | None = None,
               readable: list[str] = (), network: bool = True) -> Path:
    """Write dir/kernels/distlab-sandbox/kernel.json, a distlab.kernel inside wrap(); put dir on
    JUPYTER_PATH to use it. The kernel's cwd (nbclient: the notebook's folder) is shown
    read-only, even inside a hidden folder, so it can grade one submission of the hidden
    grading folder without seeing the others.

    network=True: the kernel shares the host's network and talks ZMQ over 127.0.0.1 to its
    client outside. network=False: it has a network of its own (loopback only: its ranks and
    stores cannot meet any other sandbox's), and its client must connect over IPC sockets in
    sockets_folder(uid), which is made here (root's, 755) and shown writable inside: the client
    makes each kernel a fresh folder of the uid's there (CappedExecute.sockets does).
    """
    # ipykernel quits when its parent is not JPY_PARENT_PID, and prints a Ctrl-C banner to
    # stderr when that is unset; its parent inside is PID 1 of the namespace, so say 1.
    env = {**(default_env() if env is None else env), "JPY_PARENT_PID": "1"}
    if not network:
        os.makedirs(sockets_folder(uid), mode=0o755, exist_ok=True)
        writable = [*writable, sockets_folder(uid)]
    from distlab import kernel  # here, not above: stage 2 imports the standard library only

    argv = wrap(kernel.COMMAND, uid=uid, limits=limits, network=network, writable=writable,
                hidden=hidden, env=env, readable=readable, copy_in=["{connection_file}"],
                readable_cwd=True)
    folder = Path(dir) / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": argv, "display_name": "Python 3 (sandboxed)", "language": "python",
            "interrupt_mode": "signal", "metadata": {"debugger": False}}
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return folder


# ---- stage 2: runs as root, PID 1 of the new namespaces; standard library only ----

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source, target, fstype=None, flags=0, data=None) -> None:
    def c(s):
        return None if s is None else os.fsencode(s)
    _check(_libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)),
           f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _cgroup_path(uid: int) -> str | None:
    """Where the memory cgroup of a sandbox of `uid` started from here goes (cgroup v1)."""
    with open("/proc/self/cgroup") as f:
        paths = [ln.rstrip("\n").split(":", 2)[2] for ln in f if "memory" in ln.split(":")[1]]
    if not paths or not os.path.isdir(MEMORY_V1):
        return None
    return f"{MEMORY_V1}{paths[0].rstrip('/')}/{CGROUP_PREFIX}{uid}"


def remove_leftovers(uids) -> None:
    """Remove the empty memory cgroups that killed sandboxes of these uids left (PID 1 had no
    time to), and their kernels' socket folders: call it when none of them runs any more, say
    at the end of a grading run."""
    for uid in uids:
        shutil.rmtree(sockets_folder(uid), ignore_errors=True)
        group = _cgroup_path(uid)
        if group and os.path.isdir(group):
            with contextlib.suppress(OSError):  # busy: a sandbox still runs there
                os.rmdir(group)


def _memory_cgroup(uid: int, limit: int) -> str | None:
    """A v1 memory cgroup under our own, limited to `limit`; None where we cannot make one
    (cgroup v2 allows no child next to our processes; then RLIMIT_AS stands in)."""
    group = _cgroup_path(uid)
    if group is None:
        return None
    try:
        if os.path.isdir(group):
            os.rmdir(group)  # left by a sandbox that was killed; busy if one runs: fall back
        os.mkdir(group)
    except OSError:
        return None
    try:
        _write(f"{group}/memory.limit_in_bytes", str(limit))
        if os.path.exists(f"{group}/memory.memsw.limit_in_bytes"):
            _write(f"{group}/memory.memsw.limit_in_bytes", str(limit))  # no swapping around it
        # Step in, so the command is born inside; PID 1 steps out once it has forked.
        _write(f"{group}/cgroup.procs", str(os.getpid()))
        return group
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(group)
        return None


def _loopback_up() -> None:
    """`ip link set lo up`, in four lines: gloo binds 127.0.0.1 in an otherwise empty netns."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16s24x", b"lo")))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP


def _make_readonly() -> None:
    """Remount every mount read-only, keeping its nosuid/nodev/noexec/atime flags (statvfs
    reports them with the bits mount(2) takes)."""
    keep = (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME
            | os.ST_RELATIME)
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), ln.split()[4]) for ln in f]
    for point in points:
        try:
            flags = os.statvfs(point).f_flag & keep
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as exc:
            # EINVAL: not a mount point from here: covered by a later mount (the host's /proc
            # submounts under our fresh /proc), so out of reach anyway.
            if exc.errno != errno.EINVAL:
                raise


def _enter(config: dict, copy_in: list[str], argv: list[str], rlimit_as: bool) -> list[str]:
    """Set up the command's process (still root); return argv with copies' paths in it."""
    uid, limits, cwd = config["uid"], config["limits"], os.getcwd()
    _check(_libc.unshare(CLONE_NEWNS), "unshare")  # our own copy: PID 1 keeps a writable one
    if not config["network"]:
        _loopback_up()
    # Opened before any mount: a hidden folder may soon cover them (bound via /proc/self/fd).
    shown = {path: (os.open(path, os.O_PATH), MS_RDONLY) for path in config["readable"]}
    # A working directory that is itself hidden stays hidden (a kernel started in the course
    # repository under kernel_view sees an empty folder): showing it would bind the folder
    # over its own cover, and what it holds is what the cover is for.
    if config.get("readable_cwd") and cwd not in shown and cwd not in config["hidden"]:
        shown[cwd] = (os.open(cwd, os.O_PATH), MS_RDONLY)
    shown.update({path: (os.open(path, os.O_PATH), 0) for path in config["writable"]})
    copies = {}
    for path in copy_in:
        with open(path, "rb") as f:
            copies[path] = f.read()
    covers = [path for path in config["hidden"] if os.path.isdir(path)]  # before /tmp is new
    _make_readonly()
    for place in ("/tmp", "/dev/shm"):
        size = limits["tmp_bytes"]
        _mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    # Outer paths first: a repository shown from under /tmp, then solutions/ hidden inside it,
    # then the one submission shown inside the hidden grading folder.
    steps = sorted([(path, None) for path in covers] + list(shown.items()),
                   key=lambda step: len(Path(step[0]).parts))
    for path, how in steps:
        if how is None:
            os.makedirs(path, exist_ok=True)
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=755")
            continue
        fd, readonly = how
        for parent in reversed(Path(path).parents):  # from / down
            if os.path.isdir(parent) and not os.stat(parent).st_mode & 0o001:
                # A parent the uid may not enter (root's 700 home holding pyenv's Python):
                # show an empty one it may cross (711) instead, with just this path inside.
                _mount("tmpfs", parent, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "size=64k,mode=711")
                covers.append(parent)
        os.makedirs(path, exist_ok=True)  # under /tmp or a cover the mount point is new
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        # The bind copied the read-only flag; make it what was asked for.
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | readonly)
        os.close(fd)
    for path in covers:  # read-only now that the mount points inside them exist
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path, data in copies.items():
        copy = os.path.join("/tmp", os.path.basename(path))
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, data)
        os.fchown(fd, uid, uid)
        os.close(fd)
        argv = [copy if arg == path else arg for arg in argv]
    try:  # again by name: the old cwd may be under a mount we just made (host /tmp, hidden)
        os.chdir(cwd)
    except OSError:
        raise OSError(f"working directory {cwd} is not visible inside (under /tmp or a hidden "
                      "folder?); pass it in writable") from None
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
    for which, value in ((resource.RLIMIT_NPROC, limits["processes"]),
                         (resource.RLIMIT_FSIZE, limits["file_bytes"]),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))
    if rlimit_as:  # address space is not memory: torch maps far more than it touches
        resource.setrlimit(resource.RLIMIT_AS, (2 * limits["memory_bytes"],) * 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # an fd from the caller would get around mounts
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # last: every step above needed root
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; the command must not
        signal.signal(sig, signal.SIG_DFL)
    return argv


def _kill_all(*_) -> None:
    try:
        os.kill(-1, signal.SIGKILL)  # from PID 1: every other process of the namespace
    except ProcessLookupError:
        pass


def _init(config: dict, copy_in: list[str], argv: list[str]) -> int:
    """PID 1: cgroup, fork the command, reap everything, clean up; the command's status."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # for PID 1 of a namespace: ignored
    limits = config["limits"]
    group = None  # config["cgroup"] = False forces the RLIMIT_AS fallback (the tests use it)
    if config.get("cgroup", True):
        group = _memory_cgroup(config["uid"], limits["memory_bytes"])
    command = os.fork()
    if command == 0:
        try:
            argv = _enter(config, copy_in, argv, rlimit_as=group is None)
        except BaseException as exc:
            print(f"sandbox: {exc}", file=sys.stderr, flush=True)
            os._exit(FAILED)
        try:
            os.execvpe(argv[0], argv, {**config["env"], "HOME": "/tmp", "MPLCONFIGDIR": "/tmp"})
        except OSError as exc:
            print(f"sandbox: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
            os._exit(NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_EXEC)
    if group:  # back to our parent's cgroup, so that this one can be removed at the end
        _write(f"{os.path.dirname(group)}/cgroup.procs", str(os.getpid()))

    def timeout(*_):
        print(f"sandbox: wall time limit of {limits['wall_seconds']:g} s exceeded",
              file=sys.stderr, flush=True)
        _kill_all()

    signal.signal(signal.SIGALRM, timeout)
    if 0 < limits["wall_seconds"] < 1e9:  # math.inf: no limit (the timer would overflow)
        signal.setitimer(signal.ITIMER_REAL, limits["wall_seconds"])
    status = 0
    while True:  # every orphan of the namespace is ours to reap
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == command:
            status = os.waitstatus_to_exitcode(wait_status)
            signal.setitimer(signal.ITIMER_REAL, 0)
            _kill_all()  # the command is done, and so is everything it started
    if group:  # empty now; should it still be busy, the next sandbox of this uid replaces it
        with contextlib.suppress(OSError):
            os.rmdir(group)
    return 128 - status if status < 0 else status


if __name__ == "__main__":  # stage 2: sandbox.py CONFIG [FILE ...] -- COMMAND ...
    split = sys.argv.index("--")
    sys.exit(_init(json.loads(sys.argv[1]), sys.argv[2:split], sys.argv[split + 1:]))
