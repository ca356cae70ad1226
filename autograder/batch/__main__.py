"""`python -m autograder.batch`: what `make grade` runs (see autograder/batch/cli.py)."""

import sys

from autograder.batch.cli import main

sys.exit(main())
