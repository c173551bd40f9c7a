"""The import's memory budget: what a model makes at import is sized before it is made.

A file of a few hundred bytes can ask for a constant of any size (`ConstantOfShape [2^14, 2^15]`,
`Range(0, 2^40)`, `Expand`, `Tile`, an initializer whose dims claim terabytes).  Each constant the
importer reads, computes or folds is sized first, from its dims or from onnx's shape inference
of the one node with its small integer inputs' values (the shapes, counts and bounds that decide
the size), and one larger than the budget (`from_onnx(max_bytes=...)`, 4 GiB by default) is an
InputError naming the node, the shape and the size, before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ptowsp.errors import InputError

DEFAULT_MAX_BYTES = 4 << 30
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


__all__ = ["DEFAULT_MAX_BYTES", "check_fold", "check_size"]
