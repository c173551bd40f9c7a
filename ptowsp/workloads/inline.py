"""Substituting one task's expression into another's: Halide's inline, used by compute_inline and fusion."""

from __future__ import annotations

from collections.abc import Collection

from ptowsp.te import Expr, Op, cast, substitute
from ptowsp.te.share import Sharing
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload


def inline_producers(body: Expr, wl: Workload, inlined: Collection[str]) -> Expr:
    """Replace reads of inlined tasks by their expressions at the read's indices.

    The indices are inlined first (a gather whose index task is inlined too),
    and each becomes an int64, the loop variable's dtype it replaces: a
    producer's `s == 0` read at `idx[j]` of an int32 tensor must still
    compare two operands of one dtype.  Reads at equal indices share one
    expansion (te/share.py), so a chain of stages that each read the last a
    few times stays as large as its distinct values.
    """
    if not inlined:
        return body
    sharing = Sharing()
    values: dict[str, Expr] = {}  # producer -> its expression, its own reads inlined
    at_indices: dict[tuple, Expr] = {}  # (producer, ids of shared indices) -> its expression there

    def expand(e: Expr) -> Expr:
        return substitute(e, replace)

    def replace(e: Expr) -> Expr | None:
        if e.op is not Op.LOAD or e.arg.name not in inlined:
            return None
        producer = wl.task(e.arg.name)
        assert isinstance(producer, ComputeTask)
        indices = tuple(sharing(cast(expand(i), "int64")) for i in e.src)
        key = (producer.name, tuple(map(id, indices)))
        if key not in at_indices:
            if producer.name not in values:
                values[producer.name] = sharing(expand(producer.value))
            at = dict(zip(producer.loop_names, indices, strict=True))
            at_indices[key] = sharing(substitute(values[producer.name],
                                                 lambda n: at[n.arg[0]] if n.op is Op.VAR else None))
        return at_indices[key]

    return expand(body)
