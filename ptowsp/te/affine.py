"""One affine reading of integer index expressions, shared by every pass that needs one.

An index is read as `sum(coef * atom) + rest + offset`:

- the atoms are the loop variables the caller says move (`moves`), or what its `other` rule makes an
  atom (a load, a clamp's span); their coefficients are what the passes ask for (a region's extent,
  a vector's lane stride, a tensorize pattern's axes, a feature's access pattern);
- `rest` is what is free of every moving node, kept whole as an expression (the base of a region
  that only outer loops move), None when there is none;
- `offset` is the integer constant.

One rule for casts: an integer cast that never changes an index value (`dtypes.keeps_index`) is
looked through; any other cast of a moving node stops the reading.  A node none of the rules covers
gives None unless the caller's `other` rule reads it (a clamp, a floor division lined up with a
layout's blocks, a node a simplifier keeps as an atom).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ptowsp.te import dtypes
from ptowsp.te.expr import Expr, Op, walk


@dataclass(frozen=True)
class Affine:
    """`sum(coef * atom) + rest + offset`; terms keep the order in which their atoms first appear."""
    terms: dict[str, tuple[Expr, int]] = field(default_factory=dict)  # key -> (atom, coefficient)
    rest: Expr | None = None
    offset: int = 0

    @property
    def coefs(self) -> dict[str, int]:
        return {key: coef for key, (_, coef) in self.terms.items()}

    def coef(self, key: str) -> int:
        return self.terms[key][1] if key in self.terms else 0


def constant(k: int) -> Affine:
    return Affine(offset=k)


def atom(key: str, e: Expr) -> Affine:
    return Affine(terms={key: (e, 1)})


def plus(a: Affine, b: Affine, sign: int = 1) -> Affine:
    terms = dict(a.terms)
    for key, (e, c) in b.terms.items():
        terms[key] = (terms[key][0] if key in terms else e, terms.get(key, (e, 0))[1] + sign * c)
    return Affine(terms, _plus(a.rest, b.rest, sign), a.offset + sign * b.offset)


def scaled(a: Affine, k: int) -> Affine:
    rest = None if a.rest is None or k == 0 else (a.rest if k == 1 else a.rest * k)
    return Affine({key: (e, c * k) for key, (e, c) in a.terms.items()}, rest, a.offset * k)


def _plus(a: Expr | None, b: Expr | None, sign: int) -> Expr | None:
    if b is None:
        return a
    if a is None:
        return b if sign > 0 else -b
    return a + b if sign > 0 else a - b


def is_loop(n: Expr) -> bool:
    return n.op in (Op.VAR, Op.RVAR)


def loop_named(*names: str) -> Callable[[Expr], bool]:
    """`moves` for the loop variables of these names only (the rest of the index is `rest`)."""
    wanted = frozenset(names)
    return lambda n: n.op in (Op.VAR, Op.RVAR) and n.arg[0] in wanted


def everything(n: Expr) -> bool:
    """`moves` that keeps nothing whole: every node is decomposed or becomes an atom."""
    return True


def integer(e: Expr) -> int | None:
    """The value of an integer constant (not a bool), else None."""
    if e.op is Op.CONST and isinstance(e.arg, (int, np.integer)) and not isinstance(e.arg, (bool, np.bool_)):
        return int(e.arg)
    return None


def in_loops(e: Expr) -> Affine | None:
    """e as constant multiples of loop variables plus a constant, or None when anything else enters
    (a gathered index, a symbolic size, a loop under a division)."""
    form = affine(e)
    return None if form is None or form.rest is not None else form


def affine(e: Expr, moves: Callable[[Expr], bool] = is_loop,
           other: Callable[[Expr], Affine | None] | None = None) -> Affine | None:
    """e as an Affine form in its moving loops (module docstring), or None when one enters it
    non-linearly.  `other` reads a node the rules here do not; it may call `affine` on its parts."""
    k = integer(e)
    if k is not None:
        return constant(k)
    if not any(moves(n) for n in walk(e)):
        return Affine(rest=e)
    if e.op in (Op.VAR, Op.RVAR):
        return atom(e.arg[0], e)
    if e.op is Op.CAST and dtypes.keeps_index(e.src[0].dtype, e.dtype):
        return affine(e.src[0], moves, other)
    if e.op is Op.NEG:
        a = affine(e.src[0], moves, other)
        return None if a is None else scaled(a, -1)
    if e.op in (Op.ADD, Op.SUB):
        a = affine(e.src[0], moves, other)
        b = None if a is None else affine(e.src[1], moves, other)
        return None if a is None or b is None else plus(a, b, 1 if e.op is Op.ADD else -1)
    if e.op is Op.MUL:
        for x, y in (e.src, e.src[::-1]):
            k = integer(y)
            if k is not None:
                a = affine(x, moves, other)
                return None if a is None else scaled(a, k)
    return None if other is None else other(e)
