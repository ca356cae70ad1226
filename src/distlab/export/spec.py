"""What a topic module says about each exercise it exports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exportable:
    name: str  # the exercise: the learner's function or class
    check: object  # check(ranks, *needs): its source is copied into the script
    needs: tuple[str, ...]  # the learner's definitions the check calls, in its argument order
    joins_group_itself: bool = False  # the function calls dist.init_process_group itself
