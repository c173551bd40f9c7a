"""ONNX's quantized operators, summed in integers as onnxruntime sums them.

Two formats.  QDQ (what onnxruntime's `quantize_static` writes): float operators between
`DequantizeLinear` and `QuantizeLinear`.  A Conv or MatMul whose input and weights come from
`DequantizeLinear` of int8 values, with constant scales and zero weight zero points (the symmetric
weights every quantizer writes), is imported as the integer contraction onnxruntime runs for it:

    acc = sum(int32(xq) * int32(wq)) - xzp * sum(wq),   y = acc * (xs * ws[o]) + bias

int8 x int8 in int32 is ptowsp's `gemm_i8` (VNNI where present), and the dequantized float input
is never made (Importer.defer).  Any other Conv or MatMul over dequantized values reads them as
floats: the same result, summed in float32.

QOperator: `QLinearConv`, `QLinearMatMul` (the same sums, then requantized: round half to even,
saturated), `ConvInteger` and `MatMulInteger` (the int32 sums).  Per-tensor and per-axis scales and
zero points; blocked quantization (`block_size`) and float8 types are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import axis_of, conv, conv_of, matmul, matmul_of, op, refuse
from ptowsp.te import Expr

_INTEGERS = ("int8", "uint8", "int16", "uint16", "int32")


def _per_axis(v: Value, idx: Sequence[Expr], axis: int) -> Expr:
    """A scale's or zero point's element for output index `idx`: one for all, or one per index on `axis`."""
    return v.at([0] * len(v.shape)) if math.prod(v.shape) == 1 else v.at([idx[axis]])


def _constant(imp: Importer, name: str, array: np.ndarray) -> Value:
    imp.constant(name, array)
    return imp.lookup(name)


def _quantization_axis(node: onnx.NodeProto, rank: int, scale: Value) -> int:
    """The axis a per-axis scale runs along (unused, and unchecked, for one scale)."""
    if int(attribute(node, "block_size", 0)):
        refuse(node, "block_size", attribute(node, "block_size"), "per-tensor or per-axis quantization only")
    return 0 if math.prod(scale.shape) == 1 else axis_of(node, int(attribute(node, "axis", 1)), max(rank, 1))


@op("DequantizeLinear")
def dequantize_linear(imp: Importer, node: onnx.NodeProto) -> None:
    """(x - zero point) * scale, made only if something reads it as a float (see the module docstring)."""
    def make() -> Value:
        x, scale, zero = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
        if x.dtype not in _INTEGERS:
            raise WorkloadError(f"{describe(node)}: dequantizing {x.dtype}; ptowsp takes {', '.join(_INTEGERS)}")
        axis = _quantization_axis(node, len(x.shape), scale)
        to = scale.dtype

        def body(*idx):
            value = pw.cast(x.at(idx), to)
            if zero is not None:
                value = value - pw.cast(_per_axis(zero, idx, axis), to)
            return value * _per_axis(scale, idx, axis)
        return imp.compute(node, x.shape, body)
    imp.defer(node.output[0], make)


@op("QuantizeLinear")
def quantize_linear(imp: Importer, node: onnx.NodeProto) -> None:
    x, scale, zero = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
    axis = _quantization_axis(node, len(x.shape), scale)
    dtype = zero.dtype if zero is not None else _output_dtype(node)
    imp.compute(node, x.shape, lambda *idx: _requantize(pw.cast(x.at(idx), "float32") /
                                                        pw.cast(_per_axis(scale, idx, axis), "float32"),
                                                        None if zero is None else _per_axis(zero, idx, axis), dtype))


def _output_dtype(node: onnx.NodeProto) -> str:
    code = int(attribute(node, "output_dtype", 0))
    if code == 0:
        return "uint8"
    name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)).name
    if name not in _INTEGERS:
        refuse(node, "output_dtype", name, f"one of {', '.join(_INTEGERS)}")
    return name


def _requantize(real: Expr, zero: Expr | None, dtype: str) -> Expr:
    """round(real) + zero point, saturated to dtype: ONNX's QuantizeLinear (ties to even)."""
    q = pw.round(real)
    if zero is not None:
        q = q + pw.cast(zero, "float32")
    return pw.cast(q, dtype)  # float -> integer saturates


# -- QDQ: Conv and MatMul over dequantized int8 --------------------------------------------------
def _dequantized(imp: Importer, name: str) -> tuple[onnx.NodeProto, np.ndarray, np.ndarray] | None:
    """The DequantizeLinear making `name`, its scale and zero point, when both are constants."""
    dq = imp.producers.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or int(attribute(dq, "block_size", 0)) \
            or dq.input[1] not in imp.arrays or len(dq.input) > 2 and dq.input[2] and dq.input[2] not in imp.arrays:
        return None
    scale = imp.arrays[dq.input[1]].astype(np.float32)
    zero = imp.arrays[dq.input[2]] if len(dq.input) > 2 and dq.input[2] else np.zeros((), np.int8)
    return dq, scale, zero


def _int8_operands(imp: Importer, node: onnx.NodeProto):
    """(xq, x scale, x zero point, wq array, w scale, axis of w's scale) when node's input 0 is dequantized
    int8 with one scale and its input 1 dequantized constant int8 with zero zero points; else None."""
    x, w = _dequantized(imp, node.input[0]), _dequantized(imp, node.input[1])
    if x is None or w is None or w[0].input[0] not in imp.arrays or x[1].size != 1 or x[2].size != 1 \
            or np.any(w[2] != 0):
        return None
    wq = imp.arrays[w[0].input[0]]
    xq = imp.lookup(x[0].input[0])
    if xq is None or xq.dtype != "int8" or wq.dtype != np.int8:
        return None
    return xq, float(x[1].reshape(-1)[0]), int(x[2].reshape(-1)[0]), wq, w[1].reshape(-1), \
        int(attribute(w[0], "axis", 1))


def _int8_product(a: Expr, b: Expr) -> Expr:
    return pw.cast(a, "int32") * pw.cast(b, "int32")


@op("Conv")
def quantized_conv(imp: Importer, node: onnx.NodeProto) -> None:
    """Conv (replacing onnx_ops' handler, which it falls back to): in int32 over dequantized int8."""
    found = _int8_operands(imp, node)
    if found is None or found[4].size not in (1, found[3].shape[0]) or found[4].size > 1 and found[5] != 0:
        conv(imp, node)
        return
    xq, xs, xzp, wq, ws, _ = found
    weights = imp.lookup(imp.producers[node.input[1]].input[0])
    bias = imp.optional(node, 2)
    # every window reads xzp where it hangs over the edge: the zero-point term is the whole weight sum
    corrections = _constant(imp, f"{node.output[0]}_zero_point_sums",
                            (xzp * wq.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32))
    scales = _constant(imp, f"{node.output[0]}_scales", np.broadcast_to(xs * ws, (wq.shape[0],)).astype(np.float32))

    def finish(total, idx):
        o = idx[1]
        value = pw.cast(total - corrections.at([o]), "float32") * scales.at([o])
        return value if bias is None else value + bias.at([o])
    conv_of(imp, node, xq, weights, _int8_product, xzp, then=finish)


@op("MatMul")
def quantized_matmul(imp: Importer, node: onnx.NodeProto) -> None:
    """MatMul (replacing onnx_ops' handler, which it falls back to): in int32 over dequantized int8."""
    found = _int8_operands(imp, node)
    if found is None or found[3].ndim != 2 or found[4].size not in (1, found[3].shape[1]) \
            or found[4].size > 1 and found[5] != 1:
        matmul(imp, node)
        return
    xq, xs, xzp, wq, ws, _ = found
    weights = imp.lookup(imp.producers[node.input[1]].input[0])
    corrections = _constant(imp, f"{node.output[0]}_zero_point_sums",
                            (xzp * wq.astype(np.int64).sum(axis=0)).astype(np.int32))
    scales = _constant(imp, f"{node.output[0]}_scales", np.broadcast_to(xs * ws, (wq.shape[1],)).astype(np.float32))

    def finish(total, idx):
        n = idx[-1]
        return pw.cast(total - corrections.at([n]), "float32") * scales.at([n])
    matmul_of(imp, node, xq, weights, _int8_product, then=finish)


# -- QOperator ------------------------------------------------------------------------------------
def _scalar(imp: Importer, node: onnx.NodeProto, k: int, what: str) -> Value | None:
    """Input k, which must hold one value (a per-tensor zero point or scale) when it is given."""
    v = imp.optional(node, k)
    if v is not None and math.prod(v.shape) != 1:
        raise WorkloadError(f"{describe(node)}: input {k} ({what}) of shape {list(v.shape)}: only a per-tensor "
                            "value is supported here")
    return v


def _centred(element: Expr, zero: Value | None) -> Expr:
    value = pw.cast(element, "int32")
    return value if zero is None else value - pw.cast(zero.at([0] * len(zero.shape)), "int32")


def _centred_weights(imp: Importer, node: onnx.NodeProto, w: Value, k: int) -> Value:
    """The weights less their zero point (input k: per tensor or per output channel) in int32, a task of
    its own; the weights themselves where the zero point is absent or constant zeros (symmetric weights,
    as quantizers write them), so the sums stay int8 x int8 for `gemm_i8`."""
    zero = imp.optional(node, k)
    if zero is None or (node.input[k] in imp.arrays and not np.any(imp.arrays[node.input[k]])):
        return w
    if math.prod(zero.shape) not in (1, w.shape[0]):
        raise WorkloadError(f"{describe(node)}: weight zero point (input {k}) of shape {list(zero.shape)}: one value "
                            f"or one per output channel ({w.shape[0]}) is needed")
    return imp.compute(node, w.shape, lambda *i: pw.cast(w.at(i), "int32") - pw.cast(_per_axis(zero, i, 0), "int32"),
                       part="weights")


def _rescale(imp: Importer, node: onnx.NodeProto, first: int, channel_axis: int):
    """QLinear*'s finish: the int32 sum times x scale * w scale (per tensor or per output channel) / y scale,
    requantized to y's zero point and type (inputs first.. are x scale, and then w scale, y scale, y zero)."""
    x_scale = _scalar(imp, node, first, "x scale")
    w_scale, y_scale = imp.value(node, first + 3), _scalar(imp, node, first + 5, "y scale")
    y_zero = _scalar(imp, node, first + 6, "y zero point")
    dtype = y_zero.dtype if y_zero is not None else "uint8"
    bias = imp.optional(node, 8) if node.op_type == "QLinearConv" else None

    def finish(total, idx):
        acc = total if bias is None else total + bias.at([idx[channel_axis]])
        multiplier = x_scale.at([0] * len(x_scale.shape)) * _per_axis(w_scale, idx, channel_axis) / \
            y_scale.at([0] * len(y_scale.shape))
        return _requantize(pw.cast(acc, "float32") * multiplier,
                           None if y_zero is None else y_zero.at([0] * len(y_zero.shape)), dtype)
    return finish


@op("MatMulInteger", "QLinearMatMul")
def matmul_integer(imp: Importer, node: onnx.NodeProto) -> None:
    linear = node.op_type == "QLinearMatMul"
    b_at = 3 if linear else 1
    a_zero = _scalar(imp, node, 2, "a zero point")
    b_zero = _scalar(imp, node, 5 if linear else 3, "b zero point")
    a, b = imp.value(node, 0), imp.value(node, b_at)
    then = _rescale(imp, node, 1, -1) if linear else None
    matmul_of(imp, node, a, b, lambda x, y: _centred(x, a_zero) * _centred(y, b_zero), then=then)


@op("ConvInteger", "QLinearConv")
def conv_integer(imp: Importer, node: onnx.NodeProto) -> None:
    linear = node.op_type == "QLinearConv"
    x, w = imp.value(node, 0), imp.value(node, 3 if linear else 1)
    x_zero = _scalar(imp, node, 2, "x zero point")
    w = _centred_weights(imp, node, w, 5 if linear else 3)
    pad = 0 if x_zero is None else x_zero.at([0] * len(x_zero.shape))
    then = _rescale(imp, node, 1, 1) if linear else None
    conv_of(imp, node, x, w, lambda a, b: _centred(a, x_zero) * pw.cast(b, "int32"), pad, then=then)
