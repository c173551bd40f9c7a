"""The functions of the expression language: math, selection, casts, reductions.

These are re-exported as `pw.exp`, `pw.where`, `pw.sum`, ... .  Names that
shadow Python builtins (`sum`, `max`, `min`, `abs`, `pow`) are defined under
longer names here and aliased only in the public namespace.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ptowsp.errors import DTypeError, ShapeError, WorkloadError
from ptowsp.te.expr import REDUCE_KINDS, Expr, Op, Operand, binary, cast, const, lift, unary
from ptowsp.te import dtypes, sizes
from ptowsp.te.names import check_name

__all__ = [
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "absolute",
    "power", "maximum", "minimum", "clamp", "saturating_cast", "reduce_axis", "reduce_sum", "reduce_max",
    "reduce_min", "argmax", "argmin",
]


def exp(x: Operand) -> Expr:
    return unary(Op.EXP, x)


def log(x: Operand) -> Expr:
    return unary(Op.LOG, x)


def sqrt(x: Operand) -> Expr:
    return unary(Op.SQRT, x)


def rsqrt(x: Operand) -> Expr:
    """1 / sqrt(x)."""
    return unary(Op.RSQRT, x)


def tanh(x: Operand) -> Expr:
    return unary(Op.TANH, x)


def sigmoid(x: Operand) -> Expr:
    """1 / (1 + exp(-x))."""
    return unary(Op.SIGMOID, x)


def erf(x: Operand) -> Expr:
    """The Gauss error function (exact GELU uses it)."""
    return unary(Op.ERF, x)


def floor(x: Operand) -> Expr:
    return unary(Op.FLOOR, x)


def ceil(x: Operand) -> Expr:
    return unary(Op.CEIL, x)


def round(x: Operand) -> Expr:  # noqa: A001 - pw.round, as np.round and torch.round
    """The nearest whole number, ties to even (2.5 -> 2, 3.5 -> 4): numpy's, IEEE's and ONNX's rounding."""
    return unary(Op.ROUND, x)


def absolute(x: Operand) -> Expr:
    return unary(Op.ABS, x)


def power(x: Operand, y: Operand) -> Expr:
    """x ** y, computed in floating point (integer operands give float64)."""
    return binary(Op.POW, x, y)


def maximum(x: Operand, y: Operand) -> Expr:
    """Elementwise maximum; NaN propagates, as numpy.maximum."""
    return binary(Op.MAX, x, y)


def minimum(x: Operand, y: Operand) -> Expr:
    """Elementwise minimum; NaN propagates, as numpy.minimum."""
    return binary(Op.MIN, x, y)


def clamp(x: Operand, lo: Operand, hi: Operand) -> Expr:
    """minimum(maximum(x, lo), hi): x limited to [lo, hi] (NaN stays NaN)."""
    return minimum(maximum(x, lo), hi)


def saturating_cast(x: Operand, dtype: str) -> Expr:
    """Convert to `dtype`, first clamping x to the values `dtype` can hold (Halide's saturating_cast).

    Integers clamp where pw.cast would wrap (int16 300 -> uint8 255, -5 -> 0); a float going to a
    narrower float clamps to its largest finite value instead of becoming inf (NaN stays NaN);
    float -> integer is pw.cast, which saturates already; bool on either side is pw.cast.
    """
    x, dst = lift(x), dtypes.normalize(dtype)
    src = x.dtype
    if src == dst or "bool" in (src, dst) or (dtypes.is_float(src) and dtypes.is_int(dst)):
        return cast(x, dst)
    lo, hi = dtypes.int_range(src) if dtypes.is_int(src) else (-dtypes.float_max(src), dtypes.float_max(src))
    if dtypes.is_int(dst):
        want_lo, want_hi = dtypes.int_range(dst)
    else:
        want_lo, want_hi = -dtypes.float_max(dst), dtypes.float_max(dst)
        if dtypes.is_int(src):  # a bound the source can hold, at or inside the float's range
            want_lo, want_hi = -int(want_hi), int(want_hi)
        elif want_hi < hi and src in ("float16", "bfloat16"):  # float32 holds the bound exactly; these may not
            x = cast(x, "float32")
    if x.op is Op.CONST:  # folded here: nothing else folds maximum and minimum of constants
        value = x.arg if x.arg != x.arg else min(max(x.arg, want_lo), want_hi)  # (NaN stays)
        return cast(const(value, x.dtype), dst)
    if want_lo > lo:
        x = maximum(x, want_lo)
    if want_hi < hi:
        x = minimum(x, want_hi)
    return cast(x, dst)


_axis_names = (f"r{n}" for n in itertools.count())


def reduce_axis(extent: int | str | Expr, name: str | None = None) -> Expr:
    """A reduction variable ranging over 0..extent-1, for use inside pw.sum/max/min; the extent
    may be a size name ("n") or an expression over sizes, bound at run time, or 0 (the reduction of
    an empty set is its identity: workloads/empties.py)."""
    if isinstance(extent, (str, Expr)):
        extent = sizes.dimension(extent, f"reduce axis {name or ''}")
    elif isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
        raise ShapeError(f"reduce axis {name or ''} needs an integer extent >= 0 or a size name, got {extent!r}")
    if name is None:
        name = next(_axis_names)
    check_name(name, "reduce axis")
    return Expr(Op.RVAR, "int64", (), (name, extent))


def reduce_axes(kind: str, axis: Expr | Sequence[Expr]) -> tuple[Expr, ...]:
    """The axes of pw.<kind>(..., axis=...), checked: reduce axes, at least one, none twice."""
    axes = (axis,) if isinstance(axis, Expr) else tuple(axis)
    if not axes:
        raise WorkloadError(f"pw.{kind} needs at least one reduce axis")
    for ax in axes:
        if not isinstance(ax, Expr) or ax.op is not Op.RVAR:
            raise WorkloadError(
                f"pw.{kind} axis {ax!r} is not a reduce axis; create one with pw.reduce_axis(extent, name)"
            )
    names = [ax.name for ax in axes]
    if len(set(names)) != len(names):
        raise WorkloadError(f"pw.{kind} lists a reduce axis twice: {', '.join(names)}")
    return axes


def _reduce(kind: str, body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    assert kind in REDUCE_KINDS
    axes = reduce_axes(kind, axis)
    x = lift(body)
    if kind == "sum" and x.dtype == "bool":
        raise DTypeError(f"pw.sum over the bool expression {x}; cast it first, e.g. pw.cast(mask, 'int32')")
    if kind in ("argmax", "argmin"):
        if x.dtype == "bool":  # compared as 0 / 1, so every target orders them alike
            x = cast(x, "int32")
        return Expr(Op.REDUCE, "int64", (x, *axes), kind)
    return Expr(Op.REDUCE, x.dtype, (x, *axes), kind)


def reduce_sum(body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    """Sum over the reduce axes (float16 and bfloat16 accumulate in float32; integers wrap in their dtype)."""
    return _reduce("sum", body, axis)


def reduce_max(body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    """Maximum over the reduce axes."""
    return _reduce("max", body, axis)


def reduce_min(body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    """Minimum over the reduce axes."""
    return _reduce("min", body, axis)


def argmax(body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    """The int64 index of the first maximum over the reduce axes (numpy.argmax's rule: the first
    NaN wins if there is one); over several axes, the flat row-major index of a reshape."""
    return _reduce("argmax", body, axis)


def argmin(body: Operand, axis: Expr | Sequence[Expr]) -> Expr:
    """The int64 index of the first minimum over the reduce axes (first NaN wins, as numpy.argmin)."""
    return _reduce("argmin", body, axis)
