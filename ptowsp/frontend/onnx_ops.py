"""The ONNX operators `from_onnx` imports: each builds the node's tasks from ptowsp expressions.

Semantics follow the ONNX operator specs (opset 13+; `onnx.reference`
is the test oracle).  Attributes a handler does not cover are refused by
`refuse`, naming the node, the op and the attribute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_import import Importer, Value, attribute, describe
from ptowsp.frontend.onnx_sizes import broadcast, same
from ptowsp.te import Expr

OPS: dict[str, Callable[[Importer, onnx.NodeProto], None]] = {}


def op(*names: str):
    def register(fn):
        for name in names:
            OPS[name] = fn
        return fn
    return register


def refuse(node: onnx.NodeProto, name: str, value: object, expected: str) -> None:
    raise WorkloadError(f"{describe(node)}: attribute {name}={value!r} is not supported ({expected})")


def axis_of(node: onnx.NodeProto, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise WorkloadError(f"{describe(node)}: {what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


# -- elementwise ---------------------------------------------------------------------------------
def _elementwise(imp: Importer, node: onnx.NodeProto, fn: Callable[..., object], inputs: Sequence[Value]) -> Value:
    shape = broadcast(node, *(v.shape for v in inputs))
    return imp.compute(node, shape, lambda *idx: fn(*(v.broadcast_at(idx, shape) for v in inputs)))


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


def _power(a: Expr, b: Expr) -> Expr:
    """ONNX Pow: the result has the base's type (computed in floating point, then converted)."""
    p = pw.pow(a, b)
    return p if p.dtype == a.dtype else pw.cast(p, a.dtype)


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "Div": _divide, "Pow": _power, "Max": pw.maximum, "Min": pw.minimum}
_UNARY = {"Relu": lambda x: pw.maximum(x, 0.0), "Sigmoid": pw.sigmoid, "Tanh": pw.tanh, "Exp": pw.exp,
          "Log": pw.log, "Sqrt": pw.sqrt, "Neg": lambda x: -x, "Abs": pw.abs, "Erf": pw.erf,
          "Reciprocal": lambda x: 1.0 / x, "Floor": pw.floor, "Ceil": pw.ceil, "Round": pw.round}


# comparisons and logic (torch's exporter builds attention masks from them): bool results
_BINARY |= {"Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
            "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
            "And": lambda a, b: a & b, "Or": lambda a, b: a | b, "Xor": lambda a, b: a != b}
_UNARY |= {"Not": lambda x: ~x, "Sign": lambda x: pw.cast(pw.where(x > 0, 1, pw.where(x < 0, -1, 0)), x.dtype),
           "Softplus": lambda x: pw.maximum(x, 0.0) + pw.log(pw.exp(-pw.abs(x)) + 1.0)}


@op("Mod")
def mod(imp: Importer, node: onnx.NodeProto) -> None:
    """fmod=0: the remainder with the divisor's sign (Python's, numpy's); fmod=1: the dividend's (C's)."""
    fmod = int(attribute(node, "fmod", 0))
    _elementwise(imp, node, _fmod if fmod else (lambda x, y: x % y), [imp.value(node, 0), imp.value(node, 1)])


@op(*_BINARY)
def binary(imp: Importer, node: onnx.NodeProto) -> None:
    if node.op_type in ("Max", "Min") and len(node.input) != 2:
        raise WorkloadError(f"{describe(node)}: {node.op_type} of {len(node.input)} inputs; only 2 are supported")
    _elementwise(imp, node, _BINARY[node.op_type], [imp.value(node, 0), imp.value(node, 1)])


@op(*_UNARY)
def unary(imp: Importer, node: onnx.NodeProto) -> None:
    _elementwise(imp, node, _UNARY[node.op_type], [imp.value(node, 0)])


@op("LeakyRelu")
def leaky_relu(imp: Importer, node: onnx.NodeProto) -> None:
    alpha = float(attribute(node, "alpha", 0.01))
    _elementwise(imp, node, lambda x: pw.where(x >= 0, x, x * alpha), [imp.value(node, 0)])


@op("HardSigmoid")
def hard_sigmoid(imp: Importer, node: onnx.NodeProto) -> None:
    alpha, beta = float(attribute(node, "alpha", 0.2)), float(attribute(node, "beta", 0.5))
    _elementwise(imp, node, lambda x: pw.clamp(x * alpha + beta, 0.0, 1.0), [imp.value(node, 0)])


@op("Gelu")
def gelu(imp: Importer, node: onnx.NodeProto) -> None:
    approximate = attribute(node, "approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate == "none":
        def fn(x):
            return x * 0.5 * (pw.erf(x * math.sqrt(0.5)) + 1.0)
    elif approximate == "tanh":
        def fn(x):
            return x * 0.5 * (pw.tanh((x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)) + 1.0)
    else:
        refuse(node, "approximate", approximate, "none or tanh")
    _elementwise(imp, node, fn, [imp.value(node, 0)])


@op("HardSwish")
def hard_swish(imp: Importer, node: onnx.NodeProto) -> None:
    _elementwise(imp, node, lambda x: x * pw.clamp(x / 6.0 + 0.5, 0.0, 1.0), [imp.value(node, 0)])


@op("Clip")
def clip(imp: Importer, node: onnx.NodeProto) -> None:
    lo, hi = imp.array(node, 1, "min"), imp.array(node, 2, "max")
    if imp.opset < 11:
        lo, hi = attribute(node, "min"), attribute(node, "max")

    def fn(x):
        if lo is not None:
            x = pw.maximum(x, float(np.asarray(lo)))
        if hi is not None:
            x = pw.minimum(x, float(np.asarray(hi)))
        return x
    _elementwise(imp, node, fn, [imp.value(node, 0)])


@op("Where")
def where(imp: Importer, node: onnx.NodeProto) -> None:
    _elementwise(imp, node, pw.where, [imp.value(node, k) for k in range(3)])


@op("Cast")
def cast(imp: Importer, node: onnx.NodeProto) -> None:
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(attribute(node, "to"))).name
    _elementwise(imp, node, lambda x: pw.cast(x, to), [imp.value(node, 0)])


@op("Identity")
def identity(imp: Importer, node: onnx.NodeProto) -> None:
    imp.values[node.output[0]] = imp.value(node, 0)  # (over a constant it was folded before it got here)


@op("Constant")
def constant(imp: Importer, node: onnx.NodeProto) -> None:
    value = attribute(node, "value")
    if value is None:
        others = [a.name for a in node.attribute]
        refuse(node, others[0] if others else "value", "...", "only a tensor `value`")
    imp.constant(node.output[0], imp.tensor_array(value, describe(node)))


# -- contractions --------------------------------------------------------------------------------
@op("MatMul")
def matmul(imp: Importer, node: onnx.NodeProto) -> None:
    matmul_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b)


def matmul_of(imp: Importer, node: onnx.NodeProto, a: Value, b: Value, term: Callable[[Expr, Expr], Expr],
              then: Callable[[Expr, Sequence[Expr]], Expr] | None = None) -> Value:
    """numpy's matmul of a and b, summing `term(a element, b element)`; `then(sum, output index)` finishes
    each element (the quantized operators' rescaling), else the sum is the result."""
    if len(a.shape) < 1 or len(b.shape) < 1:
        raise WorkloadError(f"{describe(node)}: MatMul of a scalar")
    a_shape = a.shape if len(a.shape) > 1 else (1, *a.shape)
    b_shape = b.shape if len(b.shape) > 1 else (*b.shape, 1)
    if not same(a_shape[-1], b_shape[-2]):
        raise WorkloadError(f"{describe(node)}: shapes {a.shape} and {b.shape} do not multiply")
    batch = broadcast(node, a_shape[:-2], b_shape[:-2])
    out = batch + (a_shape[-2], b_shape[-1])
    k = pw.reduce_axis(a_shape[-1], "k")
    finish = then or (lambda total, idx: total)

    def body(*idx):
        *bi, m, n = idx
        left = a.broadcast_at(bi + [m, k], batch + a_shape[-2:]) if len(a.shape) > 1 else a.at([k])
        right = b.broadcast_at(bi + [k, n], batch + b_shape[-2:]) if len(b.shape) > 1 else b.at([k])
        return finish(pw.sum(term(left, right), k), idx)

    full = imp.compute(node, out, body, part="" if len(a.shape) > 1 and len(b.shape) > 1 else "full")
    if full.shape != out or len(a.shape) > 1 and len(b.shape) > 1:
        return full
    keep = [d for d in range(len(out)) if not (d == len(out) - 2 and len(a.shape) == 1
                                                or d == len(out) - 1 and len(b.shape) == 1)]
    shape = tuple(out[d] for d in keep)

    def squeeze(*idx):
        full_idx = [0] * len(out)
        for d, i in zip(keep, idx, strict=True):
            full_idx[d] = i
        return full.at(full_idx)
    return imp.compute(node, shape, squeeze)


@op("Gemm")
def gemm(imp: Importer, node: onnx.NodeProto) -> None:
    a, b, c = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
    alpha, beta = float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0))
    ta, tb = int(attribute(node, "transA", 0)), int(attribute(node, "transB", 0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise WorkloadError(f"{describe(node)}: Gemm needs 2-D inputs, got {a.shape} and {b.shape}")
    m, kk = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if kk != kb:
        raise WorkloadError(f"{describe(node)}: shapes {a.shape} (transA={ta}) and {b.shape} (transB={tb}) "
                            "do not multiply")
    k = pw.reduce_axis(kk, "k")

    def body(i, j):
        product = pw.sum((a.at([k, i]) if ta else a.at([i, k])) * (b.at([j, k]) if tb else b.at([k, j])), k)
        value = product * alpha if alpha != 1.0 else product
        if c is not None and beta != 0.0:
            bias = c.broadcast_at([i, j], (m, n))
            value = value + (bias * beta if beta != 1.0 else bias)
        return value
    imp.compute(node, (m, n), body)


def _pads(node: onnx.NodeProto, spatial: int) -> list[int]:
    auto = attribute(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID"):
        refuse(node, "auto_pad", auto, "NOTSET or VALID; give explicit pads")
    pads = list(attribute(node, "pads", [0] * 2 * spatial))
    return [0] * 2 * spatial if auto == "VALID" else pads


def _window(node: onnx.NodeProto, x: Value, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int],
                                                                              list[int]]:
    """(strides, pads, dilations, output sizes) of a 2-D sliding window over x (N, C, H, W)."""
    if len(x.shape) != 4:
        raise WorkloadError(f"{describe(node)}: only 2-D (N, C, H, W) inputs are supported, got shape {x.shape}")
    strides = list(attribute(node, "strides", [1, 1]))
    dilations = list(attribute(node, "dilations", [1, 1]))
    pads = _pads(node, 2)
    for name, values, count, least in (("strides", strides, 2, 1), ("dilations", dilations, 2, 1),
                                       ("pads", pads, 4, 0), ("kernel_shape", list(kernel), 2, 1)):
        if len(values) != count or any(v < least for v in values):
            refuse(node, name, values, f"{count} integers of at least {least} (a 2-D window)")
    ceil = bool(int(attribute(node, "ceil_mode", 0)))  # pools: the last window may hang over the end
    spans = [x.shape[2 + d] + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1 for d in range(2)]
    out = [-(-spans[d] // strides[d]) + 1 if ceil else spans[d] // strides[d] + 1 for d in range(2)]
    # (ONNX and torch: a last window that would start past the input and its leading pad is dropped)
    out = [o - 1 if ceil and (o - 1) * strides[d] >= x.shape[2 + d] + pads[d] else o for d, o in enumerate(out)]
    if any(isinstance(o, int) and o < 1 for o in out):  # (a symbolic image size: checked when bound)
        raise WorkloadError(f"{describe(node)}: the window {list(kernel)} leaves no output on input {x.shape}")
    return strides, pads, dilations, out


def _lowest(dtype: str) -> float | int:
    """The identity of max in `dtype`: padding that never wins and keeps the type."""
    return int(np.iinfo(dtype).min) if np.dtype(dtype).kind in "iu" else -math.inf


def _inside(pos: Sequence[object], size: Sequence[int]) -> object:
    return (pos[0] >= 0) & (pos[0] < size[0]) & (pos[1] >= 0) & (pos[1] < size[1])


@op("Conv")
def conv(imp: Importer, node: onnx.NodeProto) -> None:
    bias = imp.optional(node, 2)
    if bias is None:
        conv_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b, 0.0)
        return
    # the bias is a task of its own: the convolution stays the plain contraction the cpu's blocking pass
    # recognises (passes/blocking.py), and fusion makes the add its epilogue
    total = conv_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b, 0.0, part="conv")
    imp.compute(node, total.shape, lambda n, o, y, xx: total.at([n, o, y, xx]) + bias.at([o]))


def conv_of(imp: Importer, node: onnx.NodeProto, x: Value, w: Value, term: Callable[[Expr, Expr], Expr],
            pad: object, part: str = "", then: Callable[[Expr, Sequence[Expr]], Expr] | None = None) -> Value:
    """A 2-D convolution (the node's strides, pads, dilations and group) summing `term(x element, w
    element)`, with x's padding read as `pad`; `then(sum, output index)` finishes each element."""
    if len(w.shape) != 4:
        raise WorkloadError(f"{describe(node)}: only 2-D convolutions are supported, weight shape {w.shape}")
    group = int(attribute(node, "group", 1))
    out_ch, per_group, kh, kw = w.shape
    if not all(isinstance(d, int) for d in (x.shape[1], *w.shape)) or group < 1 \
            or x.shape[1] != per_group * group or out_ch % group:
        raise WorkloadError(f"{describe(node)}: input channels {x.shape[1]} do not match weight {w.shape} "
                            f"with group={group}")
    strides, pads, dil, (oh, ow) = _window(node, x, (kh, kw))
    c, r, s = pw.reduce_axis(per_group, "c"), pw.reduce_axis(kh, "r"), pw.reduce_axis(kw, "s")
    outs_per_group = out_ch // group
    size = x.shape[2:]
    finish = then or (lambda total, idx: total)

    def body(n, o, y, xx):
        pos = (y * strides[0] + r * dil[0] - pads[0], xx * strides[1] + s * dil[1] - pads[1])
        if per_group == 1:  # depthwise: one input channel per group, read as the output's own (no c axis)
            channel, k, axes = o if outs_per_group == 1 else o // outs_per_group, 0, (r, s)
        else:
            channel, k, axes = c if group == 1 else o // outs_per_group * per_group + c, c, (c, r, s)
        read = x.at([n, channel, *pos])
        if any(pads):
            read = pw.where(_inside(pos, size), read, pad)
        return finish(pw.sum(term(read, w.at([o, k, r, s])), axes), (n, o, y, xx))
    return imp.compute(node, (x.shape[0], out_ch, oh, ow), body, part=part)


# -- pooling and normalisation -------------------------------------------------------------------
@op("MaxPool", "AveragePool")
def pool(imp: Importer, node: onnx.NodeProto) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise WorkloadError(f"{describe(node)}: the Indices output is not supported")
    x = imp.value(node, 0)
    kernel = list(attribute(node, "kernel_shape"))
    if len(kernel) != 2:
        raise WorkloadError(f"{describe(node)}: only 2-D pooling is supported, kernel_shape {kernel}")
    strides, pads, dil, (oh, ow) = _window(node, x, kernel)
    if dil != [1, 1]:
        refuse(node, "dilations", dil, "only 1")
    r, s = pw.reduce_axis(kernel[0], "r"), pw.reduce_axis(kernel[1], "s")
    size = x.shape[2:]
    # how far the last window reaches past the input's end (ceil_mode=1 lets it hang over the end pad)
    over = [(o - 1) * strides[d] - pads[d] + kernel[d] - size[d] for d, o in enumerate((oh, ow))]
    ceil = bool(int(attribute(node, "ceil_mode", 0)))
    # over a symbolic image size only ceil_mode=1 can hang a window past the end (and past the end pad)
    past = [o > limit if isinstance(o, int) else ceil for o, limit in zip(over, (0, 0))]
    masked = any(pads) or any(past)
    if node.op_type == "MaxPool":
        def body(n, ch, y, xx):
            pos = (y * strides[0] + r - pads[0], xx * strides[1] + s - pads[1])
            read = x.at([n, ch, *pos])
            return pw.max(pw.where(_inside(pos, size), read, _lowest(x.dtype)) if masked else read, (r, s))
    else:
        include = int(attribute(node, "count_include_pad", 0))
        if any(o > pads[d + 2] if isinstance(o, int) else ceil for d, o in enumerate(over)):
            refuse(node, "ceil_mode", 1, "only where no window hangs over the end pad (the output size of ceil_mode=0)")

        def body(n, ch, y, xx):
            pos = (y * strides[0] + r - pads[0], xx * strides[1] + s - pads[1])
            read = x.at([n, ch, *pos])
            total = pw.sum(pw.where(_inside(pos, size), read, 0.0) if any(pads) else read, (r, s))
            if include or not any(pads):
                return total / float(kernel[0] * kernel[1])
            counts = [pw.minimum(start + k, limit) - pw.maximum(start, 0)
                      for start, k, limit in ((y * strides[0] - pads[0], kernel[0], size[0]),
                                              (xx * strides[1] - pads[1], kernel[1], size[1]))]
            return total / pw.cast(counts[0] * counts[1], x.dtype)
    imp.compute(node, (x.shape[0], x.shape[1], oh, ow), body)


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if len(x.shape) != 4:
        raise WorkloadError(f"{describe(node)}: only (N, C, H, W) inputs are supported, got {x.shape}")
    r, s = pw.reduce_axis(x.shape[2], "r"), pw.reduce_axis(x.shape[3], "s")
    area = float(x.shape[2] * x.shape[3])
    if node.op_type == "GlobalAveragePool":
        imp.compute(node, (*x.shape[:2], 1, 1), lambda n, ch, a, b: pw.sum(x.at([n, ch, r, s]), (r, s)) / area)
    else:
        imp.compute(node, (*x.shape[:2], 1, 1), lambda n, ch, a, b: pw.max(x.at([n, ch, r, s]), (r, s)))


@op("BatchNormalization")
def batch_norm(imp: Importer, node: onnx.NodeProto) -> None:
    """Inference form, folded at import: y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = B - mean * a."""
    if int(attribute(node, "training_mode", 0)) or len([o for o in node.output if o]) > 1:
        refuse(node, "training_mode", 1, "only inference: one output")
    x = imp.value(node, 0)
    scale, bias, mean, var = (imp.array(node, k, what) for k, what in
                              ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")))
    eps = float(attribute(node, "epsilon", 1e-5))
    dtype = np.dtype(x.dtype)
    a = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(dtype)
    b = (bias - mean * a).astype(dtype)
    imp.constant(f"{node.name or 'bn'}_scale", a)
    imp.constant(f"{node.name or 'bn'}_shift", b)
    fa, fb = imp.lookup(f"{node.name or 'bn'}_scale"), imp.lookup(f"{node.name or 'bn'}_shift")
    if len(x.shape) < 2:
        raise WorkloadError(f"{describe(node)}: input of rank {len(x.shape)}; needs (N, C, ...)")
    imp.compute(node, x.shape, lambda *idx: x.at(idx) * fa.at([idx[1]]) + fb.at([idx[1]]))


@op("Softmax")
def softmax(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if imp.opset < 13:
        raise WorkloadError(f"{describe(node)}: Softmax before opset 13 (coerced to 2-D) is not supported")
    axis = axis_of(node, int(attribute(node, "axis", -1)), len(x.shape))
    j = pw.reduce_axis(x.shape[axis], "j")
    rows = x.shape[:axis] + x.shape[axis + 1:]

    def along(idx, at):
        return [*idx[:axis], at, *idx[axis:]]
    top = imp.compute(node, rows, lambda *idx: pw.max(x.at(along(idx, j)), j), part="max")
    total = imp.compute(node, rows, lambda *idx: pw.sum(pw.exp(x.at(along(idx, j)) - top.at(idx)), j), part="sum")

    def body(*idx):
        row = [*idx[:axis], *idx[axis + 1:]]
        return pw.exp(x.at(idx) - top.at(row)) / total.at(row)
    imp.compute(node, x.shape, body)


@op("ReduceMean", "ReduceSum", "ReduceMax")
def reduce(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    axes = attribute(node, "axes")
    if axes is None and len(node.input) > 1:
        axes = imp.array(node, 1, "axes")
    axes = sorted({axis_of(node, int(a), len(x.shape)) for a in (range(len(x.shape)) if axes is None else axes)})
    keep = int(attribute(node, "keepdims", 1))
    loops = {d: pw.reduce_axis(x.shape[d], f"r{d}") for d in axes}
    shape = tuple(1 if d in loops else n for d, n in enumerate(x.shape) if keep or d not in loops)
    count = float(math.prod(x.shape[d] for d in axes))
    combine = {"ReduceMean": pw.sum, "ReduceSum": pw.sum, "ReduceMax": pw.max}[node.op_type]

    def body(*idx):
        it = iter(idx)
        read = [loops[d] if d in loops else None for d in range(len(x.shape))]
        for d in range(len(x.shape)):
            if d in loops:
                if keep:
                    next(it)
            else:
                read[d] = next(it)
        total = combine(x.at(read), tuple(loops.values()))
        return total / count if node.op_type == "ReduceMean" else total
    imp.compute(node, shape, body)


@op("LayerNormalization")
def layer_norm(imp: Importer, node: onnx.NodeProto) -> None:
    if len([o for o in node.output if o]) > 1:
        raise WorkloadError(f"{describe(node)}: only the Y output is supported (not Mean or InvStdDev)")
    x, scale, bias = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
    axis = axis_of(node, int(attribute(node, "axis", -1)), len(x.shape))
    eps = float(attribute(node, "epsilon", 1e-5))
    inner = x.shape[axis:]
    loops = [pw.reduce_axis(n, f"r{d}") for d, n in enumerate(inner)]
    count = float(math.prod(inner))
    rows = x.shape[:axis]
    mean = imp.compute(node, rows, lambda *idx: pw.sum(x.at([*idx, *loops]), tuple(loops)) / count, part="mean")

    def variance(*idx):
        centred = x.at([*idx, *loops]) - mean.at(idx)
        return pw.sum(centred * centred, tuple(loops)) / count
    var = imp.compute(node, rows, variance, part="var")

    def body(*idx):
        row, col = idx[:axis], idx[axis:]
        value = (x.at(idx) - mean.at(row)) * pw.rsqrt(var.at(row) + eps) * scale.broadcast_at(col, inner)
        return value + bias.broadcast_at(col, inner) if bias is not None else value
    imp.compute(node, x.shape, body)
