"""`python .../distlab/kernel.py -f CONNECTION_FILE` (`COMMAND`): an ipykernel whose ranks'
zygote is forked before the kernel starts.

`distlab.launch` forks ranks from a zygote that has imported torch. Started by the first launch,
the zygote is a new Python that imports torch once more (2-2.5 s of CPU); forked here, before
ipykernel starts a thread and before any torch op, it costs a fork. The grading kernel starts
this way (autograder.judge.sandbox.kernelspec): every submission runs its notebook in a fresh
kernel, so each grading saves a torch import. The kernel is otherwise `python -m
ipykernel_launcher`; after `launch.shutdown()`, or if the zygote dies, launch starts a new one.
The learner's Lab keeps ipykernel's own kernel: the drills notebook imports no torch, and would
pay for one here.
"""

import sys
from pathlib import Path

COMMAND = [sys.executable, __file__, "-f", "{connection_file}"]  # a kernelspec's argv
# (the file, not `-m distlab.kernel`: -m would find a learner's distlab/ next to the notebook)

if __name__ == "__main__":
    # As ipykernel_launcher: nothing is imported from the notebook's folder (a learner's
    # torch.py) or from distlab/ while the kernel loads; IPython then puts the notebook's
    # folder on sys.path itself.
    if sys.path[0] in ("", str(Path(__file__).parent)) or Path(sys.path[0]) == Path.cwd():
        del sys.path[0]

    from distlab._gc import long_lived

    # what loads until the kernel starts (torch, IPython, distlab) lives as long as the kernel;
    # the zygote, forked meanwhile, turns the collector on again for the ranks
    with long_lived():
        import distlab
        from distlab import _worker, launch  # noqa: F401 - what the zygote runs, imported once

        launch.start_ranks_launcher()

        from ipykernel.kernelapp import IPKernelApp

        app = IPKernelApp.instance()
        app.initialize()
        # distlab was imported before the shell existed: its notebook hooks (an empty blank
        # raises BlankNotFilled, brief messages, notices) go in now, as `import distlab` in a
        # kernel does
        distlab._in_ipython()
    app.start()
