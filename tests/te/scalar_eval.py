"""A slow, obviously-correct scalar evaluator, written apart from ptowsp's numpy one.

It walks the expression once per output element with numpy scalars, so the
vectorised, chunked reference can be checked against it point by point.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ptowsp.te import Op

_UNARY = {
    Op.NEG: lambda x: -x, Op.ABS: abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: x.dtype.type(1) / np.sqrt(x), Op.TANH: np.tanh,
    Op.SIGMOID: lambda x: x.dtype.type(1) / (x.dtype.type(1) + np.exp(-x)),
    Op.ERF: lambda x: x.dtype.type(math.erf(float(x))), Op.FLOOR: np.floor, Op.CEIL: np.ceil,
    Op.NOT: lambda x: ~x,
}
_BINARY = {
    Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
    Op.DIV: lambda a, b: a / b, Op.FLOORDIV: lambda a, b: a // b, Op.MOD: lambda a, b: a % b,
    Op.POW: lambda a, b: a ** b, Op.MAX: np.maximum, Op.MIN: np.minimum,
    Op.AND: lambda a, b: a & b, Op.OR: lambda a, b: a | b,
    Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
    Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
}
_ACCUMULATE = {"float16": "float32", "int32": "int64"}


def scalar_eval(e, env: dict[str, int], arrays: dict[str, np.ndarray]):
    """Value of e at one point (env: loop name -> value) as a numpy scalar of e.dtype."""
    kind = np.dtype(e.dtype).type
    if e.op is Op.CONST:
        return kind(e.arg)
    if e.op in (Op.VAR, Op.RVAR):
        return np.int64(env[e.arg[0]])
    if e.op is Op.LOAD:
        array = arrays[e.arg.name]
        index = tuple(int(scalar_eval(i, env, arrays)) for i in e.src)
        for dim, (i, n) in enumerate(zip(index, array.shape)):
            if not 0 <= i < n:
                raise AssertionError(f"{e} reads index {i} of dimension {dim} (size {n}) at {env}")
        return kind(array[index])
    if e.op is Op.WHERE:
        cond = scalar_eval(e.src[0], env, arrays)
        return scalar_eval(e.src[1] if cond else e.src[2], env, arrays)
    if e.op is Op.CAST:
        return kind(scalar_eval(e.src[0], env, arrays))
    if e.op is Op.REDUCE:
        body, *axes = e.src
        acc_type = np.dtype(_ACCUMULATE.get(e.dtype, e.dtype) if e.arg == "sum" else e.dtype).type
        total = None
        for values in itertools.product(*(range(a.arg[1]) for a in axes)):
            point = dict(env, **{a.arg[0]: v for a, v in zip(axes, values)})
            x = acc_type(scalar_eval(body, point, arrays))
            if total is None:
                total = x
            elif e.arg == "sum":
                total = acc_type(total + x)
            else:
                total = (np.maximum if e.arg == "max" else np.minimum)(total, x)
        return kind(total)
    args = [scalar_eval(s, env, arrays) for s in e.src]
    fn = _UNARY.get(e.op) or _BINARY[e.op]
    return kind(fn(*args))


def scalar_compute(body, loop_names, shape, arrays) -> np.ndarray:
    out = np.empty(shape, dtype=body.dtype)
    with np.errstate(all="ignore"):
        for point in np.ndindex(*shape):
            out[point] = scalar_eval(body, dict(zip(loop_names, point)), arrays)
    return out
