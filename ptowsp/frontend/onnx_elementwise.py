"""ONNX's elementwise operators: arithmetic with ONNX's dtype rules, comparisons and logic, bitwise
operators, the activation family, n-ary Sum/Mean/Max/Min, Cast and CastLike.

Each is a function of its inputs' elements, broadcast numpy's way (`elementwise`); the tables map
an op type to that function.  Where ONNX's result type differs from the language's promotion (an
integer Div truncates, Pow keeps the base's type), the function says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value, element_dtype
from ptowsp.frontend.onnx_ops import in_float32, op, refuse
from ptowsp.frontend.onnx_sizes import broadcast
from ptowsp.te import Expr


def elementwise(imp: Importer, node: onnx.NodeProto, fn: Callable[..., object], inputs: Sequence[Value]) -> Value:
    shape = broadcast(node, *(v.shape for v in inputs))
    return imp.compute(node, shape, lambda *idx: in_float32(fn, *(v.broadcast_at(idx, shape) for v in inputs)))


def _is_integer(x: Expr) -> bool:
    return np.dtype(x.dtype).kind in "iub"


def _divide(a: Expr, b: Expr) -> Expr:
    """ONNX Div: integers divide truncating toward zero and keep their type (C's `/`); floats divide."""
    if not (_is_integer(a) and _is_integer(b)):
        return a / b
    q = a // b  # floor division; a remainder of the other sign than the divisor's moves it up by one
    return pw.where((a % b != 0) & ((a < 0) != (b < 0)), q + 1, q)


def _fmod(a: Expr, b: Expr) -> Expr:
    """C's fmod (ONNX Mod with fmod=1): the remainder with the dividend's sign."""
    m = a % b  # numpy's remainder: the divisor's sign
    return pw.where((m != 0) & ((a < 0) != (b < 0)), m - b, m)


def _odd(x: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """An odd function from its values on |x| (exact for negative x, where a formula may cancel)."""
    value = f(pw.abs(x))
    return pw.where(x < 0, -value, value)


def _power(a: Expr, b: Expr) -> Expr:
    """ONNX Pow: the result has the base's type (computed in floating point, then converted)."""
    p = pw.pow(a, b)
    return p if p.dtype == a.dtype else pw.cast(p, a.dtype)


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "Div": _divide, "Pow": _power}
_UNARY = {"Relu": lambda x: pw.maximum(x, 0.0), "Sigmoid": pw.sigmoid, "Tanh": pw.tanh, "Exp": pw.exp,
          "Log": pw.log, "Sqrt": pw.sqrt, "Neg": lambda x: -x, "Abs": pw.abs, "Erf": pw.erf,
          "Reciprocal": lambda x: 1.0 / x, "Floor": pw.floor, "Ceil": pw.ceil, "Round": pw.round}


# comparisons and logic (torch's exporter builds attention masks from them): bool results
_BINARY |= {"Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
            "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
            "And": lambda a, b: a & b, "Or": lambda a, b: a | b, "Xor": lambda a, b: a != b,
            "BitwiseAnd": lambda a, b: a & b, "BitwiseOr": lambda a, b: a | b,
            "BitwiseXor": lambda a, b: (a | b) & ~(a & b), "PRelu": lambda x, slope: pw.where(x < 0, x * slope, x)}
_UNARY |= {"Not": lambda x: ~x, "BitwiseNot": lambda x: ~x,
           "Sign": lambda x: pw.cast(pw.where(x > 0, 1, pw.where(x < 0, -1, 0)), x.dtype),
           "Softplus": lambda x: pw.maximum(x, 0.0) + pw.log(pw.exp(-pw.abs(x)) + 1.0),
           "Softsign": lambda x: x / (pw.abs(x) + 1.0), "IsNaN": lambda x: x != x,
           "Sinh": lambda x: (pw.exp(x) - pw.exp(-x)) * 0.5, "Cosh": lambda x: (pw.exp(x) + pw.exp(-x)) * 0.5,
           "Asinh": lambda x: _odd(x, lambda a: pw.log(a + pw.sqrt(a * a + 1.0))),
           "Acosh": lambda x: pw.log(x + pw.sqrt(x * x - 1.0)),
           "Atanh": lambda x: pw.log((x + 1.0) / (1.0 - x)) * 0.5,
           "Mish": lambda x: x * pw.tanh(_UNARY["Softplus"](x))}
# activations with attributes: op -> (attribute defaults, fn(x, **attributes))
_ACTIVATIONS: dict[str, tuple[dict[str, float], Callable[..., Expr]]] = {
    "LeakyRelu": ({"alpha": 0.01}, lambda x, alpha: pw.where(x >= 0, x, x * alpha)),
    "HardSigmoid": ({"alpha": 0.2, "beta": 0.5}, lambda x, alpha, beta: pw.clamp(x * alpha + beta, 0.0, 1.0)),
    "Elu": ({"alpha": 1.0}, lambda x, alpha: pw.where(x < 0, (pw.exp(x) - 1.0) * alpha, x)),
    "Selu": ({"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
             lambda x, alpha, gamma: pw.where(x <= 0, (pw.exp(x) - 1.0) * alpha, x) * gamma),
    "Celu": ({"alpha": 1.0}, lambda x, alpha: pw.maximum(x, 0.0)
             + pw.minimum((pw.exp(x / alpha) - 1.0) * alpha, 0.0)),
    "ThresholdedRelu": ({"alpha": 1.0}, lambda x, alpha: pw.where(x > alpha, x, 0.0)),
    "Shrink": ({"bias": 0.0, "lambd": 0.5}, lambda x, bias, lambd: pw.cast(
        pw.where(x < -lambd, x + bias, pw.where(x > lambd, x - bias, 0)), x.dtype)),
    "Swish": ({"alpha": 1.0}, lambda x, alpha: x * pw.sigmoid(x * alpha)),
    "IsInf": ({"detect_negative": 1, "detect_positive": 1}, lambda x, detect_negative, detect_positive:
              pw.where(x > 0, x == math.inf if detect_positive else False,
                       x == -math.inf if detect_negative else False)),
}


@op("Mod")
def mod(imp: Importer, node: onnx.NodeProto) -> None:
    """fmod=0: the remainder with the divisor's sign (Python's, numpy's); fmod=1: the dividend's (C's)."""
    fmod = int(attribute(node, "fmod", 0))
    elementwise(imp, node, _fmod if fmod else (lambda x, y: x % y), [imp.value(node, 0), imp.value(node, 1)])


@op(*_BINARY)
def binary(imp: Importer, node: onnx.NodeProto) -> None:
    elementwise(imp, node, _BINARY[node.op_type], [imp.value(node, 0), imp.value(node, 1)])


_NARY = {"Sum": lambda a, b: a + b, "Max": pw.maximum, "Min": pw.minimum, "Mean": lambda a, b: a + b}


@op(*_NARY)
def nary(imp: Importer, node: onnx.NodeProto) -> None:
    """Sum, Mean, Max and Min of one or more inputs, broadcast together."""
    inputs = [imp.value(node, k) for k in range(len(node.input))]
    combine = _NARY[node.op_type]

    def fn(*xs):
        total = xs[0]
        for x in xs[1:]:
            total = combine(total, x)
        return total / float(len(xs)) if node.op_type == "Mean" else total
    elementwise(imp, node, fn, inputs)


@op(*_UNARY)
def unary(imp: Importer, node: onnx.NodeProto) -> None:
    elementwise(imp, node, _UNARY[node.op_type], [imp.value(node, 0)])


@op(*_ACTIVATIONS)
def activation(imp: Importer, node: onnx.NodeProto) -> None:
    defaults, fn = _ACTIVATIONS[node.op_type]
    given = {name: attribute(node, name, default) for name, default in defaults.items()}
    elementwise(imp, node, lambda x: fn(x, **given), [imp.value(node, 0)])


@op("BitShift")
def bit_shift(imp: Importer, node: onnx.NodeProto) -> None:
    """x << y or x >> y as products and floor quotients by 2**y, integers wrapping; a shift by a
    negative amount or by the width or more gives 0 (left) or the sign (right), as opset 28 says."""
    direction = text_attribute(node, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        refuse(node, "direction", direction, "LEFT or RIGHT")

    def fn(x, y):
        bits = np.dtype(x.dtype).itemsize * 8
        signed = np.dtype(x.dtype).kind == "i"
        fill = pw.cast(pw.where(x < 0, -1, 0), x.dtype) if signed and direction == "RIGHT" else pw.cast(0, x.dtype)
        limit = bits - 1 if signed and direction == "RIGHT" else bits  # (2**(bits-1) is no signed number)
        power = pw.cast(pw.cast(pw.pow(2.0, pw.cast(pw.clamp(y, 0, bits - 1), "float64")), "uint64"), x.dtype)
        shifted = x * power if direction == "LEFT" else x // power
        return pw.where((y >= 0) & (y < limit), shifted, fill)
    elementwise(imp, node, fn, [imp.value(node, 0), imp.value(node, 1)])


@op("Gelu")
def gelu(imp: Importer, node: onnx.NodeProto) -> None:
    approximate = text_attribute(node, "approximate", "none")
    if approximate == "none":
        def fn(x):
            return x * 0.5 * (pw.erf(x * math.sqrt(0.5)) + 1.0)
    elif approximate == "tanh":
        def fn(x):
            return x * 0.5 * (pw.tanh((x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)) + 1.0)
    else:
        refuse(node, "approximate", approximate, "none or tanh")
    elementwise(imp, node, fn, [imp.value(node, 0)])


@op("HardSwish")
def hard_swish(imp: Importer, node: onnx.NodeProto) -> None:
    elementwise(imp, node, lambda x: x * pw.clamp(x / 6.0 + 0.5, 0.0, 1.0), [imp.value(node, 0)])


@op("Clip")
def clip(imp: Importer, node: onnx.NodeProto) -> None:
    """Bounds known at import are immediates in x's type (ReLU6's 0 and 6); others are read as 0-d
    values at run time."""
    x = imp.value(node, 0)
    if imp.opset < 11:
        bounds = [attribute(node, "min"), attribute(node, "max")]
    else:
        bounds = [known(imp, node, k) for k in (1, 2)]
    inputs = [x] + [b for b in bounds if isinstance(b, Value)]

    def fn(v, *read):
        it = iter(read)
        lo, hi = (next(it) if isinstance(b, Value) else b for b in bounds)
        if lo is not None:
            v = pw.maximum(v, _scalar(lo, v))
        if hi is not None:
            v = pw.minimum(v, _scalar(hi, v))
        return v
    elementwise(imp, node, fn, inputs)


def known(imp: Importer, node: onnx.NodeProto, k: int) -> object:
    """Input k's value if the import knows it, else the input itself (None when absent)."""
    if len(node.input) <= k or not node.input[k]:
        return None
    name = node.input[k]
    return imp.arrays[name] if name in imp.arrays else imp.value(node, k)


def _scalar(v: object, like: Expr) -> object:
    """A bound for `like`: an expression as it is, a known value in like's type (a Python int for
    integers: weak, so int8 stays int8)."""
    if isinstance(v, Expr):
        return v
    v = np.asarray(v).reshape(-1)[0]
    return int(v) if np.dtype(like.dtype).kind in "iu" else float(v)


@op("Where")
def where(imp: Importer, node: onnx.NodeProto) -> None:
    elementwise(imp, node, pw.where, [imp.value(node, k) for k in range(3)])


@op("Cast", "CastLike")
def cast(imp: Importer, node: onnx.NodeProto) -> None:
    """To the `to` attribute's type (Cast) or to the second input's (CastLike)."""
    if node.op_type == "CastLike":
        to = imp.value(node, 1).dtype
    else:
        to = element_dtype(int(attribute(node, "to")), f"{describe(node)}: attribute to")
    elementwise(imp, node, lambda x: pw.cast(x, to), [imp.value(node, 0)])
