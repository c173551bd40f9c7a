"""User reducers (TVM's comm_reducer), one value each: `pw.reducer(combine, identity)`.

`combine` is called once per body dtype with two placeholder expressions,
so the reduction carries an ordinary expression (`a * b`, a guarded
log-add-exp) that every backend already compiles; `REDUCE.arg` is the
`UserReducer` holding it.  The combine must be associative and commutative
(targets reassociate: split loops, lane partials, tree folds) and read no
tensor.  Several-value reducers (a (value, index) pair) are not built yet:
argmax / argmin are the pair reducers the language has (lower/argreduce.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ptowsp.errors import DTypeError, WorkloadError
from ptowsp.te.expr import Expr, Op, Operand, cast, lift, substitute, walk

LEFT, RIGHT = "@acc", "@value"  # the placeholders' names: no loop or axis can be named with "@"


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

    def apply(self, acc: Expr, value: Expr) -> Expr:
        """combine(acc, value) with the placeholders replaced."""
        parts = {LEFT: acc, RIGHT: cast(value, acc.dtype)}
        return substitute(self.combine, lambda n: parts.get(n.arg[0]) if n.op is Op.VAR else None)


@dataclass(frozen=True)
class Reducer:
    """What `pw.reducer` returns: call it like pw.sum, `r(X[i, k], axis=k)`."""

    combine: Callable[[Expr, Expr], Operand]
    identity: Operand | Callable[[str], Operand]
    name: str = "reducer"

    def kind(self, dtype: str) -> UserReducer:
        a, b = (Expr(Op.VAR, dtype, (), (n, 1)) for n in (LEFT, RIGHT))
        combined = lift(self.combine(a, b), dtype)
        for n in walk(combined):
            if n.op in (Op.LOAD, Op.REDUCE, Op.RVAR) or (n.op is Op.VAR and n.arg[0] not in (LEFT, RIGHT)):
                raise WorkloadError(f"reducer {self.name}: combine may use only its two arguments and constants, "
                                    f"but {combined} reads {n}")
        if combined.dtype != dtype:
            raise DTypeError(f"reducer {self.name}: combine of two {dtype} values gives {combined.dtype} "
                             f"({combined}); cast it back with pw.cast(..., {dtype!r})")
        identity = self.identity(dtype) if callable(self.identity) else self.identity
        return UserReducer(self.name, combined, cast(lift(identity, dtype), dtype))

    def __call__(self, body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
        from ptowsp.te.ops import reduce_axes  # ops builds on this module's neighbours, not on it

        x = lift(body)
        return Expr(Op.REDUCE, x.dtype, (x, *reduce_axes(self.name, axis)), self.kind(x.dtype))


def reducer(combine: Callable[[Expr, Expr], Operand], identity: Operand | Callable[[str], Operand],
            name: str = "reducer") -> Reducer:
    """A commutative, associative reducer of one value: `combine(acc, value)` and its `identity`
    (a scalar, or a function of the dtype such as `lambda dt: -inf`)."""
    if not callable(combine):
        raise WorkloadError(f"pw.reducer needs combine=lambda a, b: ..., got {combine!r}")
    return Reducer(combine, identity, name)


__all__ = ["Reducer", "UserReducer", "reducer"]
