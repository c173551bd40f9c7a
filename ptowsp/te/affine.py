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
import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ptowsp.te import dtypes
from ptowsp.te.expr import Expr, Op


_NO_TERMS: dict[str, tuple[Expr, int]] = {}  # shared by the forms without terms: never changed in place


class Affine(NamedTuple):
    """`sum(coef * atom) + rest + offset`; terms keep the order in which their atoms first appear.
    (A tuple: passes build one per index node, and a frozen dataclass is several times slower to make.)"""
    terms: dict[str, tuple[Expr, int]] = _NO_TERMS  # key -> (atom, coefficient)
    rest: Expr | None = None
    offset: int = 0

    @property
    def coefs(self) -> dict[str, int]:
        return {key: coef for key, (_, coef) in self.terms.items()}

    def coef(self, key: str) -> int:
        found = self.terms.get(key)
        return 0 if found is None else found[1]


def constant(k: int) -> Affine:
    return Affine(_NO_TERMS, None, k)


def atom(key: str, e: Expr) -> Affine:
    return Affine({key: (e, 1)})


def plus(a: Affine, b: Affine, sign: int = 1) -> Affine:
    if not b.terms:
        terms = a.terms
    else:
        terms = dict(a.terms)
        for key, (e, c) in b.terms.items():
            old = terms.get(key)
            terms[key] = (e, sign * c) if old is None else (old[0], old[1] + sign * c)
    return Affine(terms, _plus(a.rest, b.rest, sign), a.offset + sign * b.offset)


def scaled(a: Affine, k: int) -> Affine:
    if k == 1:
        return a
    rest = None if a.rest is None or k == 0 else a.rest * k
    terms = {key: (e, c * k) for key, (e, c) in a.terms.items()} if a.terms else a.terms
    return Affine(terms, rest, a.offset * k)


def _plus(a: Expr | None, b: Expr | None, sign: int) -> Expr | None:
    if b is None:
        return a
    if a is None:
        return b if sign > 0 else -b
    return a + b if sign > 0 else a - b


@dataclass(frozen=True)
class Moving:
    """What moves in a reading: loop variables (`loops`: these names, or None for every loop) and the
    loads of tensors `reads` (a buffer filled inside a region's anchor); `everything` keeps nothing
    whole (every node is decomposed or made an atom)."""

    loops: frozenset[str] | None = None
    reads: frozenset[str] = frozenset()
    everything: bool = False

    def still(self, n: Expr) -> bool:
        """Whether nothing in n moves (names cached on the nodes: Expr.loops_read, tensors_read)."""
        if self.everything:
            return False
        if self.reads and not self.reads.isdisjoint(n.tensors_read):
            return False
        return not n.loops_read if self.loops is None else self.loops.isdisjoint(n.loops_read)


LOOPS = Moving()  # every loop variable moves


@functools.lru_cache(maxsize=1024)
def loops_named(*names: str) -> Moving:
    """Only the loop variables of these names move (the rest of the index is `rest`)."""
    return Moving(loops=frozenset(names))


EVERYTHING = Moving(everything=True)


def integer(e: Expr) -> int | None:
    """The value of an integer constant (not a bool), else None."""
    if e.op is not Op.CONST:
        return None
    value = e.arg
    if type(value) is int or (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))):
        return int(value)
    return None


def in_loops(e: Expr) -> Affine | None:
    """e as constant multiples of loop variables plus a constant, or None when anything else enters
    (a gathered index, a symbolic size, a loop under a division)."""
    form = affine(e)
    return None if form is None or form.rest is not None else form


def affine(e: Expr, moving: Moving = LOOPS, other: Callable[[Expr], Affine | None] | None = None) -> Affine | None:
    """e as an Affine form in what is `moving` (module docstring), or None when a moving loop enters
    it non-linearly.  `other` reads a node the rules here do not; it may call `affine` on its parts."""
    return _read(e, moving, other)


def _read(n: Expr, moving: Moving, other: Callable[[Expr], Affine | None] | None) -> Affine | None:
    op = n.op
    if op is Op.CONST:
        k = integer(n)
        if k is not None:
            return constant(k)
    if moving.still(n):
        return Affine(_NO_TERMS, n, 0)
    if op is Op.VAR or op is Op.RVAR:  # a loop that does not move is still, above
        return atom(n.arg[0], n)
    if op is Op.ADD or op is Op.SUB:
        a = _read(n.src[0], moving, other)
        b = None if a is None else _read(n.src[1], moving, other)
        return None if a is None or b is None else plus(a, b, 1 if op is Op.ADD else -1)
    if op is Op.MUL:
        for x, y in (n.src, n.src[::-1]):
            k = integer(y)
            if k is not None:
                a = _read(x, moving, other)
                return None if a is None else scaled(a, k)
    if op is Op.CAST and dtypes.keeps_index(n.src[0].dtype, n.dtype):
        return _read(n.src[0], moving, other)
    if op is Op.NEG:
        a = _read(n.src[0], moving, other)
        return None if a is None else scaled(a, -1)
    return None if other is None else other(n)
