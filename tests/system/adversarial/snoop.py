"""Submissions that look for the grading side from the grading kernel and print what they find
into their own feedback: the hidden tests (autograder/exercises/), the references
(autograder/reference.py), the shortcut suites' honest answers (tests/shortcuts/) and the solved
sources. The kernel sees none of them (autograder.judge.kernel_view), so each finds nothing,
says so, and scores 0 like any untouched notebook.

Each snoop prints one last line, `snoop <how>: ... found 0`, so a test can tell that it ran
and found nothing; anything found is printed whole, where the feedback checks see it.
"""

from __future__ import annotations

from adversarial import ALL, RELEASED, kind
from adversarial.cells import add_after

HIDDEN = ("autograder/exercises/*.py", "autograder/reference.py", "tests/shortcuts/*.py",
          "solutions/*/*.py")

# the walk both path snoops do: up from each start, each hidden pattern in each folder
WALK = f"""
import pathlib
def walk(starts):
    looked, found = set(), []
    for start in map(pathlib.Path, starts):
        for folder in [start, *start.parents]:
            if folder in looked:
                continue
            looked.add(folder)
            for pattern in {HIDDEN!r}:
                try:
                    paths = sorted(folder.glob(pattern))
                except OSError:
                    continue
                for path in paths:
                    try:
                        text = path.read_text()
                    except OSError:
                        continue
                    found.append(path)
                    print(f"FOUND {{path}}\\n{{text}}")
    return looked, found
"""

BY_PATH = WALK + """
import os, sys
looked, found = walk([os.getcwd(), *filter(None, sys.path)])
print(f"snoop by path: looked in {len(looked)} folders, found {len(found)}")
"""

# `autograder` by name, and the modules a hidden test and the references live in
MODULES = ("autograder", "autograder.grade_cell", "autograder.reference",
           "autograder.exercises", "autograder.exercises.collectives")
IMPORT = f"""
import importlib, inspect
imported = []
for name in {MODULES!r}:
    try:
        module = importlib.import_module(name)
    except Exception as err:
        print(f"import {{name}}: {{type(err).__name__}}")
        continue
    imported.append(name)
    try:
        print(f"IMPORTED {{name}}\\n{{inspect.getsource(module)}}")
    except Exception:
        print(f"IMPORTED {{name}} from {{getattr(module, '__path__', '?')}}")
"""

BY_IMPORT = IMPORT + f"""
print(f"snoop by import: tried {{len({MODULES!r})}} modules, found {{len(imported)}}")
"""

# where the course must be, from distlab's own file: onto sys.path, and in a .pth of its own
# (site.addsitedir runs it), then both walks again, through PID 1's view of the machine too
BY_SYS_PATH = WALK + """
import importlib, os, site, sys, tempfile
import distlab
course = pathlib.Path(distlab.__file__).resolve().parents[2]
sys.path[:0] = [str(course), str(course / "src")]
pth = tempfile.mkdtemp()
with open(os.path.join(pth, "course.pth"), "w") as f:
    f.write(f"{course}\\nimport sys; sys.path.insert(0, {str(course)!r})\\n")
site.addsitedir(pth)
importlib.invalidate_caches()
for name in [m for m in list(sys.modules) if m == "autograder" or m.startswith("autograder.")]:
    del sys.modules[name]
""" + IMPORT + """
looked, found = walk([course, f"/proc/1/root{course}", "/proc/1/cwd", *sys.path])
print(f"snoop by sys.path and .pth: {len(imported)} imported, looked in {len(looked)} "
      f"folders, found {len(found)}")
"""

SNOOPS = {"snoop_by_path": BY_PATH, "snoop_by_import": BY_IMPORT,
          "snoop_by_sys_path": BY_SYS_PATH}


@kind(base=RELEASED, zero=ALL)
def snoop_by_path(nb):
    """Walks up from its working directory and from every sys.path entry, globbing for the
    hidden tests, the references, the shortcut suites and the solved sources, and prints each
    file it can read. The grading kernel sees only distlab, the .venv and this submission:
    it finds nothing, and scores 0."""
    return add_after(nb, "locked_00", BY_PATH)


@kind(base=RELEASED, zero=ALL)
def snoop_by_import(nb):
    """Imports `autograder` and the hidden tests' module autograder.exercises.collectives and
    prints their source. The grading side is not importable in the kernel: nothing, 0."""
    return add_after(nb, "locked_00", BY_IMPORT)


@kind(base=RELEASED, zero=ALL)
def snoop_by_sys_path(nb):
    """Puts the course's folder (two above distlab's) on sys.path and in a .pth of its own,
    then imports and walks again, also through /proc/1/root. The folder is empty inside the
    sandbox and PID 1 is root's: nothing, 0."""
    return add_after(nb, "locked_00", BY_SYS_PATH)
