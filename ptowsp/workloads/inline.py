"""Substituting one task's expression into another's: Halide's inline, used by compute_inline and fusion."""

from __future__ import annotations

from collections.abc import Collection

from ptowsp.te import Expr, Op, cast, rewrite, rules, substitute
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload


def inline_producers(body: Expr, wl: Workload, inlined: Collection[str]) -> Expr:
    """Replace reads of inlined tasks by their expressions at the read's indices.

    The indices are inlined first (a gather whose index task is inlined too),
    and each becomes an int64, the loop variable's dtype it replaces: a
    producer's `s == 0` read at `idx[j]` of an int32 tensor must still
    compare two operands of one dtype.  Reads at equal indices share one
    expansion (expressions are hash-consed), so a chain of stages that each
    read the last a few times stays as large as its distinct values.
    """
    if not inlined:
        return body
    values: dict[str, Expr] = {}  # producer -> its expression, its own reads inlined
    at_indices: dict[tuple, Expr] = {}  # (producer, indices) -> its expression there

    def expand(e: Expr) -> Expr:
        return rewrite(e, reads, fixpoint=False)

    def replace(e: Expr) -> Expr | None:  # its indices inlined already
        if e.arg.name not in inlined:
            return None
        producer = wl.task(e.arg.name)
        assert isinstance(producer, ComputeTask)
        indices = tuple(cast(i, "int64") for i in e.src)
        key = (producer.name, indices)
        if key not in at_indices:
            if producer.name not in values:
                values[producer.name] = expand(producer.value)
            at = dict(zip(producer.loop_names, indices, strict=True))
            at_indices[key] = substitute(values[producer.name], lambda n: at[n.arg[0]] if n.op is Op.VAR else None)
        return at_indices[key]

    reads = rules(replace, Op.LOAD)
    return expand(body)
