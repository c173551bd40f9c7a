"""The one expression rewriter: a list of rules, each a pattern and what a node it matches becomes.

tinygrad's PatternMatcher in small.  A `Pat` matches a node by its op (one or a set), dtype and
operands' patterns, binding named parts; a rule's function gets the node and those parts and returns
the replacement, or None to leave the node to the next rule.  `rewrite` runs a rule list over an
expression in one of two orders:

- "up" (the default): operands first, then the rules on the rebuilt node, each rule seeing its
  operands already rewritten (a load's indices included, so no rule recurses into them by hand):
  a simplifier, inlining, reads of buffers, of tensors in another layout, a gather's clamp.  With
  `fixpoint` the rules apply again to what they return until none does; without, once per node (a
  map that is not idempotent: a layout's index map, a clamp);
- "down": the rules on a node before its operands, and a replacement is final, not visited again:
  simultaneous substitution (`x -> x + 1` must not apply to its own result; a let-bound subtree
  replaced whole).

Expressions are hash-consed (te/expr.py), so each distinct node is rewritten once per call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ptowsp.te.expr import Expr
from ptowsp.te.opcodes import Op

Order = Literal["up", "down"]


@dataclass(frozen=True)
class Pat:
    """A pattern: `ops` (None: any op), `dtype` (None: any), `src` the operands' patterns (None:
    any operands), `name` binds the matched node for the rule's function."""

    ops: frozenset[Op] | None = None
    dtype: str | None = None
    src: tuple[Pat, ...] | None = None
    name: str | None = None

    @classmethod
    def of(cls, *ops: Op, dtype: str | None = None, src: Iterable[Pat] | None = None,
           name: str | None = None) -> Pat:
        return cls(frozenset(ops) or None, dtype, None if src is None else tuple(src), name)

    def match(self, e: Expr, bound: dict[str, Expr]) -> bool:
        if (self.ops is not None and e.op not in self.ops) or (self.dtype is not None and e.dtype != self.dtype):
            return False
        if self.src is not None and (len(self.src) != len(e.src) or
                                     not all(p.match(s, bound) for p, s in zip(self.src, e.src))):
            return False
        if self.name is not None:
            bound[self.name] = e
        return True


ANY = Pat()
Rule = tuple[Pat, Callable[..., "Expr | None"]]


class Rules:
    """An ordered list of rules; calling it on a node gives the first rule's replacement (None: no
    rule applies).  Rules are indexed by the ops their patterns name, so a node tries only those."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules = list(rules)
        # per op, filled when a node of it is first met: (pattern, function, whether the op alone
        # decides the match: no operands, dtype or names to check)
        self._by_op: dict[Op, list[tuple[Pat, Callable[..., Expr | None], bool]]] = {}

    def _indexed(self, op: Op) -> list[tuple[Pat, Callable[..., Expr | None], bool]]:
        found = self._by_op[op] = [(p, fn, p.src is None and p.name is None and p.dtype is None)
                                   for p, fn in self.rules if p.ops is None or op in p.ops]
        return found

    def matcher(self) -> Callable[[Expr], Expr | None]:
        """The function a rewrite calls per node: where the list is one rule over nodes of some ops (or
        of any), that rule with the op test in front (substitute's case, the hot one), else the list."""
        if len(self.rules) == 1:
            pat, fn = self.rules[0]
            if pat == ANY:
                return fn
            if pat.src is None and pat.name is None and pat.dtype is None:
                ops = pat.ops
                return lambda e: fn(e) if e.op in ops else None
        return self

    def __call__(self, e: Expr) -> Expr | None:
        candidates = self._by_op.get(e.op)
        for pat, fn, by_op in self._indexed(e.op) if candidates is None else candidates:
            if by_op:
                found = fn(e)
            else:
                bound: dict[str, Expr] = {}
                found = fn(e, **bound) if pat.match(e, bound) else None
            if found is not None:
                return found
        return None


def rules(fn: Callable[[Expr], Expr | None], *ops: Op) -> Rules:
    """One rule over nodes of `ops` (any node when none are given) whose function takes the node."""
    return Rules([(_over(ops), fn)])


@functools.cache
def _over(ops: tuple[Op, ...]) -> Pat:
    """The pattern of nodes of `ops` (any node when empty), made once per set of ops."""
    return Pat.of(*ops)


def rewrite(expr: Expr, rule_list: Rules, order: Order = "up", fixpoint: bool = True) -> Expr:
    """`expr` with the rules applied in `order` (module docstring); shared nodes rewritten once."""
    return _rewrite(expr, rule_list.matcher(), order, fixpoint)


def _rewrite(expr: Expr, match: Callable[[Expr], Expr | None], order: Order, fixpoint: bool) -> Expr:
    memo: dict[int, Expr] = {}  # by the id of a node of expr (alive while expr is) or one a rule made
    keep: list[Expr] = []  # the nodes rules made that memo's ids name: alive while it lives

    def up(e: Expr) -> Expr:
        found = memo.get(id(e))
        if found is None:
            # hash-consed: the same operands give e itself back
            node = Expr(e.op, e.dtype, tuple(up(s) for s in e.src), e.arg) if e.src else e
            new = match(node)
            if not fixpoint:
                found = node if new is None else new
            else:
                found = node if new is None or new is node else up(new)
                memo[id(found)] = found  # what the rules left is left as it is
                keep.extend((e, found))
            memo[id(e)] = found
        return found

    def down(e: Expr) -> Expr:
        found = memo.get(id(e))
        if found is None:
            found = match(e)
            if found is None:
                found = Expr(e.op, e.dtype, tuple(down(s) for s in e.src), e.arg) if e.src else e
            memo[id(e)] = found
        return found

    return up(expr) if order == "up" else down(expr)


def substitute_vars(expr: Expr, values: Mapping[str, Expr], kinds: Collection[Op] = (Op.VAR, Op.RVAR)) -> Expr:
    """expr with each variable of `kinds` named in `values` replaced by its value, all at once (a
    value that reads its own variable is not substituted again); a part that reads none of them is
    left as it is without a visit."""
    if not values or values.keys().isdisjoint(expr.loops_read):
        return expr
    kinds = frozenset(kinds)

    def value(n: Expr) -> Expr | None:
        if n.op in kinds:
            return values.get(n.arg[0])
        return n if values.keys().isdisjoint(n.loops_read) else None

    return _rewrite(expr, value, "down", False)


def substitute(expr: Expr, replace_node: Callable[[Expr], Expr | None]) -> Expr:
    """expr with each node n for which replace_node(n) is not None replaced, top-down: a replacement
    is not visited again (the "down" order of `rewrite` with one rule over every node)."""
    return _rewrite(expr, replace_node, "down", False)
