"""A task's loop variables and reads as its kernel sees them: each original loop variable as an
expression of the final loops (after split and fuse), with the guards a non-dividing split needs, and
every read of a workload tensor as a load of its global buffer."""

from __future__ import annotations

from ptowsp.lower.ir import Buffer, var
from ptowsp.schedules import LoopNest
from ptowsp.schedules.loopnest import FuseRelation, SplitRelation
from ptowsp.te import Expr, Op, rewrite, rules, walk


def buffer_of(tensor) -> Buffer:
    """The global buffer a workload tensor is stored in."""
    return Buffer(tensor.name, tensor.shape, tensor.dtype)


def to_buffers(body: Expr) -> Expr:
    """Reads of workload tensors become reads of global buffers (in gather indices too; a tensor
    stored in another layout is read at its stored position once the kernel is made: layouts.py)."""
    return rewrite(body, _READS, fixpoint=False)


_READS = rules(lambda n: Expr(Op.LOAD, n.dtype, n.src, buffer_of(n.arg)), Op.LOAD)  # indices already read


def axis_values(nest: LoopNest) -> tuple[dict[str, Expr], list[Expr]]:
    """Each original (and intermediate) loop variable as an expression of the final loops.

    Also returns the guards `v < extent` that non-dividing splits need.
    """
    values = {lp.name: var(lp.name, lp.extent) for lp in nest.loops}
    guards: list[Expr] = []
    for rel in reversed(nest.relations):
        if isinstance(rel, SplitRelation):
            values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
            if rel.guarded:
                guards.append(values[rel.parent] < rel.parent_extent)
        else:
            assert isinstance(rel, FuseRelation)
            values[rel.outer] = values[rel.fused] // rel.inner_extent
            values[rel.inner] = values[rel.fused] % rel.inner_extent
    return values, guards


def guard_vars(guard: Expr) -> set[str]:
    """The loops a guard reads."""
    return {n.arg[0] for n in walk(guard) if n.op is Op.VAR}
