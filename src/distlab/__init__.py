"""distlab: the helpers the course notebooks import (launcher, plots, cost models)."""

from distlab.blanks import _____, BlankNotFilled, require_filled

__all__ = ["_____", "BlankNotFilled", "require_filled"]
