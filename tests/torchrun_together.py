"""Run the exercises of several exported scripts in one torchrun job, so the tests pay for one
launch per world size rather than one per script (a launch costs seconds: torch imported by the
agent and by every rank):

    torchrun --standalone --nproc-per-node 2 torchrun_together.py a.py b.py -- --bytes 4096

Each script is imported as a module (its `if __name__ == "__main__"` does not run) and the
first one's runtime runs every script's EXERCISES, as each script's own main would."""

import importlib.util
import sys
from pathlib import Path

scripts, options = sys.argv[1:], []
if "--" in scripts:
    at = scripts.index("--")
    scripts, options = scripts[:at], scripts[at + 1:]
exercises, main = [], None
for script in map(Path, scripts):
    spec = importlib.util.spec_from_file_location(script.stem.replace("-", "_"), script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exercises += module.EXERCISES
    main = main or module.torchrun_main
main(exercises, options)
