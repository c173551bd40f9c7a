"""The loop-nest IR: statements as frozen dataclasses over te expressions.

Scalar expressions are te `Expr` trees: loop variables are VAR nodes, reads
are LOAD nodes whose `arg` is a `Buffer`.  Statements are immutable; passes
build new ones (`dataclasses.replace`).  Backends consume this IR: the
kernel of one task instance is a statement whose free variables are the
task's grid coordinates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ptowsp.te import Expr, Op

GLOBAL, LOCAL, SHARED, UB = "global", "local", "shared", "ub"


@dataclass(frozen=True)
class Buffer:
    """A named array a kernel reads or writes: a workload tensor (global) or a local allocation."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = GLOBAL

    def __getitem__(self, index: tuple[Expr, ...] | Expr) -> Expr:
        indices = index if isinstance(index, tuple) else (index,)
        return Expr(Op.LOAD, self.dtype, tuple(indices), self)

    def __str__(self) -> str:
        return self.name


def var(name: str, extent: int) -> Expr:
    """A loop variable (int64) ranging over 0..extent-1."""
    return Expr(Op.VAR, "int64", (), (name, extent))


class Stmt:
    """Base of statements."""

    def children(self) -> tuple[Stmt, ...]:
        return ()


@dataclass(frozen=True)
class For(Stmt):
    """for var in 0..extent-1, run as `kind`: serial, vectorized, unrolled, parallel or a GPU axis."""

    var: str
    extent: int
    kind: str
    body: Stmt

    def children(self) -> tuple[Stmt, ...]:
        return (self.body,)


@dataclass(frozen=True)
class Store(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class IfThen(Stmt):
    """Run `then` where cond holds (guards of non-dividing splits, lazy where)."""

    cond: Expr
    then: Stmt

    def children(self) -> tuple[Stmt, ...]:
        return (self.then,)


@dataclass(frozen=True)
class Allocate(Stmt):
    """A buffer that lives for the body (its scope: local, shared, ub)."""

    buffer: Buffer
    body: Stmt

    def children(self) -> tuple[Stmt, ...]:
        return (self.body,)


@dataclass(frozen=True)
class Block(Stmt):
    stmts: tuple[Stmt, ...] = field(default=())

    def children(self) -> tuple[Stmt, ...]:
        return self.stmts


@dataclass(frozen=True)
class Barrier(Stmt):
    """All threads of a block wait here (GPU shared-memory exchange)."""

    scope: str = SHARED


def block(*stmts: Stmt) -> Stmt:
    """A sequence, flattening nested blocks; one statement stands alone."""
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Block) else (s,))
    return flat[0] if len(flat) == 1 else Block(tuple(flat))


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    yield s
    for c in s.children():
        yield from walk_stmts(c)


def stmt_exprs(s: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement itself holds (not its children's)."""
    if isinstance(s, Store):
        return (*s.indices, s.value)
    if isinstance(s, IfThen):
        return (s.cond,)
    return ()
