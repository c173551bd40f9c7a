"""ONNX's trigonometric operators (Sin, Cos, Tan, Asin, Acos, Atan) as polynomials in the language's
own arithmetic, so that every target computes them as it computes a multiply-add (and vectorizes
them), with no math library.

Sin, Cos and Tan reduce x to r = x - k pi/2 with |r| <= pi/4 (pi/2 in three parts, so that k times
the first is exact: Cody and Waite's reduction), then take the Taylor series of sin r and cos r to
the 17th and 18th power (their error at pi/4 is below 1e-19) and pick by k mod 4.  The reduction
keeps its accuracy while k is below 2^16 (|x| < 1e5); past that the results lose digits, as any
reduction without extra precision does.

Atan folds |x| > 1 onto 1/|x| (atan x = pi/2 - atan 1/x) and what remains above tan(pi/8) onto
(t - 1)/(t + 1) (atan t = pi/4 + atan((t - 1)/(t + 1))), so its series runs over |u| <= 0.4143:
10 terms reach float32's precision, 20 float64's.  Asin and Acos are atans:
asin x = atan(x / sqrt((1 - x)(1 + x))), acos x = 2 atan(sqrt((1 - x) / (1 + x))), exact at +-1.
"""

from __future__ import annotations

import math

import onnx

import ptowsp as pw
from ptowsp.frontend.onnx_elementwise import elementwise
from ptowsp.frontend.onnx_importer import Importer
from ptowsp.frontend.onnx_ops import op
from ptowsp.te import Expr

# pi/2 in three parts: the first with few enough bits that k times it is exact (fdlibm's and cephes' splits)
_HALF_PI = {"float64": (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624879595063154e-21),
            "float32": (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)}
_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(9)]  # r, r^3, ..., r^17
_COS = [(-1) ** n / math.factorial(2 * n) for n in range(10)]  # 1, r^2, ..., r^18
_TAN_PI_8 = math.tan(math.pi / 8)


def _series(coefficients: list[float], s: Expr) -> Expr:
    """coefficients[0] + coefficients[1] s + ..., by Horner's rule."""
    total = s * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        total = total * s + c
    return total


def _reduced(x: Expr) -> tuple[Expr, Expr, Expr]:
    """(k mod 4, sin r, cos r) for x = k pi/2 + r, |r| <= pi/4."""
    first, second, third = _HALF_PI["float64" if x.dtype == "float64" else "float32"]
    k = pw.round(x * (2 / math.pi))
    r = ((x - k * first) - k * second) - k * third
    s = r * r
    return k - pw.floor(k * 0.25) * 4.0, r * _series(_SIN, s), _series(_COS, s)


def _sin(x: Expr) -> Expr:
    q, sin, cos = _reduced(x)
    return pw.where(q == 0, sin, pw.where(q == 1, cos, pw.where(q == 2, -sin, -cos)))


def _cos(x: Expr) -> Expr:
    q, sin, cos = _reduced(x)
    return pw.where(q == 0, cos, pw.where(q == 1, -sin, pw.where(q == 2, -cos, sin)))


def _tan(x: Expr) -> Expr:
    q, sin, cos = _reduced(x)
    return pw.where((q == 0) | (q == 2), sin / cos, -cos / sin)


def _atan(x: Expr) -> Expr:
    terms = 20 if x.dtype == "float64" else 10
    a = pw.abs(x)
    big = a > 1.0
    t = pw.where(big, 1.0 / a, a)
    middle = t > _TAN_PI_8
    u = pw.where(middle, (t - 1.0) / (t + 1.0), t)
    small = u * _series([(-1) ** n / (2 * n + 1) for n in range(terms)], u * u)
    v = pw.where(middle, small + math.pi / 4, small)
    w = pw.where(big, math.pi / 2 - v, v)
    return pw.where(x < 0, -w, w)


_FUNCTIONS = {
    "Sin": _sin, "Cos": _cos, "Tan": _tan, "Atan": _atan,
    "Asin": lambda x: _atan(x / pw.sqrt((1.0 - x) * (x + 1.0))),
    "Acos": lambda x: _atan(pw.sqrt((1.0 - x) / (x + 1.0))) * 2.0,
}


@op(*_FUNCTIONS)
def trigonometric(imp: Importer, node: onnx.NodeProto) -> None:
    elementwise(imp, node, _FUNCTIONS[node.op_type], [imp.value(node, 0)])
