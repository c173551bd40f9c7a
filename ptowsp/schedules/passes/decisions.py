"""The default schedule's decisions, named in one place: a question `choose(name, candidates, default)`
answers (a backend's preferences, the AutoScheduler's point).  A task's decision is named
`<task>.<kind>` (`C.k_block`), a workload's by its kind alone (`dispatch`); that string is what the
AutoScheduler's space, its logs and `space=` patterns use, so it is made and read here only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Choose = Callable[[str, Sequence[Any], Any], Any]


def decision(task: str, kind: str) -> str:
    """The name of task `task`'s decision of kind `kind`."""
    return f"{task}.{kind}"


def decision_parts(name: str) -> tuple[str | None, str]:
    """(the task, the kind) of a decision's name; the task is None for a workload's decision."""
    task, dot, kind = name.partition(".")
    return (task, kind) if dot else (None, name)
