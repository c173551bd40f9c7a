"""ONNX operators that write elements by index: ScatterElements (and its older name Scatter) and ScatterND.

ptowsp computes an output element from what it reads, so a scatter is written from the output's side:
element i of the result looks at every update whose index names i (a reduction over the updates), and
takes the update (reduction "none"), or combines the matched updates with the data's own element
("add", "mul", "max", "min").  That is a pass over the updates per output element: the standard's
cost for a small update set (the case of these operators in models: a KV cache's new row, a mask),
not a memory-speed scatter.  Indices are read at run time; negative ones count from the end.  With
reduction "none" the standard leaves duplicate indices undefined; here their updates are summed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import axis_of, highest, lowest, op, refuse
from ptowsp.frontend.onnx_reductions import product
from ptowsp.te import Expr

def _index(k: Expr, n: int) -> Expr:
    """An index read from a tensor, negative ones counted from the end."""
    k = pw.cast(k, "int64")
    return pw.where(k < 0, k + n, k)


def _combine(node: onnx.NodeProto, data: Value, element: Expr, match: Expr, update: Expr,
             axes: Sequence[Expr]) -> Expr:
    """The output element: `element` of the data with the updates where `match` holds, over `axes`."""
    how = text_attribute(node, "reduction", "none")
    zero = pw.cast(0, data.dtype)
    if how == "none":
        hits = pw.sum(pw.where(match, 1, 0), axes)
        return pw.where(hits > 0, pw.sum(pw.where(match, update, zero), axes), element)
    if how == "add":
        return element + pw.sum(pw.where(match, update, zero), axes)
    if how == "mul":
        return element * product(pw.where(match, update, pw.cast(1, data.dtype)), axes)
    if how == "max":
        return pw.maximum(element, pw.max(pw.where(match, update, pw.cast(lowest(data.dtype), data.dtype)), axes))
    if how == "min":
        return pw.minimum(element, pw.min(pw.where(match, update, pw.cast(highest(data.dtype), data.dtype)), axes))
    refuse(node, "reduction", how, "none, add, mul, max or min")
    raise AssertionError  # (refuse raises)


def _values(imp: Importer, node: onnx.NodeProto) -> tuple[Value, Value, Value]:
    data, indices, updates = imp.value(node, 0), imp.value(node, 1), imp.value(node, 2)
    if np.dtype(indices.dtype).kind not in "iu":
        raise WorkloadError(f"{describe(node)}: indices of dtype {indices.dtype}; an integer type is needed")
    if updates.dtype != data.dtype:
        raise WorkloadError(f"{describe(node)}: updates of dtype {updates.dtype} into data of {data.dtype}")
    if not all(isinstance(d, int) for d in (*indices.shape, *updates.shape)):
        raise WorkloadError(f"{describe(node)}: indices and updates of symbolic shapes are not supported")
    return data, indices, updates


@op("ScatterElements", "Scatter")
def scatter_elements(imp: Importer, node: onnx.NodeProto) -> None:
    data, indices, updates = _values(imp, node)
    axis = axis_of(node, int(attribute(node, "axis", 0)), len(data.shape))
    if tuple(indices.shape) != tuple(updates.shape) or len(indices.shape) != len(data.shape):
        raise WorkloadError(f"{describe(node)}: indices {indices.shape} and updates {updates.shape} must have one "
                            f"shape, of the rank of data {data.shape}")
    k = pw.reduce_axis(indices.shape[axis], "k")

    def body(*idx):
        at = [k if d == axis else pw.minimum(i, indices.shape[d] - 1) for d, i in enumerate(idx)]
        match = _index(indices.at(at), data.shape[axis]) == idx[axis]
        for d, i in enumerate(idx):
            if d != axis and indices.shape[d] < data.shape[d]:
                match = match & (i < indices.shape[d])
        return _combine(node, data, data.at(idx), match, updates.at(at), (k,))
    imp.compute(node, data.shape, body)


@op("ScatterND")
def scatter_nd(imp: Importer, node: onnx.NodeProto) -> None:
    data, indices, updates = _values(imp, node)
    q, depth = len(indices.shape), indices.shape[-1]
    if depth > len(data.shape) or tuple(updates.shape) != (*indices.shape[:-1], *data.shape[depth:]):
        raise WorkloadError(f"{describe(node)}: updates {updates.shape} do not fit indices {indices.shape} into "
                            f"data {data.shape}")
    # one reduce axis per dimension of the index tuples' batch (one of extent 1 for a single tuple)
    each = [pw.reduce_axis(n, f"p{d}") for d, n in enumerate(indices.shape[:-1])] or [pw.reduce_axis(1, "p0")]
    batch = each if q > 1 else []

    def body(*idx):
        match = None
        for j in range(depth):
            equal = _index(indices.at([*batch, j]), data.shape[j]) == idx[j]
            match = equal if match is None else match & equal
        return _combine(node, data, data.at(idx), match, updates.at([*batch, *idx[depth:]]), tuple(each))
    imp.compute(node, data.shape, body)


@op("TensorScatter")
def tensor_scatter(imp: Importer, node: onnx.NodeProto) -> None:
    """A KV cache's update: `update`'s rows written into the cache along `axis` from each batch
    element's write index (0 without `write_indices`; modulo the cache's length in "circular" mode)."""
    past, update = imp.value(node, 0), imp.value(node, 1)
    where_to = imp.optional(node, 2)
    axis = axis_of(node, int(attribute(node, "axis", -2)), len(past.shape))
    mode = text_attribute(node, "mode", "linear")
    if mode not in ("linear", "circular"):
        refuse(node, "mode", mode, "linear or circular")
    if axis == 0 or update.dtype != past.dtype or len(update.shape) != len(past.shape) or any(
            u != p for d, (u, p) in enumerate(zip(update.shape, past.shape, strict=True)) if d != axis):
        raise WorkloadError(f"{describe(node)}: update {update.shape} does not fit cache {past.shape} along axis "
                            f"{axis} (not the batch axis 0)")
    length, rows = past.shape[axis], update.shape[axis]

    def body(*idx):
        start = pw.cast(where_to.at([idx[0]]), "int64") if where_to is not None else 0
        offset = idx[axis] - start
        if mode == "circular":  # (a write index past the cache's end wraps too)
            offset = (offset % length + length) % length
        hit = (offset >= 0) & (offset < rows)
        at = list(idx)
        at[axis] = pw.clamp(offset, 0, rows - 1)
        return pw.where(hit, update.at(at), past.at(idx))
    imp.compute(node, past.shape, body)
