"""From the notebook to a cluster: a learner's real-rank exercises as torchrun scripts.

    python -m distlab.export 01_collectives.ipynb [ring_allreduce_p2p ...] -o torchrun/
    torchrun --standalone --nproc-per-node 4 torchrun/01_collectives.py

One script per notebook (`<notebook>.py` in the output folder) holds, read from the notebook
as grading and the drills read it (distlab.source):

- the learner's own exercises (every exportable one, or those named) and the course's given
  code they use (the locked helpers and imports they name), nothing else of the notebook;
- each exercise's check, the notebook's visible check re-expressed per rank (one module per
  topic here, named as the topic's module of distlab: every module of this folder that
  defines EXERCISES is one, found by folder);
- the torchrun runtime (runtime.py, copied): the process group from torchrun's environment,
  NCCL on cuda:LOCAL_RANK when there is a GPU for the rank, gloo otherwise, `--backend` to
  force one, timings printed as algbw/busbw for the collectives and DDP.

An exercise with an unfilled blank is not exported: BlankNotFilled, with the notebook's message.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

from distlab.export import runtime
from distlab.export.reading import needed, read_notebook
from distlab.export.spec import Exportable


def _topics() -> tuple:
    """Every module of this folder that defines EXERCISES, by name: a new topic's export
    module is found here, with no list to keep by hand."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "EXERCISES"):
            found.append(module)
    return tuple(found)


TOPICS = _topics()
EXPORTABLE = {e.name: (topic, e) for topic in TOPICS for e in topic.EXERCISES}


class ExportError(ValueError):
    """A notebook or a function name the export cannot use; the message says what can be."""


def _without_docstring(module) -> str:
    """A module's code after its docstring (the script has a docstring of its own)."""
    source = inspect.getsource(module)
    tree = ast.parse(source)
    first = tree.body[1] if ast.get_docstring(tree) else tree.body[0]
    return "\n".join(source.split("\n")[first.lineno - 1:]).strip("\n")


def _top_level_names(code: str) -> set[str]:
    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def chosen_exercises(notebook_path: Path, names: list[str]) -> list[Exportable]:
    """The exercises to export: those named, else every exportable one the notebook defines."""
    defined = read_notebook(notebook_path).definitions
    here = [e for name, (_, e) in EXPORTABLE.items() if name in defined]
    if not here:
        raise ExportError(f"{notebook_path} defines none of the exercises that export to "
                          f"torchrun: {', '.join(EXPORTABLE)}")
    unknown = [name for name in names if name not in {e.name for e in here}]
    if unknown:
        raise ExportError(f"{', '.join(unknown)}: not an exercise of {notebook_path.name} that "
                          f"exports to torchrun; these are: {', '.join(e.name for e in here)}")
    return [e for e in here if not names or e.name in names]


def script_text(notebook_path: Path, exercises: list[Exportable]) -> str:
    """The script: the runtime, the learner's code, the checks, and its main."""
    notebook = read_notebook(notebook_path)
    imports, definitions = needed(notebook, [n for e in exercises for n in e.needs])
    checks = "\n\n\n".join(inspect.getsource(e.check).strip("\n") for e in exercises)
    runtime_code = _without_docstring(runtime)
    theirs = {d.name for d in definitions}
    clash = theirs & (_top_level_names(runtime_code) | _top_level_names(checks))
    if clash:
        raise ExportError(f"{', '.join(sorted(clash))}: your notebook defines a name the "
                          "exported script uses for its own; rename it in your notebook")
    table = "\n".join(
        f"    Exercise({e.name!r}, check_{e.name}, ({', '.join(e.needs)},)"
        f"{', joins_group_itself=True' if e.joins_group_itself else ''}),"
        for e in exercises)
    topics = sorted({EXPORTABLE[e.name][0].__name__.rsplit('.', 1)[-1] for e in exercises})
    script = f"{notebook_path.stem}.py"
    return "\n".join([
        "#!/usr/bin/env python",
        f'"""{", ".join(e.name for e in exercises)}: your code from {notebook_path.name}, '
        "on torchrun's ranks",
        "(written by `python -m distlab.export`; edit your notebook and export again).",
        "",
        f"    torchrun --standalone --nproc-per-node 4 {script}             # one machine",
        "    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\",
        f"        --rdzv-endpoint HOST:29400 --rdzv-id job1 {script}        # on each node",
        "",
        "Options: --backend nccl|gloo, --exercise NAME, --bytes N (the timings' size).",
        '"""',
        "# ---- the torchrun runtime (distlab/export/runtime.py) ----",
        runtime_code,
        "",
        f"# ---- your code, from {notebook_path.name}: your cells and the given code they use",
        *imports,
        "",
        *(f"\n{d.source}\n" for d in definitions),
        f"# ---- the checks (distlab/export/{', '.join(topics)}.py) ----",
        checks,
        "",
        "",
        "EXERCISES = [",
        table,
        "]",
        "",
        'if __name__ == "__main__":',
        "    torchrun_main(EXERCISES)",
        "",
    ])


def export(notebook_path: Path, names: list[str], out_dir: Path) -> Path:
    """Write `<out_dir>/<notebook>.py`; return its path."""
    notebook_path = Path(notebook_path)
    if not notebook_path.is_file():
        raise ExportError(f"{notebook_path}: no such notebook")
    text = script_text(notebook_path, chosen_exercises(notebook_path, names))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{notebook_path.stem}.py"
    path.write_text(text)
    return path
