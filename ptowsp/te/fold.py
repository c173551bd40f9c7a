"""Bottom-up evaluation of an expression: the engine every "one value per node" analysis runs on.

`fold(expr, rule)` computes `rule(node, values of its operands)` for each distinct node once,
operands first (a catamorphism).  The bounds of an index, the value of a symbolic size, a
region's formula, a cost, the printed text: each is a rule that says what one node is, given
what its operands are, and none walks the tree itself.  Because nodes are hash-consed, a shared
part costs once; because the walk keeps its own stack, a deep expression costs no recursion.

`per_node` memoizes an analysis that is a function of the node alone across calls: equal nodes
being one object, an index a dozen passes ask about is valued once.

Nothing here needs more of a node than its `src`, so the printer, which expr.py imports, can be a fold.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Operands = Callable[[Any], Sequence[Any]]


def postorder(expr) -> list:
    """Every distinct node of the tree, operands before their users (common subexpressions' order)."""
    order: list = []
    seen: set[int] = set()
    stack = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node.src) if id(c) not in seen)
    return order


def fold(expr, rule: Callable[[Any, tuple], T], operands: Operands | None = None) -> T:
    """`expr`'s value: `rule(node, values)` with `values` those of its operands (or of the nodes
    `operands(node)` names: the parts a rule reads, so it need not value a part it ignores)."""
    if not expr.src:
        return rule(expr, ())
    values: dict[int, Any] = {}
    stack: list = [(expr, None)]
    while stack:
        node, parts = stack.pop()
        if parts is not None:  # its operands are valued: value it
            values[id(node)] = rule(node, tuple([values[id(p)] for p in parts]))
            continue
        if id(node) in values:
            continue
        parts = node.src if operands is None else operands(node)
        stack.append((node, parts))
        for p in parts:
            if id(p) not in values:
                if p.src:
                    stack.append((p, None))
                else:  # a leaf (most of an index): valued at once, not stacked
                    values[id(p)] = rule(p, ())
    return values[id(expr)]


def per_node(fn: Callable[[Any], T], limit: int = 1 << 14) -> Callable[[Any], T]:
    """`fn` (a function of one node alone) remembering its answers by node identity.  It keeps the
    nodes it answered for alive, so an id stays theirs, and forgets everything at `limit` of them."""
    memo: dict[int, tuple[Any, T]] = {}

    @functools.wraps(fn)
    def remembered(node) -> T:
        hit = memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        value = fn(node)
        if len(memo) >= limit:
            memo.clear()
        memo[id(node)] = (node, value)
        return value

    return remembered
