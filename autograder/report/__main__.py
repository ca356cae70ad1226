"""python -m autograder.report: see autograder/report/__init__.py."""

import sys

from autograder.report.cli import main

sys.exit(main())
