"""distlab: the helpers the course notebooks import (launcher, plots, cost models)."""

from distlab.blanks import BlankNotFilled, _____, require_filled
from distlab.launch import DeadlockError, RankError, device, run, shutdown

__all__ = ["_____", "BlankNotFilled", "require_filled",
           "run", "RankError", "DeadlockError", "shutdown", "device"]
