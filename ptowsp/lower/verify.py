"""The loop IR's invariants, checked between lowering passes when `PTOWSP_VERIFY=1` (`make test`
sets it): a pass that breaks one is named at once, instead of a wrong kernel or an LLVM error later.

- every loop variable an expression reads is bound by a loop around it, is a grid coordinate of the
  kernel, or is a `Let`'s name (a let variable has no extent);
- no loop binds a name a loop around it binds already (the inner one would hide it);
- every local buffer a statement reads or writes is allocated around it, once;
- every read and write indexes each dimension of its buffer once, a store's value has the buffer's
  dtype, and a guard is a bool.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ptowsp.errors import BuildError
from ptowsp.lower.ir import GLOBAL, Allocate, Buffer, For, IfThen, Let, Prefetch, Stmt, Store, Tensorized, stmt_exprs
from ptowsp.te import Expr, Op, walk

ENVIRONMENT = "PTOWSP_VERIFY"


def enabled() -> bool:
    return os.environ.get(ENVIRONMENT, "") not in ("", "0")


def verify(stmt: Stmt, grid: Iterable[str], task: str, after: str) -> None:
    """Raise BuildError naming `task`, the pass `after` which the IR broke an invariant, and what."""
    problem = _first_problem(stmt, frozenset(grid), frozenset(), frozenset())
    if problem is not None:
        raise BuildError(f"task {task!r}: after lowering pass {after!r}, the loop IR is invalid: {problem} "
                         "(a bug in ptowsp's lowering; please report it with the schedule)")


def _first_problem(s: Stmt, loops: frozenset[str], lets: frozenset[str], local: frozenset[str]) -> str | None:
    for e in stmt_exprs(s):
        problem = _expr_problem(e, loops, lets, local)
        if problem is not None:
            return problem
    if isinstance(s, Store):
        problem = _access_problem(s.buffer, s.indices, local) or (
            None if s.value.dtype == s.buffer.dtype else
            f"a store of a {s.value.dtype} value into {s.buffer.dtype} buffer {s.buffer.name}")
        if problem is not None:
            return problem
    if isinstance(s, Prefetch) and (problem := _access_problem(s.buffer, s.indices, local)) is not None:
        return problem
    if isinstance(s, IfThen) and s.cond.dtype != "bool":
        return f"a guard of dtype {s.cond.dtype}: {s.cond}"
    if isinstance(s, Tensorized):
        for operand in s.operands:
            if operand.buffer.scope != GLOBAL and operand.buffer.name not in local:
                return f"intrinsic {s.intrinsic} reads local buffer {operand.buffer.name}, allocated nowhere around it"
    if isinstance(s, For):
        if s.var in loops:
            return f"loop {s.var} inside a loop of the same name"
        loops = loops | {s.var}
    elif isinstance(s, Allocate):
        if s.buffer.name in local:
            return f"local buffer {s.buffer.name} allocated inside its own allocation"
        local = local | {s.buffer.name}
    elif isinstance(s, Let):
        lets = lets | {s.var}
    for child in s.children():
        problem = _first_problem(child, loops, lets, local)
        if problem is not None:
            return problem
    return None


def _expr_problem(e: Expr, loops: frozenset[str], lets: frozenset[str], local: frozenset[str]) -> str | None:
    for n in walk(e):
        if n.op is Op.VAR and n.arg[0] not in (lets if n.arg[1] is None else loops):
            what = "let variable" if n.arg[1] is None else "loop variable"
            return f"{what} {n.arg[0]} read outside the statement that binds it (in {e})"
        if n.op is Op.LOAD and isinstance(n.arg, Buffer):
            problem = _access_problem(n.arg, n.src, local)
            if problem is not None:
                return problem
    return None


def _access_problem(buffer: Buffer, indices: tuple[Expr, ...], local: frozenset[str]) -> str | None:
    if buffer.scope != GLOBAL and buffer.name not in local:
        return f"local buffer {buffer.name} used outside its allocation"
    if len(indices) != len(buffer.shape):
        return f"buffer {buffer.name} of {len(buffer.shape)} dimension(s) indexed with {len(indices)}"
    return None
