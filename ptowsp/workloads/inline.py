"""Substituting one task's expression into another's: Halide's inline, used by compute_inline and fusion."""

from __future__ import annotations

from collections.abc import Collection

from ptowsp.te import Expr, Op, substitute
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload


def inline_producers(body: Expr, wl: Workload, inlined: Collection[str]) -> Expr:
    """Replace reads of inlined tasks by their expressions at the read's indices."""
    if not inlined:
        return body

    def replace(e: Expr) -> Expr | None:
        if e.op is not Op.LOAD or e.arg.name not in inlined:
            return None
        producer = wl.task(e.arg.name)
        assert isinstance(producer, ComputeTask)
        at = {name: index for name, index in zip(producer.loop_names, e.src, strict=True)}
        inner = inline_producers(producer.value, wl, inlined)
        return substitute(inner, lambda n: at[n.arg[0]] if n.op is Op.VAR else None)

    return substitute(body, replace)
