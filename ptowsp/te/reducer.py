"""User reducers (TVM's comm_reducer): `pw.reducer(combine, identity)` over one value or several.

`combine` is called once per reduction with placeholder expressions, so the
reduction carries ordinary expressions (`a * b`, a guarded log-add-exp) that
every backend already compiles.  A one-value reduction is a REDUCE whose
arg is the `UserReducer` holding its combine.

A reducer whose identity is a tuple keeps several values together (a
(value, index) pair, a running (max, scaled sum)).  Calling it gives one
REDUCE per value; all of them share one src, `(TUPLE of the bodies, *axes)`,
and their arg is a `Component`: the `TupleReducer` and which value it is.
Lowering (lower/tuplereduce.py) and the reference fold all values of that
src together, once, and each component reads its own result.

Every combine must be associative and commutative (targets reassociate:
split loops, lane partials, tree folds) and read no tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ptowsp.errors import DTypeError, ShapeError, WorkloadError
from ptowsp.te import dtypes
from ptowsp.te.expr import Expr, Op, Operand, cast, const, lift, walk
from ptowsp.te.rewrite import substitute_vars

LEFT, RIGHT = "@acc", "@value"  # the placeholders' names: no loop or axis can be named with "@"


def placeholder_names(k: int) -> tuple[str, str]:
    """The names of value k's accumulator and incoming value in a several-value combine."""
    return f"{LEFT}{k}", f"{RIGHT}{k}"


@dataclass(frozen=True, eq=False)
class UserReducer:
    """A reduction kind: combine(acc, value) over one dtype, starting from identity."""

    name: str
    combine: Expr  # over VARs LEFT and RIGHT of dtype `identity.dtype`
    identity: Expr

    def __str__(self) -> str:  # the combine is part of the text, so workload fingerprints tell reducers apart
        return f"{self.name}<{self.combine} from {self.identity}>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, UserReducer) and self.name == other.name and self.combine.same_as(other.combine)
                and self.identity.same_as(other.identity))

    def __hash__(self) -> int:
        return hash((self.name, self.combine, self.identity))

    @property
    def combines(self) -> tuple[Expr, ...]:
        return (self.combine,)

    def operands(self, accs: tuple, values: tuple) -> dict[str, object]:
        """The placeholders bound to the accumulator and the incoming value (expressions or arrays)."""
        return {LEFT: accs[0], RIGHT: values[0]}

    def apply(self, acc: Expr, value: Expr) -> Expr:
        """combine(acc, value) with the placeholders replaced."""
        parts = {LEFT: acc, RIGHT: cast(value, acc.dtype)}
        return substitute_vars(self.combine, parts, (Op.VAR,))


@dataclass(frozen=True, eq=False)
class TupleReducer:
    """A reduction of several values kept together: value k folds by combines[k] over all of them."""

    name: str
    combines: tuple[Expr, ...]  # over the VARs placeholder_names(j) of every value j
    identities: tuple[Expr, ...]  # one per value, in its dtype

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(i.dtype for i in self.identities)

    def __str__(self) -> str:
        combines, identities = (", ".join(map(str, part)) for part in (self.combines, self.identities))
        return f"{self.name}<({combines}) from ({identities})>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TupleReducer) and self.name == other.name
                and _same_all(self.combines, other.combines) and _same_all(self.identities, other.identities))

    def __hash__(self) -> int:
        return hash((self.name, self.combines, self.identities))

    def operands(self, accs: tuple, values: tuple) -> dict[str, object]:
        """The placeholders bound to the accumulators and the incoming values (expressions or arrays)."""
        bound: dict[str, object] = {}
        for k, (acc, value) in enumerate(zip(accs, values, strict=True)):
            left, right = placeholder_names(k)
            bound[left], bound[right] = acc, value
        return bound

    def apply(self, accs: tuple[Expr, ...], values: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """Every value's combine with the placeholders replaced: all read the accumulators before the update."""
        parts = self.operands(accs, tuple(cast(v, d) for v, d in zip(values, self.dtypes, strict=True)))
        return tuple(substitute_vars(c, parts, (Op.VAR,)) for c in self.combines)


@dataclass(frozen=True)
class Component:
    """REDUCE.arg of one value of a several-value reduction."""

    reducer: TupleReducer
    index: int

    def __str__(self) -> str:
        return f"{self.reducer}[{self.index}]"


def reduction_identity(kind: str | UserReducer | Component, dtype: str) -> Expr:
    """The value a reduction starts from, in `dtype`: what it gives over an empty set (0 for a sum, the
    lowest value for a max, a user reducer's identity).  argmax and argmin have none (their index)."""
    if isinstance(kind, UserReducer):
        return cast(kind.identity, dtype)
    if isinstance(kind, Component):
        return cast(kind.reducer.identities[kind.index], dtype)
    if kind in ("argmax", "argmin"):
        raise WorkloadError(f"{kind} of an empty set has no value (there is no index to give)")
    if kind == "sum":
        return const(0, dtype)
    if dtype == "bool":
        return const(kind == "min", dtype)
    if dtypes.is_float(dtype):
        return const(float("-inf") if kind == "max" else float("inf"), dtype)
    info = np.iinfo(dtype)
    return const(int(info.min if kind == "max" else info.max), dtype)


def accumulator_dtype(kind: str, dtype: str) -> str:
    """sum over float16 and bfloat16 accumulates in float32, as the reference does."""
    return "float32" if kind == "sum" and dtype in ("float16", "bfloat16") else dtype


def is_several(e: Expr) -> bool:
    """e is one value of a several-value reduction."""
    return e.op is Op.REDUCE and isinstance(e.arg, Component)


def same_reduction(a: Expr, b: Expr) -> bool:
    """Two values of one several-value reduction: one reducer over the same bodies and axes."""
    return (a.arg.reducer == b.arg.reducer and len(a.src) == len(b.src)
            and all(x.same_as(y) for x, y in zip(a.src, b.src)))


def _same_all(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))


def _check_reads(name: str, combined: Expr, allowed: set[str]) -> None:
    for n in walk(combined):
        if n.op in (Op.LOAD, Op.REDUCE, Op.RVAR) or (n.op is Op.VAR and n.arg[0] not in allowed):
            raise WorkloadError(f"reducer {name}: combine may use only its arguments and constants, "
                                f"but {combined} reads {n}")


def _concrete(x: object) -> bool:
    """An operand with a dtype of its own (a Python scalar has none: it is weak)."""
    return isinstance(x, (Expr, np.generic))


@dataclass(frozen=True)
class Reducer:
    """What `pw.reducer` returns: call it like pw.sum, `r(X[i, k], axis=k)`, or with a tuple body
    `r((X[i, k], 1.0), axis=k)` when its identity is a tuple."""

    combine: Callable
    identity: Operand | Callable[[str], Operand] | tuple
    name: str = "reducer"

    @property
    def several(self) -> bool:
        return isinstance(self.identity, (tuple, list))

    def kind(self, dtype: str) -> UserReducer:
        a, b = (Expr(Op.VAR, dtype, (), (n, 1)) for n in (LEFT, RIGHT))
        combined = lift(self.combine(a, b), dtype)
        _check_reads(self.name, combined, {LEFT, RIGHT})
        if combined.dtype != dtype:
            raise DTypeError(f"reducer {self.name}: combine of two {dtype} values gives {combined.dtype} "
                             f"({combined}); cast it back with pw.cast(..., {dtype!r})")
        identity = self.identity(dtype) if callable(self.identity) else self.identity
        return UserReducer(self.name, combined, cast(lift(identity, dtype), dtype))

    def tuple_kind(self, dtypes: tuple[str, ...]) -> TupleReducer:
        """The several-value reduction over values of these dtypes (docs/expressions.md gives the rules)."""
        names = [placeholder_names(k) for k in range(len(dtypes))]
        accs = tuple(Expr(Op.VAR, d, (), (n[0], 1)) for n, d in zip(names, dtypes, strict=True))
        values = tuple(Expr(Op.VAR, d, (), (n[1], 1)) for n, d in zip(names, dtypes, strict=True))
        result = self.combine(accs, values)
        if not isinstance(result, (tuple, list)) or len(result) != len(dtypes):
            got = f"a tuple of {len(result)}" if isinstance(result, (tuple, list)) else f"one value, {result}"
            raise ShapeError(f"reducer {self.name}: combine must return a tuple of {len(dtypes)} values "
                             f"(one per value of the identity), got {got}")
        combines = []
        for k, (value, dtype) in enumerate(zip(result, dtypes, strict=True)):
            combined = lift(value, dtype)
            _check_reads(self.name, combined, {n for pair in names for n in pair})
            if combined.dtype != dtype:
                raise DTypeError(f"reducer {self.name}: combine gives value {k} as {combined.dtype} ({combined}), "
                                 f"but value {k} is {dtype}; cast it back with pw.cast(..., {dtype!r})")
            combines.append(combined)
        given = (i(d) if callable(i) else i for i, d in zip(self.identity, dtypes, strict=True))
        identities = tuple(cast(lift(i, d), d) for i, d in zip(given, dtypes, strict=True))
        return TupleReducer(self.name, tuple(combines), identities)

    def __call__(self, body, axis: Expr | Sequence[Expr]) -> Expr | tuple[Expr, ...]:
        from ptowsp.te.ops import reduce_axes  # ops builds on this module's neighbours, not on it

        axes = reduce_axes(self.name, axis)
        if self.several:
            return self._several(body, axes)
        if isinstance(body, (tuple, list)):
            raise ShapeError(f"reducer {self.name} reduces one value (its identity is not a tuple), but was "
                             f"called with a tuple of {len(body)}; give it a tuple identity to reduce several")
        x = lift(body)
        return Expr(Op.REDUCE, x.dtype, (x, *axes), self.kind(x.dtype))

    def _several(self, body, axes: tuple[Expr, ...]) -> tuple[Expr, ...]:
        count = len(self.identity)
        if not isinstance(body, (tuple, list)) or len(body) != count:
            got = f"a tuple of {len(body)}" if isinstance(body, (tuple, list)) else "one value"
            raise ShapeError(f"reducer {self.name} reduces {count} values (its identity has {count}), but was "
                             f"called with {got}; pass a tuple of {count} body expressions")
        partner = next((b for b in body if isinstance(b, Expr)), None)
        dtypes = []
        for b, i in zip(body, self.identity, strict=True):
            if _concrete(b):  # the body's own dtype
                dtypes.append(lift(b).dtype)
            elif _concrete(i):  # a Python scalar body takes the identity's dtype ...
                dtypes.append(lift(i).dtype)
            else:  # ... else it is weak beside the first expression of the body (NEP 50)
                dtypes.append(lift(b, None if partner is None else partner.dtype).dtype)
        kind = self.tuple_kind(tuple(dtypes))
        packed = Expr(Op.TUPLE, dtypes[0], tuple(cast(lift(b, d), d) for b, d in zip(body, dtypes, strict=True)))
        return tuple(Expr(Op.REDUCE, d, (packed, *axes), Component(kind, k)) for k, d in enumerate(dtypes))


def reducer(combine: Callable, identity: Operand | Callable[[str], Operand] | tuple,
            name: str = "reducer") -> Reducer:
    """A commutative, associative reducer: `combine(acc, value)` and its `identity` (a scalar, or a
    function of the dtype such as `lambda dt: -inf`); with a tuple identity, one of several values,
    where combine takes and returns tuples."""
    if not callable(combine):
        raise WorkloadError(f"pw.reducer needs combine=lambda a, b: ..., got {combine!r}")
    if isinstance(identity, (tuple, list)) and not identity:
        raise WorkloadError(f"pw.reducer {name}: a tuple identity needs one value per value reduced, got ()")
    return Reducer(combine, identity, name)


__all__ = ["Component", "Reducer", "TupleReducer", "UserReducer", "is_several", "reducer", "reduction_identity",
           "same_reduction"]
