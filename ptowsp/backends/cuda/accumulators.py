"""Warp-call accumulators kept in registers across the loop around the call (TVM's `wmma.accumulator`).

A `gemm_f16` call reads its C window into registers, runs its k loop and
writes C back.  Under k blocks staged in shared memory the call sits in the
k-block loop, and C would travel between registers and memory once per
block.  This pass finds the outermost loop around a warp call that

- reaches the call through loops, blocks and allocations only (no condition
  between them),
- holds no other warp call,
- touches the call's output buffer nowhere else, and
- keeps the call's output window in place (its base reads no loop variable
  bound inside the loop, the loop's own included),

and wraps it in `WarpAccumulators`: C is loaded into the lanes' fragments
before the loop and stored after it, and each call in between updates the
fragments in registers.  The values are the same: the calls in the loop
were its only readers and writers of C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ptowsp.backends.cuda.mma import is_warp_call
from ptowsp.lower.ir import Allocate, Block, For, Stmt, Store, Tensorized, stmt_exprs, walk_stmts
from ptowsp.te import Op, walk


@dataclass(frozen=True)
class WarpAccumulators(Stmt):
    """`call`'s accumulators live in registers across `body` (a loop holding the call)."""

    call: Tensorized
    body: Stmt

    body_field: ClassVar[str | None] = "body"


def _path_to_call(s: Stmt, bound: frozenset[str]) -> tuple[Tensorized, frozenset[str]] | None:
    """The one warp call under s, reached through loops, blocks and allocations, with the loop
    variables bound on the way; None where there is no such single call."""
    if is_warp_call(s):
        return s, bound  # type: ignore[return-value]
    if isinstance(s, For):
        return _path_to_call(s.body, bound | {s.var})
    if isinstance(s, Allocate):
        return _path_to_call(s.body, bound)
    if isinstance(s, Block):
        found = [f for f in (_path_to_call(c, bound) for c in s.stmts) if f is not None]
        return found[0] if len(found) == 1 else None
    return None


def _touches(s: Stmt, buffer: str) -> bool:
    """Some statement under s reads or writes `buffer`."""
    for node in walk_stmts(s):
        if isinstance(node, Store) and node.buffer.name == buffer:
            return True
        if isinstance(node, Tensorized) and any(o.buffer.name == buffer for o in node.operands):
            return True
        if any(n.op is Op.LOAD and n.arg.name == buffer for e in stmt_exprs(node) for n in walk(e)):
            return True
    return False


def _holds(loop: For) -> Tensorized | None:
    """The warp call whose accumulators can stay in registers across `loop`, if any."""
    found = _path_to_call(loop, frozenset())
    if found is None:
        return None
    call, bound = found
    if sum(is_warp_call(n) for n in walk_stmts(loop)) != 1:
        return None
    out = call.operands[0]
    if any(n.op is Op.VAR and n.arg[0] in bound for e in out.base for n in walk(e)):
        return None
    if _touches(_without(loop, call), out.buffer.name):
        return None
    return call


def _without(s: Stmt, call: Tensorized) -> Stmt:
    """s with `call` (and the loops it stands for) left out."""
    if s is call:
        return Block()
    return s.with_children([_without(c, call) for c in s.children()]) if s.children() else s


def hold_accumulators(body: Stmt) -> Stmt:
    """The kernel body with every outermost loop that can hold a warp call's accumulators wrapped."""
    if isinstance(body, For):
        call = _holds(body)
        if call is not None:
            return WarpAccumulators(call, body)
    if is_warp_call(body):
        return body
    children = body.children()
    return body.with_children([hold_accumulators(c) for c in children]) if children else body
