"""The import's memory budget: what a model makes at import is sized before it is made.

A file of a few hundred bytes can ask for a constant of any size (`ConstantOfShape [2^14, 2^15]`,
`Range(0, 2^40)`, `Expand`, `Tile`, an initializer whose dims claim terabytes).  Each constant the
importer reads, computes or folds is sized first, from its dims or from onnx's shape inference
of the one node with its small integer inputs' values (the shapes, counts and bounds that decide
the size), and one larger than the budget (`from_onnx(max_bytes=...)`, 4 GiB by default) is an
InputError naming the node, the shape and the size, before anything is allocated.

Folding (computing a node whose inputs are all constants, with onnx's reference evaluator) is
timed the same way, before it runs: a `MatMul` of two constant 8192 x 8192 matrices is 5.5e11
multiply-adds, a `Loop` with a constant trip count of 2^40 never ends.  `fold_seconds` estimates a
node's time from its inputs' shapes at rates the evaluator beats on any machine we meet (numpy's
BLAS for contractions, its Python for a loop body's iterations), and one above
`from_onnx(max_fold_seconds=...)` (10 s by default) is an InputError naming the node and the work,
except a `Loop` or `Scan`, which becomes a ptowsp scan instead (onnx_control.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ptowsp.errors import InputError

DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_MAX_FOLD_SECONDS = 10.0
# what the estimate assumes the reference evaluator does in a second, on one core: slow ends of the
# range (a folded MatMul of 2048 x 2048 measured 2.6e10 multiply-adds a second here; a Loop's body
# of a few nodes about 2e4 iterations a second)
_MACS_PER_SECOND = 1e10
_ELEMENTS_PER_SECOND = 1e8
_ITERATIONS_PER_SECOND = 1e4
_STEERING = 1024  # integer inputs up to this many elements go to shape inference with their values


def check_size(shape: Sequence[int], dtype: object, max_bytes: int, what: str) -> None:
    """InputError when a tensor of `shape` and `dtype` is larger than `max_bytes` (`what` names it)."""
    count = math.prod(int(d) for d in shape)
    size = count * np.dtype(dtype).itemsize
    if size > max_bytes:
        raise InputError(f"{what}: shape {list(shape)} of {np.dtype(dtype).name} is {size:,} bytes, above the import "
                         f"budget of {max_bytes:,} bytes (from_onnx(..., max_bytes=...) raises it)")


def check_fold(node: onnx.NodeProto, arrays: Mapping[str, np.ndarray], opset: int, max_bytes: int,
               what: str) -> None:
    """Size a node's outputs before it is folded (computed at import): onnx's shape inference of the
    node alone, given the values of its small integer inputs; an output it cannot size is not checked."""
    names = [n for n in node.input if n]
    steering = [n for n in names if arrays[n].dtype.kind in "iu" and arrays[n].size <= _STEERING]
    graph = onnx.helper.make_graph(
        [node], "size",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(arrays[n].dtype),
                                            arrays[n].shape) for n in names if n not in steering],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o],
        [onnx.numpy_helper.from_array(arrays[n], n) for n in steering])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference refusing the node: the fold itself will say what is wrong
        return
    for out in inferred.graph.output:
        t = out.type.tensor_type
        if not t.HasField("shape") or t.elem_type == onnx.TensorProto.UNDEFINED:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if None not in dims:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            check_size(dims, dtype, max_bytes, f"{what}: output {out.name!r}")


def _shape(arrays: Mapping[str, np.ndarray], node: onnx.NodeProto, k: int) -> tuple[int, ...]:
    return tuple(arrays[node.input[k]].shape) if len(node.input) > k and node.input[k] else ()


def fold_seconds(node: onnx.NodeProto, arrays: Mapping[str, np.ndarray]) -> tuple[float, str]:
    """(estimated seconds to fold `node` over the constant `arrays`, the work it stands for, in words)."""
    op = node.op_type
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a, b = _shape(arrays, node, 0), _shape(arrays, node, 3 if op == "QLinearMatMul" else 1)
        if a and b:
            try:
                batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))
            except ValueError:  # the evaluator will say what is wrong
                batch = 1
            macs = batch * (a[-2] if len(a) > 1 else 1) * a[-1] * (b[-1] if len(b) > 1 else 1)
            return macs / _MACS_PER_SECOND, f"{macs:,} multiply-adds"
    if op == "Gemm":
        a, b = _shape(arrays, node, 0), _shape(arrays, node, 1)
        if len(a) == 2 and len(b) == 2:
            transposed = any(att.name == "transA" and att.i for att in node.attribute)
            macs = math.prod(a) * math.prod(b) // max(1, a[0] if transposed else a[1])
            return macs / _MACS_PER_SECOND, f"{macs:,} multiply-adds"
    if op in ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose"):
        x, w = _shape(arrays, node, 0), _shape(arrays, node, 3 if op == "QLinearConv" else 1)
        if len(x) >= 3 and len(w) >= 3:
            macs = x[0] * math.prod(x[2:]) * math.prod(w)  # at most every input pixel meets every weight
            return macs / _MACS_PER_SECOND, f"{macs:,} multiply-adds"
    if op in ("Loop", "Scan"):
        if op == "Loop":
            if not (len(node.input) > 0 and node.input[0] and arrays[node.input[0]].size == 1):
                return math.inf, "a loop whose trip count is not a constant"
            trips = int(arrays[node.input[0]].reshape(-1)[0])
        else:
            scanned = [_shape(arrays, node, k) for k in range(len(node.input)) if _shape(arrays, node, k)]
            trips = max((s[0] for s in scanned), default=0)
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        steps = max(1, len(body.node)) if body is not None else 1
        return max(0, trips) * steps / _ITERATIONS_PER_SECOND, f"{max(0, trips):,} iterations of a {steps}-node body"
    elements = sum(arrays[n].size for n in node.input if n)
    return elements / _ELEMENTS_PER_SECOND, f"{elements:,} input elements"


def check_fold_time(node: onnx.NodeProto, arrays: Mapping[str, np.ndarray], max_seconds: float, what: str) -> None:
    """InputError when folding `node` would take longer than `max_seconds` (fold_seconds' estimate)."""
    seconds, work = fold_seconds(node, arrays)
    if seconds > max_seconds:
        estimate = "with no bound" if math.isinf(seconds) else f"about {seconds:.3g} s"
        raise InputError(f"{what}: folding it over its constant inputs ({work}) would take {estimate}, above the "
                         f"import's folding budget of {max_seconds:g} s (from_onnx(..., max_fold_seconds=...) "
                         "raises it)")


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_FOLD_SECONDS", "check_fold", "check_fold_time", "check_size",
           "fold_seconds"]
