"""Integer formulas over sizes and grid coordinates, as data.

A kernel's grid extents and access boxes are functions of the workload's
symbolic sizes and of an instance's grid coordinates.  The kernel cache
stores them next to the object code, and a cache directory is data a user
may get from someone else, so they are kept as small expression trees (a
closed set of integer operations, pydantic-validated, bounded in depth and
size) and evaluated by walking the tree: nothing read from a file is ever
run as Python.  One walk evaluates a formula at one instance (ints) or at
every instance of a grid at once (numpy arrays of coordinates).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ptowsp.te import Expr, Op, dtypes, fold
from ptowsp.te.sizes import Extent

MAX_DEPTH = 48  # far above what lowering makes (sums and products are flat), far below any stack limit
MAX_NODES = 4096
_BOUND = 2**62  # constants stay clear of int64 overflow
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

FormulaOp = Literal["const", "size", "grid", "neg", "add", "sub", "mul", "floordiv", "mod", "min", "max"]
_ARITY = {"const": (0, 0), "size": (0, 0), "grid": (0, 0), "neg": (1, 1), "sub": (2, 2), "floordiv": (2, 2),
          "mod": (2, 2), "add": (2, MAX_NODES), "mul": (2, MAX_NODES), "min": (2, MAX_NODES),
          "max": (2, MAX_NODES)}
Value = int | np.ndarray


class Formula(BaseModel):
    """One node: `const` (value), `size` (name), `grid` (coordinate number `value`), or an operation
    on `args` (sums, products, minima and maxima take two or more).  Depth and size are limited by
    `check_limits`, which the models holding formulas call once per formula (per node it would
    cost a cached build milliseconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    op: FormulaOp
    value: Annotated[int, Field(ge=-_BOUND, le=_BOUND)] = 0
    name: str = ""
    args: tuple[Formula, ...] = ()

    @model_validator(mode="after")
    def _well_formed(self) -> Formula:
        low, high = _ARITY[self.op]
        if not low <= len(self.args) <= high:
            raise ValueError(f"{self.op!r} takes {low}..{high} arguments, got {len(self.args)}")
        if self.op == "size" and not _NAME.fullmatch(self.name):
            raise ValueError(f"a size is named by an identifier, got {self.name!r}")
        if self.op != "size" and self.name:
            raise ValueError(f"only a size has a name, not {self.op!r}")
        if self.op == "grid" and self.value < 0:
            raise ValueError(f"grid coordinate numbers are >= 0, got {self.value}")
        if self.op in ("floordiv", "mod") and self.args[1].op == "const" and self.args[1].value == 0:
            raise ValueError(f"{self.op!r} by zero")
        return self

    def leaves(self) -> Iterator[Formula]:
        """Its size and grid nodes, found without recursion (after `check_limits`, a walk is cheap)."""
        stack = [self]
        while stack:
            f = stack.pop()
            if f.op in ("size", "grid"):
                yield f
            stack.extend(f.args)

    def sizes(self) -> set[str]:
        """The size names it reads."""
        return {f.name for f in self.leaves() if f.op == "size"}

    def coordinates(self) -> set[int]:
        """The grid coordinate numbers it reads."""
        return {f.value for f in self.leaves() if f.op == "grid"}

    def bind(self, sizes: Mapping[str, int]) -> Formula:
        """The formula at a binding of the sizes, constant parts folded (a constant without grid
        coordinates)."""
        if self.op == "size":
            return constant(sizes[self.name])
        if not self.args:
            return self
        return combine(self.op, *(a.bind(sizes) for a in self.args))

    def evaluate(self, sizes: Mapping[str, int] = {}, coords: Sequence[Value] = ()) -> Value:  # noqa: B006 - read only
        """Its value at a binding and at grid coordinates: ints, or arrays over many instances."""
        if self.op == "const":
            return self.value
        if self.op == "size":
            return sizes[self.name]
        if self.op == "grid":
            return coords[self.value]
        return _apply(self.op, [a.evaluate(sizes, coords) for a in self.args])

    def number(self) -> int | None:
        """The value of a constant, else None."""
        return self.value if self.op == "const" else None

    def function(self) -> Callable[[Sequence[Value]], Value]:
        """f(coords) -> its value there, for a formula whose sizes are bound (see `bind`): nested
        closures, so the tree is walked once, not at each of the many instances it is evaluated at."""
        if self.op == "const":
            value = self.value
            return lambda coords: value
        if self.op == "grid":
            return operator.itemgetter(self.value)
        if self.op == "size":
            raise ValueError(f"size {self.name!r} is not bound")
        parts = [a.function() for a in self.args]
        if self.op == "neg":
            return lambda coords: -parts[0](coords)
        pair, first, *rest = _PAIR[self.op], *parts
        if len(rest) == 1:
            second = rest[0]
            return lambda coords: pair(first(coords), second(coords))
        return lambda coords: functools.reduce(pair, [p(coords) for p in rest], first(coords))


def check_limits(formula: Formula) -> Formula:
    """The formula, if it is at most MAX_DEPTH deep and MAX_NODES large (else ValueError): walked with
    a stack of its own, so a hostile formula cannot exhaust Python's."""
    nodes, stack = 0, [(formula, 1)]
    while stack:
        f, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise ValueError(f"formula deeper than {MAX_DEPTH} or larger than {MAX_NODES} nodes")
        stack.extend((a, depth + 1) for a in f.args)
    return formula


def _minimum(a: Value, b: Value) -> Value:
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else np.minimum(a, b)


def _maximum(a: Value, b: Value) -> Value:
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else np.maximum(a, b)


_PAIR: dict[str, Callable[[Value, Value], Value]] = {
    "sub": operator.sub, "floordiv": operator.floordiv, "mod": operator.mod, "add": operator.add,
    "mul": operator.mul, "min": _minimum, "max": _maximum}


def _apply(op: str, values: Sequence[Value]) -> Value:
    return -values[0] if op == "neg" else functools.reduce(_PAIR[op], values)


def constant(value: int) -> Formula:
    return Formula(op="const", value=int(value))


def grid(k: int) -> Formula:
    return Formula(op="grid", value=k)


def combine(op: str, *args: Formula) -> Formula:
    """`op` over args, flattened (a sum of sums is one sum: trees stay shallow) and with its constant
    arguments folded."""
    if op in ("add", "mul", "min", "max"):
        args = tuple(x for a in args for x in (a.args if a.op == op else (a,)))
        numbers = [a.value for a in args if a.op == "const"]
        rest = [a for a in args if a.op != "const"]
        if numbers:
            folded = _apply(op, numbers)
            if op == "mul" and folded == 0:
                return constant(0)
            if not (rest and folded == {"add": 0, "mul": 1}.get(op)):
                rest.append(constant(folded))
        return rest[0] if len(rest) == 1 else Formula(op=op, args=tuple(rest))
    if all(a.op == "const" for a in args) and not (op in ("floordiv", "mod") and args[1].value == 0):
        return constant(_apply(op, [a.value for a in args]))
    return Formula(op=op, args=args)


_FROM_OP = {Op.NEG: "neg", Op.ADD: "add", Op.SUB: "sub", Op.MUL: "mul", Op.FLOORDIV: "floordiv", Op.MOD: "mod",
            Op.MIN: "min", Op.MAX: "max"}


def formula_of(e: Extent | Expr, coordinates: Mapping[str, int] = {}) -> Formula | None:  # noqa: B006 - read only
    """An integer extent or index as a formula, loop variables named in `coordinates` becoming grid
    coordinates; None when it uses anything else (a load, another loop) or grows past the limits."""
    try:
        found = _formula(e, coordinates)
        return None if found is None else check_limits(found)
    except ValueError:  # a constant out of range, too deep or too large
        return None


def _formula(e: Extent | Expr, coordinates: Mapping[str, int]) -> Formula | None:
    if isinstance(e, int):
        return constant(e) if -_BOUND <= e <= _BOUND else None
    return fold(e, lambda n, parts: _formula_of(n, parts, coordinates), _operands)


def _operands(e: Expr) -> tuple[Expr, ...]:
    """The operands a formula reads: an index cast's, arithmetic's."""
    if e.op in _FROM_OP or (e.op is Op.CAST and dtypes.keeps_index(e.src[0].dtype, e.dtype)):
        return e.src
    return ()


def _formula_of(e: Expr, parts: tuple[Formula | None, ...], coordinates: Mapping[str, int]) -> Formula | None:
    if e.op is Op.CONST:
        return constant(e.arg) if isinstance(e.arg, int) and not isinstance(e.arg, bool) else None
    if e.op is Op.VAR:
        return grid(coordinates[e.arg[0]]) if e.arg[0] in coordinates else None
    if e.op is Op.SIZE:
        return Formula(op="size", name=e.arg)
    if not parts or any(p is None for p in parts):
        return None
    return parts[0] if e.op is Op.CAST else combine(_FROM_OP[e.op], *parts)
