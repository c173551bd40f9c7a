"""ONNX operators computed on the host, as opaque tasks (`wl.opaque`): what the language's expressions do
not say.  Det factorises each matrix (numpy's LAPACK LU, in float64, rounded to the input's type once);
BitCast reinterprets the bytes of each element (little-endian, as the standard says).  Opaque tasks are
never fused and run on the host on every target; their shapes must be static."""

from __future__ import annotations

import functools

import numpy as np
import onnx

from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe
from ptowsp.frontend.onnx_importer import Importer, Value, element_dtype
from ptowsp.frontend.onnx_ops import op


def _determinants(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)


def _reinterpreted(dtype: str, x: np.ndarray) -> np.ndarray:
    return np.array(x, order="C").view(np.dtype(dtype).newbyteorder("<")).astype(dtype)


def _on_host(imp: Importer, node: onnx.NodeProto, x: Value, fn, shape: tuple[int, ...], dtype: str) -> None:
    if not all(isinstance(d, int) for d in x.shape):
        raise WorkloadError(f"{describe(node)}: an input of symbolic shape {x.shape}; computed on the host, "
                            f"{node.op_type} needs static shapes (bind them with shapes=)")
    name = imp.task_name(node)
    tensor = imp.wl.opaque(name, fn, inputs=[x.tensor], outputs=[(name, shape, dtype)])
    imp.values[node.output[0]] = Value(tensor, shape)


@op("Det")
def det(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise WorkloadError(f"{describe(node)}: input of shape {x.shape}; Det takes [..., M, M]")
    _on_host(imp, node, x, _determinants, tuple(x.shape[:-2]), x.dtype)


@op("BitCast")
def bitcast(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    to = element_dtype(int(attribute(node, "to")), f"{describe(node)}: attribute to")
    if np.dtype(to).itemsize != np.dtype(x.dtype).itemsize:
        raise WorkloadError(f"{describe(node)}: {x.dtype} to {to}: BitCast needs two types of one bit width")
    _on_host(imp, node, x, functools.partial(_reinterpreted, to), tuple(x.shape), to)
