"""Common subexpressions of a stored value, computed once per point and named by a `Let`.

Inlining copies a producer's expression into every read of it: a tone curve
`c * c * (3 - 2 * c)` over an inlined stage holds three copies of that stage,
which holds the copies of its own producers.  The tree grows with each stage
(the kernel text and LLVM's time with it), while the distinct values stay
few.  Here each repeated subexpression of a store's value becomes a `Let`
just around the store, children before the values that use them:

    Y[i] = (f(X[i]) * f(X[i])) * f(X[i])  ->  let %0 = f(X[i])
                                              Y[i] = (%0 * %0) * %0

Only what the store evaluates at every point is bound: a subexpression met
only on one side of a `where` stays there, since that side may read outside
a tensor where it is not chosen.  Indices are never bound, so bounds
inference and access analysis read the same indices as before; nor is int64
arithmetic of loop variables elsewhere (a guard's `i.outer * 8 + i.inner`
reads as the load beside it does, and LLVM shares it anyway).  A repeated
part whose copies all sit inside one bound value is not bound again.
"""

from __future__ import annotations

from ptowsp.lower.ir import Let, Stmt, Store, let_var
from ptowsp.te import Expr, Op, substitute
from ptowsp.te.fold import postorder

_LEAVES = frozenset({Op.CONST, Op.VAR, Op.RVAR, Op.SIZE, Op.LOAD})  # a repeated load is LLVM's to merge


def bind_common(s: Stmt) -> Stmt:
    """Every store with the repeated parts of its value let-bound (names `%0`, `%1`, ... per kernel)."""
    counter = [0]

    def visit(st: Stmt) -> Stmt:
        if isinstance(st, Store):
            return _bind_store(st, counter)
        return st.with_children([visit(c) for c in st.children()])

    return visit(s)


def _value_children(e: Expr) -> tuple[Expr, ...]:
    """The operands that belong to the value (a load's indices do not)."""
    return () if e.op is Op.LOAD else e.src


def _bind_store(store: Store, counter: list[int]) -> Stmt:
    root = store.value  # equal parts are one object (te/expr.py hash-conses)
    order = postorder(root)
    # occurrences in the tree, and whether some occurrence is evaluated unconditionally
    uses: dict[int, int] = {id(root): 1}
    always: set[int] = {id(root)}
    for n in reversed(order):  # users before their operands
        for k, c in enumerate(_value_children(n)):
            uses[id(c)] = uses.get(id(c), 0) + uses.get(id(n), 0)
            if id(n) in always and not (n.op is Op.WHERE and k > 0):
                always.add(id(c))
    loaded: set[int] = set()  # nodes that read memory
    for n in order:
        if n.op is Op.LOAD or any(id(c) in loaded for c in n.src):
            loaded.add(id(n))
    repeated = {id(n) for n in order if uses.get(id(n), 0) > 1 and id(n) in always and n.op not in _LEAVES
                and not (n.dtype == "int64" and id(n) not in loaded)}  # index arithmetic stays as the loads say it
    # reads of each repeated node once they are bound: a let's value is computed once; one read
    # means an enclosing let took the other occurrences, and the node stays in place
    reads: dict[int, int] = {id(root): 1}
    for n in reversed(order):
        for c in _value_children(n):
            reads[id(c)] = reads.get(id(c), 0) + (1 if id(n) in repeated else reads.get(id(n), 0))
    bound = [n for n in order if id(n) in repeated and reads[id(n)] > 1]
    names = {id(n): f"%{counter[0] + k}" for k, n in enumerate(bound)}
    counter[0] += len(bound)
    if not bound:
        return store

    def named(n: Expr) -> Expr | None:
        """A bound node as its let's name; a load's indices are left as they are."""
        name = names.get(id(n))
        if name is not None:
            return let_var(name, n.dtype)
        return n if n.op is Op.LOAD else None

    def value_of(n: Expr) -> Expr:
        """n with its bound operands read from their lets (n itself computed)."""
        if n.op is Op.LOAD:
            return n
        return Expr(n.op, n.dtype, tuple(substitute(c, named) for c in n.src), n.arg)

    body: Stmt = Store(store.buffer, store.indices, substitute(root, named))
    for n in reversed(bound):
        body = Let(names[id(n)], value_of(n), body)
    return body
