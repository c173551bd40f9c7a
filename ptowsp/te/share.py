"""Hash-consing: structurally equal subexpressions become one object.

Passes memoize by object (`substitute`, `walk`), so an expression whose
equal parts are one object costs what its distinct parts cost, not what its
tree costs.  Inlining copies a producer into every read of it; sharing the
copies keeps a pipeline of stages, each reading the last a few times, from
growing as the product of those reads.
"""

from __future__ import annotations

from ptowsp.te.expr import Expr, Op


class Sharing:
    """A table of representatives: `sharing(e)` is e built from the ones already seen.

    Every expression given to it stays referenced by the table, so the ids it
    keys on are never reused while it lives.
    """

    def __init__(self) -> None:
        self.table: dict[tuple, Expr] = {}  # structure -> representative, operands before their users
        self.seen: dict[int, tuple[Expr, Expr]] = {}  # id of a node given -> (the node, its representative)

    def __call__(self, root: Expr) -> Expr:
        stack = [(root, False)]
        while stack:
            n, ready = stack.pop()
            if id(n) in self.seen:
                continue
            if not ready:
                stack.append((n, True))
                stack.extend((c, False) for c in reversed(n.src) if id(c) not in self.seen)
                continue
            src = tuple(self.seen[id(c)][1] for c in n.src)
            arg = repr(n.arg) if n.op is Op.CONST else n.arg  # repr keeps -0.0 apart from 0.0
            key = (n.op, n.dtype, arg, tuple(map(id, src)))
            rep = self.table.get(key)
            if rep is None:
                same = all(a is b for a, b in zip(src, n.src, strict=True))
                rep = self.table[key] = n if same else Expr(n.op, n.dtype, src, n.arg)
            self.seen[id(n)] = (n, rep)
        return self.seen[id(root)][1]

    def representative(self, e: Expr) -> Expr:
        """The representative of a node of an expression given before."""
        return self.seen[id(e)][1]
