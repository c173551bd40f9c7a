"""The default schedule's decisions, named in one place: a question `choose(name, candidates, default)`
answers (a backend's preferences, the AutoScheduler's point).

A decision is a `Decision`: its task (None for a workload's decision) and its kind, read as
`name.task` and `name.kind`.  It is also the string `<task>.<kind>` (`C.k_block`), or its kind alone
(`dispatch`), that the AutoScheduler's space, its logs and `space=` patterns use; a name read back
from those becomes a Decision again through `Decision.parse`, here only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class Decision(str):
    """A decision's name, typed: `task` and `kind`, and equal to (and stored as) its string."""

    task: str | None
    kind: str

    def __new__(cls, task: str | None, kind: str) -> Decision:
        self = super().__new__(cls, kind if task is None else f"{task}.{kind}")
        self.task, self.kind = task, kind
        return self

    def __getnewargs__(self) -> tuple[str | None, str]:  # pickled and copied as (task, kind)
        return self.task, self.kind

    @classmethod
    def parse(cls, name: str) -> Decision:
        """The decision a stored name stands for (a log's knob, a `space=` key)."""
        if isinstance(name, Decision):
            return name
        task, dot, kind = name.partition(".")
        return cls(task, kind) if dot else cls(None, name)


Choose = Callable[[Decision, Sequence[Any], Any], Any]


def decision(task: str | None, kind: str) -> Decision:
    """Task `task`'s decision of kind `kind` (a workload's when task is None)."""
    return Decision(task, kind)
