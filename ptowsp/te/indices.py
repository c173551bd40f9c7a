"""Index arithmetic of tensor accesses that every layer reads the same way."""

from __future__ import annotations

from ptowsp.te import sizes
from ptowsp.te.expr import Expr, Op, walk


def collapsed(shape: tuple, indices: tuple[Expr, ...]) -> tuple[tuple, tuple[Expr, ...]]:
    """The access with each pair of neighbouring indices `e // m, e % m` over dimensions (.., m) read as
    the one index e of their merged dimension: the same address, `(e // m) * m + e % m = e` (floor
    division), but an address affine in e.  A loop over a flattened axis reads an NCHW tensor that
    way (`X[n, c, p // 56, p % 56]`, a 1x1 convolution as a matmul over pixels),
    as does an imported model's Reshape; its vectors are then contiguous, not gathered lane by lane.
    Indices that read data (gathers) are left alone: they are clamped dimension by dimension."""
    out_shape: list = []
    out: list[Expr] = []
    k = 0
    while k < len(indices):
        if k + 1 < len(indices) and _unflattened(indices[k], indices[k + 1], shape[k + 1]):
            out.append(indices[k].src[0])
            out_shape.append(sizes.mul(shape[k], shape[k + 1]))
            k += 2
        else:
            out.append(indices[k])
            out_shape.append(shape[k])
            k += 1
    return tuple(out_shape), tuple(out)


def _unflattened(high: Expr, low: Expr, size: object) -> bool:
    if high.op is not Op.FLOORDIV or low.op is not Op.MOD or not isinstance(size, int):
        return False
    divisor, modulus = high.src[1], low.src[1]
    if not (divisor.op is modulus.op is Op.CONST and divisor.arg == modulus.arg == size):
        return False
    e = high.src[0]
    return (e is low.src[0] or str(e) == str(low.src[0])) and not any(n.op is Op.LOAD for n in walk(e))


def unclamped(indices: tuple[Expr, ...]) -> tuple[Expr, ...] | None:
    """The indices with their clamps against fixed bounds removed (`min(max(e, 0), n - 1)` read as e:
    how a boundary condition keeps its reads in bounds), or None when no index has one.  The address
    differs only where a clamp moved the index, which the reader must check."""
    core = tuple(map(_without_clamp, indices))
    return None if all(c is i for c, i in zip(core, indices)) else core


def _without_clamp(e: Expr) -> Expr:
    while e.op in (Op.MAX, Op.MIN):
        fixed = [s for s in e.src if not any(n.op in (Op.VAR, Op.RVAR, Op.LOAD) for n in walk(s))]
        if len(fixed) != 1:
            return e
        e = e.src[1] if fixed[0] is e.src[0] else e.src[0]
    return e
