"""Infer a compute task's category from its expression.

- no reduction: INJECTIVE;
- one sum over a product of tensor-reading factors with outer-product
  structure, that is, one factor lacks an output loop variable that another
  factor uses, so its elements are reused across outputs (matmul, batched
  matmul, conv, matrix-vector): COMPLEX_OUT_FUSABLE, whatever injective
  epilogue surrounds the sum;
- any other reduction (row sums, maxima, sums of squares): REDUCTION.
"""

from __future__ import annotations

from ptowsp.te import Expr, Op, loop_vars, walk
from ptowsp.workloads.task import Category


def _factors(e: Expr) -> list[Expr]:
    while e.op is Op.CAST:
        e = e.src[0]
    if e.op is Op.MUL:
        return _factors(e.src[0]) + _factors(e.src[1])
    return [e]


def infer_category(body: Expr, loop_names: tuple[str, ...]) -> Category:
    reductions = [n for n in walk(body) if n.op is Op.REDUCE]
    if not reductions:
        return Category.INJECTIVE
    if len(reductions) == 1 and reductions[0].arg == "sum":
        readers = [f for f in _factors(reductions[0].src[0]) if any(n.op is Op.LOAD for n in walk(f))]
        uses = [set(loop_vars(f)) & set(loop_names) for f in readers]
        if any(b - a for a in uses for b in uses):
            return Category.COMPLEX_OUT_FUSABLE
    return Category.REDUCTION
