"""The loop-nest IR: statements as frozen dataclasses over te expressions.

Scalar expressions are te `Expr` trees: loop variables are VAR nodes, reads
are LOAD nodes whose `arg` is a `Buffer`; a value bound by `Let` is a VAR
of the value's dtype whose extent is None (`let_var`).  Statements are
immutable; passes build new ones (`dataclasses.replace`).  Backends consume
this IR: the kernel of one task instance is a statement whose free
variables are the task's grid coordinates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import ClassVar

from ptowsp.te import Expr, Op, substitute
from ptowsp.te.sizes import Extent

GLOBAL, LOCAL, SHARED, UB = "global", "local", "shared", "ub"


@dataclass(frozen=True)
class Buffer:
    """A named array a kernel reads or writes: a workload tensor (global) or a local allocation."""

    name: str
    shape: tuple[Extent, ...]  # symbolic dimensions only in global buffers (local ones have a size)
    dtype: str
    scope: str = GLOBAL

    def __getitem__(self, index: tuple[Expr, ...] | Expr) -> Expr:
        indices = index if isinstance(index, tuple) else (index,)
        return Expr(Op.LOAD, self.dtype, tuple(indices), self)

    def __str__(self) -> str:
        return self.name


def var(name: str, extent: Extent) -> Expr:
    """A loop variable (int64) ranging over 0..extent-1 (the extent may be symbolic)."""
    return Expr(Op.VAR, "int64", (), (name, extent))


class Stmt:
    """Base of statements."""

    body_field: ClassVar[str | None] = None  # the field holding the one child statement, if any

    def children(self) -> tuple[Stmt, ...]:
        return () if self.body_field is None else (getattr(self, self.body_field),)

    def with_children(self, children: list[Stmt]) -> Stmt:
        """The same statement over new children (in `children()` order)."""
        return self if self.body_field is None else replace(self, **{self.body_field: children[0]})


@dataclass(frozen=True)
class For(Stmt):
    """for var in 0..extent-1, run as `kind`: serial, vectorized, unrolled, parallel or a GPU axis."""

    var: str
    extent: Extent
    kind: str
    body: Stmt

    body_field: ClassVar[str | None] = "body"


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

    body_field: ClassVar[str | None] = "then"


@dataclass(frozen=True)
class Allocate(Stmt):
    """A buffer that lives for the body (its scope: local, shared, ub)."""

    buffer: Buffer
    body: Stmt

    body_field: ClassVar[str | None] = "body"


@dataclass(frozen=True)
class Let(Stmt):
    """Compute `value` once and name it `var` for the body (a common subexpression of its stores).

    The name is read as `let_var(var, value.dtype)`.  Lets bind values only,
    never indices or guards, so bounds inference never meets one.
    """

    var: str
    value: Expr
    body: Stmt

    body_field: ClassVar[str | None] = "body"


@dataclass(frozen=True)
class Block(Stmt):
    stmts: tuple[Stmt, ...] = field(default=())

    def children(self) -> tuple[Stmt, ...]:
        return self.stmts

    def with_children(self, children: list[Stmt]) -> Stmt:
        return Block(tuple(children))


@dataclass(frozen=True)
class Operand:
    """One operand of an intrinsic call: a window of `buffer` starting at `base`, whose pattern
    dimension d runs along the buffer's dimension `dims[d]`, `steps[d]` elements of it at a time
    (1: every element; 2: a stride-2 convolution's input pixels)."""

    buffer: Buffer
    base: tuple[Expr, ...]
    dims: tuple[int, ...]
    steps: tuple[int, ...] = ()  # empty: 1 along every dimension

    def step(self, d: int) -> int:
        return self.steps[d] if self.steps else 1


@dataclass(frozen=True)
class Tensorized(Stmt):
    """A call of the intrinsic `intrinsic` (workloads/intrinsic.py) in place of the loops `body`.

    Targets with an implementation call it; every other pass and the IR interpreter read `body`,
    the loops it replaces, which compute the same values (lower/tensorize.py checked that)."""

    intrinsic: str
    operands: tuple[Operand, ...]  # the output window first, then the pattern's inputs in order
    extents: tuple[int, ...]  # per pattern axis: its spatial axes, then its reduce axes
    body: Stmt

    body_field: ClassVar[str | None] = "body"


@dataclass(frozen=True)
class Prefetch(Stmt):
    """Bring the cache line holding `buffer[indices]` closer (a software prefetch: schedule step
    prefetch_tensor).  A hint: it changes no value, and an index past the buffer's end (the lines
    after the last iteration's) is harmless, so nothing bounds-checks it."""

    buffer: Buffer
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Barrier(Stmt):
    """All threads of a block wait here (GPU shared-memory exchange)."""

    scope: str = SHARED


def let_var(name: str, dtype: str) -> Expr:
    """A read of the value a `Let` binds (a VAR without extent: it is not a loop)."""
    return Expr(Op.VAR, dtype, (), (name, None))


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
    if isinstance(s, Prefetch):
        return s.indices
    if isinstance(s, IfThen):
        return (s.cond,)
    if isinstance(s, Let):
        return (s.value,)
    if isinstance(s, Tensorized):
        return tuple(e for o in s.operands for e in o.base)
    return ()


def map_exprs(s: Stmt, fn, loop_name=lambda name: name) -> Stmt:
    """Rebuild a statement with fn applied to every expression it holds and loop_name to every loop."""
    if isinstance(s, Store):
        return Store(s.buffer, tuple(fn(i) for i in s.indices), fn(s.value))
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, tuple(fn(i) for i in s.indices))
    if isinstance(s, IfThen):
        return IfThen(fn(s.cond), map_exprs(s.then, fn, loop_name))
    if isinstance(s, For):
        return For(loop_name(s.var), s.extent, s.kind, map_exprs(s.body, fn, loop_name))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, map_exprs(s.body, fn, loop_name))
    if isinstance(s, Let):
        return Let(s.var, fn(s.value), map_exprs(s.body, fn, loop_name))
    if isinstance(s, Block):
        return Block(tuple(map_exprs(c, fn, loop_name) for c in s.stmts))
    if isinstance(s, Tensorized):
        operands = tuple(replace(o, base=tuple(fn(e) for e in o.base)) for o in s.operands)
        return replace(s, operands=operands, body=map_exprs(s.body, fn, loop_name))
    return s


def bound_loops(s: Stmt) -> dict[str, Extent]:
    """Every loop variable a statement binds, with its largest extent (a name may recur; a symbolic
    extent wins over a number)."""
    extents: dict[str, Extent] = {}
    for n in walk_stmts(s):
        if isinstance(n, For):
            old = extents.get(n.var)
            if old is None or (isinstance(old, int) and (not isinstance(n.extent, int) or n.extent > old)):
                extents[n.var] = n.extent
    return extents


def rename_loops(s: Stmt, prefix: str) -> Stmt:
    """Prefix every loop the statement binds, so it can sit inside other loops of the same names."""
    names = bound_loops(s)

    def rename(e: Expr) -> Expr:
        def renamed(n: Expr) -> Expr | None:
            bound = n.op in (Op.VAR, Op.RVAR) and n.arg[0] in names
            return Expr(n.op, n.dtype, (), (prefix + n.arg[0], n.arg[1])) if bound else None

        return substitute(e, renamed)

    return map_exprs(s, rename, lambda name: prefix + name)
