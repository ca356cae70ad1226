"""The untrusted half of grading: `python -m autograder.judge.runner`, started by the judge inside
the sandbox. It defines the learner's notebook code, then answers the judge's requests (call
the function on these inputs; run it on N ranks through this harness) with plain values.

Start-up is paid once per submission: this process imports torch and starts the ranks'
launcher (and, at the first load, the modules the code imports from the course, torch and
numpy), and never runs learner code itself. Each `load` forks a fresh child that defines the
code and answers until `end`, so no graded function (or wrong-blank candidate) can reach the
state another one left behind; the child's calls on ranks use fresh ranks of the warm launcher.

It decides nothing: the judge compares what comes back with its own oracle, in its own
process. Whatever the learner's code does here (patch numpy, print "passed", exit) can only
change the values it sends back, so it can only cost the learner points.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import linecache
import os
import sys
import warnings

from autograder.judge import shipping, wire
from distlab._gc import long_lived
from distlab.source.definitions import definitions

PR_SET_DUMPABLE = 4  # <linux/prctl.h>
# What a runner may import before it forks, when the cells import it: public modules of these
# installed packages. Nothing else a learner names (and nothing of the grading side: its
# sandbox shows none of it but the judge, so a graded cell's `from autograder.grade_cell import
# grade` fails there, as a kernel's failing cell does, and defines nothing).
PRELOAD_PACKAGES = ("distlab", "torch", "numpy")


def define(cells: list[str]) -> dict:
    """Run the definitions of every cell, in order, in one fresh namespace (like a kernel)."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for index, code in enumerate(cells):
        tree = definitions(code)
        if tree is None:
            continue
        filename = f"<cell {index}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            exec(compile(tree, filename, "exec"), namespace)
        except Exception:  # noqa: BLE001 - as in a kernel, a failing cell defines less
            continue
    return namespace


def preloadable(cells: list[str]) -> list[str]:
    """The modules of PRELOAD_PACKAGES that the cells import, in order
    (a private or `__main__` module never: importing those may run something)."""
    names = []
    for code in cells:
        tree = definitions(code)
        for node in tree.body if tree else []:
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
    parts = {name: name.split(".") for name in dict.fromkeys(names)}
    return [name for name, part in parts.items()
            if part[0] in PRELOAD_PACKAGES and not any(p.startswith("_") for p in part)]


def preload(cells: list[str]) -> None:
    """Import here, once, what the cells import from the course, torch and numpy, so that each
    forked child finds it loaded: matplotlib (under distlab.collectives) or sympy (under
    torch.distributed.pipelining) cost a child 0.3-1 s otherwise. A module that fails to
    import is left to the child, which fails as a kernel would."""
    with long_lived():
        for name in preloadable(cells):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S112 - the child imports it again and fails there
                continue


def answer(request: dict, state: dict):
    op = request["op"]
    if op == "load":
        state["ns"] = define(request["cells"])
        if request.get("candidate"):
            exec(compile(request["candidate"], "<candidate>", "exec"), state["ns"])
        return None
    namespace = state["ns"]
    name = request["function"]
    if name not in namespace:
        raise NameError(f"name {name!r} is not defined")
    # trusted stand-ins for some globals (a correct helper), shipped with this request only
    saved = {key: namespace.get(key) for key in request.get("patch", {})}
    namespace.update({key: shipping.unpack(text) for key, text in request.get("patch", {}).items()})
    try:
        fn = namespace[name]
        if op == "call":
            return fn(*wire.decode(request["args"]), **wire.decode(request["kwargs"]))
        if op == "ranks":
            import distlab

            harness = shipping.unpack(request["harness"])
            return distlab.run(harness, fn, *wire.decode(request["args"]), **request["options"])
        raise ValueError(f"unknown request {op!r}")
    finally:
        namespace.update(saved)


def serve(request: dict, channel, stdin) -> None:
    """In a forked child: define the code of `request` (a load), then answer until `end`."""
    state: dict = {}
    while request.get("op") != "end":
        try:
            reply = {"ok": wire.encode(answer(request, state))}
        except BaseException as err:  # noqa: BLE001 - every failure goes back as a value
            reply = {"error": type(err).__name__, "message": str(err)[:4000],
                     "builtin": isinstance(getattr(builtins, type(err).__name__, None), type)}
        try:
            data = wire.dumps(reply)
        except (TypeError, ValueError) as err:
            data = wire.dumps({"error": "TypeError", "message": str(err), "builtin": True})
        channel.write(data)
        line = stdin.readline()
        if not line:
            return
        request = wire.loads(line)


def warm_up() -> None:
    """What every child needs, loaded once: torch, numpy, distlab and the ranks' launcher.
    Not dumpable: processes of the same uid (the children) cannot ptrace or read this one."""
    import ctypes

    with long_lived():
        import numpy  # noqa: F401
        import torch  # noqa: F401

        from distlab import launch

    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0)
    launch.start_ranks_launcher()


def main() -> None:
    # The protocol gets its own copy of stdout; everything the learner prints goes nowhere.
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as we do
    warnings.simplefilter("ignore")
    warm_up()
    stdin = sys.stdin.buffer  # the judge sends a request only after its reply: no read-ahead
    preloaded = None  # the cells preload() last read: every load of a submission sends the same
    while line := stdin.readline():
        request = wire.loads(line)
        if request.get("op") == "ready":  # started: torch and the launcher are loaded
            channel.write(wire.dumps({"ok": None}))
            continue
        if request.get("op") != "load":
            channel.write(wire.dumps({"error": "RuntimeError", "builtin": True,
                                      "message": "nothing is loaded"}))
            continue
        if request["cells"] != preloaded:
            preload(request["cells"])
            preloaded = request["cells"]
        child = os.fork()
        if child == 0:
            try:
                serve(request, channel, stdin)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        channel.write(wire.dumps({"ended": True}))  # the child ended: ready for the next load


if __name__ == "__main__":
    main()
