"""What the kernel knows and the learner cannot see: a line above a cell's output.

- A cell that defines a function fails to run (a syntax error, say): the kernel keeps the
  function from before, so a check using it tests code the editor no longer shows. The check
  then starts with "⚠ ring_allreduce: its cell did not run (SyntaxError: ...), so this uses the
  ring_allreduce defined before. Fix that cell and run it again."
- An exercise's code is changed outside its blanks: grading only reads the blanks. The
  exercise cell and every cell that uses the function say which line, before hand-in. The
  comparison is distlab.source.changes'; the released code to compare with comes from the
  course's judge (distlab/judges.py: the grading side registers it, as it reads the solved
  source); without one, nothing is said.

Installed by `import distlab` in a notebook kernel (IPython's pre_run_cell / post_run_cell
events); a notice never stops a cell, and a hook that fails says nothing.
"""

from __future__ import annotations

import ast

from distlab.judges import find_judge
from distlab.source.changes import changed_outside_blanks
from distlab.source.definitions import defined_names, functions

_stale: dict[str, str] = {}  # function -> why the kernel's definition is an old one
_changed: dict[str, str] = {}  # exercise -> the line changed outside its blanks
_before: dict[str, int] = {}  # id() of what the running cell defines, before it ran


def _used(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _released_line_changed(name: str, source: str) -> str | None:
    judge = find_judge()  # the grading side knows the released code; without it, say nothing
    if judge is None:
        return None
    where = changed_outside_blanks(name, source, judge.released_template(name))
    if where is None:
        return None
    line, code = where
    return (f"line {line} of {name} was changed outside the blanks ({code}): that change earns "
            "nothing, grading uses the released code there. Change only the `_____` parts.")


def pre_run_cell(shell, info) -> None:
    source = info.raw_cell or ""
    defined = defined_names(source)
    _before.clear()
    _before.update({name: id(shell.user_ns.get(name)) for name in defined})
    for name in sorted(_used(source) - set(defined)):
        for notes in (_stale, _changed):
            if name in notes:
                print(f"⚠ {notes[name]}")


def post_run_cell(shell, result) -> None:
    source = result.info.raw_cell or ""
    error = result.error_before_exec or result.error_in_exec
    for name, before in _before.items():
        redefined = id(shell.user_ns.get(name)) != before
        if redefined:
            _stale.pop(name, None)
        elif error is not None and name in shell.user_ns:
            why = (f"SyntaxError on line {error.lineno}: {error.msg}"
                   if isinstance(error, SyntaxError)
                   else f"{type(error).__name__}: {error}".splitlines()[0])
            _stale[name] = (f"{name}: its cell did not run ({why}), so this uses the {name} "
                            f"defined before. Fix that cell and run it again.")
    if error is None:
        for name, code in functions(source).items():
            note = _released_line_changed(name, code)
            if note is None:
                _changed.pop(name, None)
            else:
                _changed[name] = note
                print(f"⚠ {note}")
    _before.clear()


def install(shell) -> None:
    """Register the notices once per kernel."""
    if getattr(shell, "_distlab_notices", False):
        return
    shell._distlab_notices = True

    def safely(hook):
        def run(arg):
            try:
                hook(shell, arg)
            except Exception:  # noqa: BLE001 - a notice must never break the learner's cell
                pass
        return run

    shell.events.register("pre_run_cell", safely(pre_run_cell))
    shell.events.register("post_run_cell", safely(post_run_cell))
