"""Lowering passes that tidy the loops: drop loops of extent 1, fold index arithmetic, bound unrolling.

Splits, regions and staging leave indices like `k.outer * 16 + k.inner + i - i`
and loops that run once.  Users read the lowered code, so it should say
`k.outer * 16 + k.inner`; LLVM would fold it anyway, a printout would not.
Only integer index arithmetic is rewritten, where wrapping two's-complement
arithmetic makes these identities exact.

Unrolled loops nest multiplicatively (an unrolled consumer loop around a
producer computed at it, around the producer's own unrolled loops).  Past
UNROLL_BUDGET expression nodes of straight-line code (a vectorized loop
counting one node per 4 lanes), an unrolled loop stays
a loop (innermost unrolls are kept, outer ones give way), and the printout
shows it as one: compile time stays bounded and the results are the same.
"""

from __future__ import annotations

from ptowsp.lower.ir import Allocate, Block, For, IfThen, Prefetch, Stmt, Store, map_exprs, stmt_exprs
from ptowsp.te import Expr, Op, cast, const, rewrite, rules, substitute_vars, walk
from ptowsp.te.affine import EVERYTHING, Affine, affine, atom
from ptowsp.te.bounds import interval
from ptowsp.te.indices import collapsed

UNROLL_BUDGET = 4096  # expression nodes one unrolled loop may expand to


def simplify_index(e: Expr) -> Expr:
    """An int64 index as sum(coef * term) + constant: cancels `i - i`, drops `+ 0` and `* 1`, and
    splits `(8 * a + b) // 8` into `a` and `(8 * a + b) % 8` into `b` where b is in [0, 8) (a
    split lined up with a layout's blocks, layouts.py)."""
    if e.dtype != "int64":
        return e
    return _sum(*linear_terms(e))


def linear_terms(e: Expr) -> tuple[dict[str, tuple[Expr, int]], int]:
    """An int64 e as {term: (atom, coefficient)} and a constant (atoms: loop variables, loads, and
    whatever else is not a sum of constant multiples)."""
    def atom_of(x: Expr) -> Affine:
        split = _divided(x)
        if split is not None:
            return affine(split, EVERYTHING, atom_of)  # type: ignore[return-value]
        kept = Expr(x.op, x.dtype, tuple(_inner(s) for s in x.src), x.arg)
        return atom(str(kept), kept)

    form = affine(e, EVERYTHING, atom_of)
    assert form is not None  # every node is read: none is left that makes the form fail
    return form.terms, form.offset


def _sum(terms: dict[str, tuple[Expr, int]], offset: int) -> Expr:
    result: Expr | None = None
    for part, coef in terms.values():
        if coef == 0:
            continue
        part = part if part.dtype == "int64" else cast(part, "int64")  # read through an index cast
        term = part if abs(coef) == 1 else part * abs(coef)
        result = (term if coef > 0 else -term) if result is None else (result + term if coef > 0 else result - term)
    if result is None:
        return const(offset, "int64")
    return result + offset if offset > 0 else (result - (-offset) if offset < 0 else result)


def _divided(x: Expr) -> Expr | None:
    """`(k * a + b) // k` as a, `(k * a + b) % k` as b, when b's bounds lie in [0, k); else None."""
    if x.op not in (Op.FLOORDIV, Op.MOD) or x.dtype != "int64" or x.src[1].op is not Op.CONST:
        return None
    k = x.src[1].arg
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return None
    terms, offset = linear_terms(x.src[0])
    whole = {key: (atom, coef // k) for key, (atom, coef) in terms.items() if coef % k == 0}
    rest = {key: term for key, term in terms.items() if key not in whole}
    remainder = _sum(rest, offset % k)
    bounds = interval(remainder)
    if bounds is None or bounds[0] < 0 or bounds[1] >= k:
        return None
    return _sum(whole, offset // k) if x.op is Op.FLOORDIV else remainder


def _inner(x: Expr) -> Expr:
    return simplify_index(x) if x.dtype == "int64" else x


_COMPARISONS = (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE)


def _loads(e: Expr) -> Expr:
    """Fold the indices of every load, and integer comparisons (the guards)."""
    return rewrite(e, _FOLD_INDICES, fixpoint=False)


def _fold_indices(n: Expr) -> Expr | None:  # a gather's own indices folded already
    if n.op is Op.LOAD or n.src[0].dtype == "int64":
        return Expr(n.op, n.dtype, tuple(simplify_index(i) for i in n.src), n.arg)
    return None


_FOLD_INDICES = rules(_fold_indices, Op.LOAD, *_COMPARISONS)


def bound_unrolling(s: Stmt) -> Stmt:
    """Unrolled loops past the budget made serial (the last pass: it sees the final code's size)."""
    return _bound_unrolling(s)[0]


def _bound_unrolling(s: Stmt) -> tuple[Stmt, int]:
    """The statement with over-budget unrolled loops made serial, and its expanded size in nodes."""
    kept = [_bound_unrolling(c) for c in s.children()]
    exprs = (*collapsed(s.buffer.shape, s.indices)[1], s.value) if isinstance(s, Store) else stmt_exprs(s)
    size = sum(_size(e) for e in exprs) + sum(n for _, n in kept)
    s = s.with_children([c for c, _ in kept])
    if isinstance(s, For) and s.kind == "vectorized":  # roughly one instruction per 4 lanes
        return s, size * -(-s.extent // 4)
    if isinstance(s, For) and s.kind == "unrolled":
        if s.extent * size > UNROLL_BUDGET:
            return For(s.var, s.extent, "serial", s.body), size
        return s, s.extent * size
    return s, size


def _size(e: Expr) -> int:
    """Expression nodes (shared ones once), an unflattened index pair `e // m, e % m` counted as the
    one index it addresses (te/indices.py: the code computes e once)."""
    return sum(1 for _ in walk(e, lambda n: collapsed(n.arg.shape, n.src)[1] if n.op is Op.LOAD else n.src))


def tidy(s: Stmt) -> Stmt:
    """Drop unit loops (their variable becomes 0) and fold every load and store index."""
    if isinstance(s, For) and isinstance(s.extent, int) and s.extent == 1:
        zero = const(0, "int64")
        return tidy(_with_value(s.body, s.var, zero))
    if isinstance(s, Store):
        return Store(s.buffer, tuple(simplify_index(_loads(i)) for i in s.indices), _loads(s.value))
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, tuple(simplify_index(_loads(i)) for i in s.indices))
    if isinstance(s, IfThen):
        return IfThen(_loads(s.cond), tidy(s.then))
    if isinstance(s, (For, Allocate, Block)):
        return s.with_children([tidy(c) for c in s.children()])
    return s


def _with_value(s: Stmt, name: str, value: Expr) -> Stmt:
    return map_exprs(s, lambda e: substitute_vars(e, {name: value}))
