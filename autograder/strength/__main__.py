import sys

from autograder.strength.cli import main

sys.exit(main())
