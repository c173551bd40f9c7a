"""ONNX Resize: each resized axis a table of taps computed at import from the standard's own reference.

Resize is separable and, for a fixed output size, linear in its input: along each resized axis every
output element is a weighted sum of a few input elements (1 for nearest, 2 for linear, 4 for cubic,
more when antialiasing a downsample), whatever the coordinate transformation.  So the importer asks
onnx's reference evaluator to resize an identity matrix along that axis alone, with the node's own
attributes: the result is the axis' weight matrix, kept as its nonzero taps (`index[o, t]`,
`weight[o, t]`, constants).  The output is then

    Y[.., y, x] = sum over taps a, b of  wy[y, a] * wx[x, b] * X[.., iy[y, a], ix[x, b]]

with the reference's exact coordinates, rounding modes and cubic coefficients, and a position of
tf_crop_and_resize outside its region of interest reads `extrapolation_value`.  Scales, sizes and the
region must be known at import; keep_aspect_ratio_policy's common scale (an exact fraction) is used
per axis as the reference uses it, with the length the reference rounds it to.
"""

from __future__ import annotations

import fractions
import math

import numpy as np
import onnx
from onnx import helper as oh

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer
from ptowsp.frontend.onnx_ops import op, refuse

_AXIS_ATTRIBUTES = ("mode", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                    "extrapolation_value", "nearest_mode", "antialias")


@op("Resize", "Upsample")
def resize(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    rank = len(x.shape)
    if not all(isinstance(d, int) for d in x.shape):
        raise WorkloadError(f"{describe(node)}: resizing an input of symbolic shape {x.shape} is not supported")
    scales, sizes, roi = _targets(imp, node, rank)
    mode = text_attribute(node, "mode", "nearest")
    if np.dtype(x.dtype).kind != "f" and mode != "nearest":
        refuse(node, "mode", mode, f"nearest for an input of dtype {x.dtype}")
    taps = []  # per axis: None (unchanged) or (index constant, weight constant, outside constant or None)
    out = []
    for d in range(rank):
        matrix, outside = _axis_matrix(imp, node, x.shape[d], scales[d], None if sizes is None else sizes[d],
                                       (roi[d], roi[d + rank]) if roi is not None else None)
        out.append(matrix.shape[0])
        if matrix.shape == (x.shape[d], x.shape[d]) and np.array_equal(matrix, np.eye(x.shape[d])) and not outside.any():
            taps.append(None)
            continue
        taps.append(_taps(imp, node, d, matrix, outside, x.dtype))
    extrapolation = float(attribute(node, "extrapolation_value", 0.0))

    def body(*idx):
        axes = [pw.reduce_axis(t[0].shape[1], f"t{d}") if t is not None else None for d, t in enumerate(taps)]
        at, weight, outside = [], None, None
        for d, (i, t, a) in enumerate(zip(idx, taps, axes, strict=True)):
            if t is None:
                at.append(i)
                continue
            index, weights, out_mask = t
            at.append(index.at([i, a]))
            w = weights.at([i, a])
            weight = w if weight is None else weight * w
            if out_mask is not None:
                hit = out_mask.at([i]) != 0
                outside = hit if outside is None else outside | hit
        if weight is None:
            return x.at(at)
        read = x.at(at) if np.dtype(x.dtype).kind == "f" else pw.cast(x.at(at), "float32")
        total = pw.sum(read * weight, tuple(a for a in axes if a is not None))
        if np.dtype(x.dtype).kind != "f":  # nearest: one tap of weight 1, exact
            total = pw.cast(total, x.dtype)
        return total if outside is None else pw.where(outside, pw.cast(extrapolation, x.dtype), total)
    imp.compute(node, tuple(out), body)


def _targets(imp: Importer, node: onnx.NodeProto, rank: int):
    """(scales per axis, sizes per axis or None, roi or None), all known at import, over every axis."""
    if node.op_type == "Upsample" or imp.opset < 11:
        scales = imp.array(node, 1, "scales") if len(node.input) > 1 else attribute(node, "scales")
        return [float(s) for s in np.asarray(scales).reshape(-1)], None, None
    roi = imp.array(node, 1, "roi")
    scales = imp.array(node, 2, "scales")
    sizes = imp.array(node, 3, "sizes")
    axes = [int(a) % rank for a in attribute(node, "axes", range(rank))]
    full_scales, full_sizes = [1.0] * rank, None
    if sizes is not None and sizes.size:
        given = [int(s) for s in sizes.reshape(-1)]
        x = imp.value(node, 0)
        full_sizes = list(x.shape)
        policy = text_attribute(node, "keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, s in zip(axes, given, strict=True):
                full_sizes[a] = s
                full_scales[a] = s / x.shape[a]
        elif policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            common = pick(fractions.Fraction(s, x.shape[a]) for a, s in zip(axes, given, strict=True))
            for a in axes:
                full_scales[a] = common  # exact: _axis_matrix may need it as sizes (a Fraction)
                full_sizes[a] = int(float(common) * x.shape[a] + 0.5)  # the reference's round half up
        else:
            refuse(node, "keep_aspect_ratio_policy", policy, "stretch, not_larger or not_smaller")
        if policy == "stretch":
            full_scales = None  # the sizes say it all
    elif scales is not None and scales.size:
        for a, s in zip(axes, scales.reshape(-1), strict=True):
            full_scales[a] = float(s)
    else:
        raise WorkloadError(f"{describe(node)}: neither scales nor sizes is given")
    full_roi = None
    if roi is not None and roi.size:
        full_roi = [0.0] * rank + [1.0] * rank
        flat = roi.reshape(-1)
        for k, a in enumerate(axes):
            full_roi[a], full_roi[a + rank] = float(flat[k]), float(flat[k + len(axes)])
    return full_scales if full_scales is not None else [None] * rank, full_sizes, full_roi


def _axis_matrix(imp: Importer, node: onnx.NodeProto, length: int, scale: float | None, size: int | None,
                 roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """(the axis' weight matrix, out x length, and which outputs lie outside tf_crop_and_resize's region),
    from onnx's reference resizing an identity matrix (and zeros, for the extrapolated positions)."""
    from onnx.reference import ReferenceEvaluator

    attrs = {a.name: oh.get_attribute_value(a) for a in node.attribute if a.name in _AXIS_ATTRIBUTES}
    if node.op_type == "Upsample" or imp.opset < 11:  # the older operators' coordinates
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    opset = max(imp.opset, 11)
    names = ["x", "roi", "scales", "sizes"]
    feeds = {"roi": np.array([roi[0], 0.0, roi[1], 1.0] if roi else [], np.float32)}
    ones, zeros = np.eye(length, dtype=np.float64), np.zeros((length, length), np.float64)
    if isinstance(scale, fractions.Fraction) and size != math.floor(length * float(scale)):
        # keep_aspect_ratio_policy's common scale p/q, with a length it rounds to (not floors to): a
        # third axis of q elements resized to p makes the reference pick that scale and that length, while
        # the first axis' size (1, or p times its length) never wins the pick
        p, q = scale.numerator, scale.denominator
        policy = text_attribute(node, "keep_aspect_ratio_policy", "stretch")
        attrs.update(keep_aspect_ratio_policy=policy, axes=[0, 2])
        opset, names = max(opset, 18), ["x", "roi", "", "sizes"]
        feeds["sizes"] = np.array([1 if policy == "not_smaller" else length * p, p], np.int64)
        ones, zeros = np.repeat(ones[:, :, None], q, axis=2), np.repeat(zeros[:, :, None], q, axis=2)
    elif scale is not None:  # (an empty sizes input is read as given: leave it out)
        feeds["scales"] = np.array([scale, 1.0], np.float32)
        names = names[:3]
    else:
        feeds["sizes"] = np.array([size, length], np.int64)
        names = ["x", "roi", "", "sizes"]
    probe = oh.make_node("Resize", names, ["y"], **attrs)
    types = {"x": onnx.TensorProto.DOUBLE, "roi": onnx.TensorProto.FLOAT, "scales": onnx.TensorProto.FLOAT,
             "sizes": onnx.TensorProto.INT64}
    graph = oh.make_graph([probe], "probe", [oh.make_tensor_value_info(n, types[n], None) for n in names if n],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    try:
        evaluator = ReferenceEvaluator(model)
        ones = evaluator.run(None, {**feeds, "x": ones})[0]
        zeros = evaluator.run(None, {**feeds, "x": zeros})[0]
        if ones.ndim == 3:  # (the third axis of the keep_aspect_ratio probe: constant along it)
            ones, zeros = ones[:, :, 0], zeros[:, :, 0]
    except Exception as e:  # noqa: BLE001 - onnx's reference refusing these attributes
        raise WorkloadError(f"{describe(node)}: onnx's reference could not resize an axis of {length} with "
                            f"{attrs}: {e}") from None
    outside = np.any(zeros != 0, axis=1) if "extrapolation_value" in attrs else np.zeros(ones.shape[0], bool)
    return ones - zeros, outside


def _taps(imp: Importer, node: onnx.NodeProto, axis: int, matrix: np.ndarray, outside: np.ndarray, dtype: str):
    """The matrix's nonzero entries per row as (index, weight) constants of out x taps."""
    count = max(1, int((matrix != 0).sum(axis=1).max()))
    index = np.zeros((matrix.shape[0], count), np.int64)
    weight = np.zeros((matrix.shape[0], count), np.float64)
    for o, row in enumerate(matrix):
        nonzero = np.flatnonzero(row)
        index[o, :len(nonzero)], weight[o, :len(nonzero)] = nonzero, row[nonzero]
    compute = dtype if np.dtype(dtype).kind == "f" else "float32"
    base = f"{node.name or 'resize'}_axis{axis}"
    imp.constant(f"{base}_index", index)
    imp.constant(f"{base}_weight", weight.astype(compute))
    mask = None
    if outside.any():
        imp.constant(f"{base}_outside", outside.astype(np.int8))
        mask = imp.lookup(f"{base}_outside")
    return imp.lookup(f"{base}_index"), imp.lookup(f"{base}_weight"), mask
