"""ONNX operators that move or pick elements by index: GatherElements, GatherND, Tile, DepthToSpace,
SpaceToDepth, OneHot, EyeLike, Compress, ReverseSequence, Col2Im, MaxUnpool, and the inference forms
of Dropout and Size.

Each output element reads the input element an index map gives (`x.at(map(idx))`); an index read
from a tensor counts negative values from the end and is clamped into the axis, as Gather's are.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import axis_of, op, refuse
from ptowsp.te import Expr
from ptowsp.workloads.checks import with_parameters


def _integer(node: onnx.NodeProto, v: Value, what: str) -> None:
    if np.dtype(v.dtype).kind not in "iu":
        raise WorkloadError(f"{describe(node)}: {what} of dtype {v.dtype}; an integer type is needed")


def _wrapped(k: Expr, n: int) -> Expr:
    """An index into an axis of n: negative from the end, clamped into it."""
    k = pw.cast(k, "int64")
    return pw.clamp(pw.where(k < 0, k + n, k), 0, n - 1)


@op("GatherElements")
def gather_elements(imp: Importer, node: onnx.NodeProto) -> None:
    data, indices = imp.value(node, 0), imp.value(node, 1)
    _integer(node, indices, "indices")
    axis = axis_of(node, int(attribute(node, "axis", 0)), len(data.shape))

    def body(*idx):
        at = list(idx)
        at[axis] = _wrapped(indices.at(idx), data.shape[axis])
        return data.at(at)
    imp.compute(node, indices.shape, body)


@op("GatherND")
def gather_nd(imp: Importer, node: onnx.NodeProto) -> None:
    data, indices = imp.value(node, 0), imp.value(node, 1)
    _integer(node, indices, "indices")
    b = int(attribute(node, "batch_dims", 0))
    q, k = len(indices.shape), indices.shape[-1]
    if not isinstance(k, int) or b + k > len(data.shape):
        raise WorkloadError(f"{describe(node)}: index tuples of {k} into {data.shape} after {b} batch dims")
    lead = indices.shape[:-1]

    def body(*idx):
        picked = [_wrapped(indices.at([*idx[:q - 1], j]), data.shape[b + j]) for j in range(k)]
        return data.at([*idx[:b], *picked, *idx[q - 1:]])
    imp.compute(node, (*lead, *data.shape[b + k:]), body)


@op("Tile")
def tile(imp: Importer, node: onnx.NodeProto) -> None:
    x, repeats = imp.value(node, 0), imp.array(node, 1, "repeats")
    repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
    if len(repeats) != len(x.shape) or any(r < 1 for r in repeats):
        raise WorkloadError(f"{describe(node)}: repeats {repeats} for an input of shape {x.shape}")
    shape = tuple(n * r for n, r in zip(x.shape, repeats, strict=True))
    imp.compute(node, shape, lambda *idx: x.at([i % n if r > 1 else i for i, n, r in zip(idx, x.shape, repeats,
                                                                                          strict=True)]))


@op("DepthToSpace", "SpaceToDepth")
def depth_space(imp: Importer, node: onnx.NodeProto) -> None:
    """Blocks of `blocksize` pixels to channels and back (DepthToSpace: DCR or CRD channel order)."""
    x = imp.value(node, 0)
    if len(x.shape) != 4:
        raise WorkloadError(f"{describe(node)}: only (N, C, H, W) inputs are supported, got {x.shape}")
    bs = int(attribute(node, "blocksize"))
    n, c, h, w = x.shape
    mode = text_attribute(node, "mode", "DCR")
    if mode not in ("DCR", "CRD"):
        refuse(node, "mode", mode, "DCR or CRD")
    if node.op_type == "SpaceToDepth":
        if h % bs or w % bs:
            raise WorkloadError(f"{describe(node)}: blocksize {bs} does not divide {h} x {w}")

        def to_depth(vn, vc, vh, vw):
            block, cc = (vc // c, vc % c) if mode == "DCR" else (vc % (bs * bs), vc // (bs * bs))
            return x.at([vn, cc, vh * bs + block // bs, vw * bs + block % bs])
        imp.compute(node, (n, c * bs * bs, h // bs, w // bs), to_depth)
        return
    if c % (bs * bs):
        raise WorkloadError(f"{describe(node)}: blocksize {bs} squared does not divide the {c} channels")
    out_c = c // (bs * bs)

    def to_space(vn, vc, vh, vw):
        block = (vh % bs) * bs + vw % bs
        channel = block * out_c + vc if mode == "DCR" else vc * bs * bs + block
        return x.at([vn, channel, vh // bs, vw // bs])
    imp.compute(node, (n, out_c, h * bs, w * bs), to_space)


@op("OneHot")
def one_hot(imp: Importer, node: onnx.NodeProto) -> None:
    indices, values = imp.value(node, 0), imp.value(node, 2)
    depth = int(np.asarray(imp.array(node, 1, "depth")).reshape(-1)[0])
    rank = len(indices.shape) + 1
    axis = axis_of(node, int(attribute(node, "axis", -1)), rank)
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])

    def body(*idx):
        k = pw.cast(indices.at([*idx[:axis], *idx[axis + 1:]]), "int64")
        k = pw.where(k < 0, k + depth, k)
        return pw.where(k == idx[axis], values.at([1]), values.at([0]))
    imp.compute(node, shape, body)


@op("EyeLike")
def eye_like(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if len(x.shape) != 2:
        raise WorkloadError(f"{describe(node)}: EyeLike of shape {x.shape}; it takes 2-D inputs")
    to = attribute(node, "dtype")
    dtype = x.dtype if to is None else np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to)).name
    k = int(attribute(node, "k", 0))
    imp.compute(node, x.shape, lambda i, j: pw.cast(j - i == k, dtype))


@op("Dropout")
def dropout(imp: Importer, node: onnx.NodeProto) -> None:
    """Inference, or training with a ratio of 0: the input as it is (and a mask of ones).  Training mode
    with a ratio above 0 drops at random: refused."""
    training = imp.array(node, 2, "training_mode") if imp.opset >= 12 else None
    ratio = imp.array(node, 1, "ratio") if imp.opset >= 12 else None
    dropping = ratio is None or float(np.asarray(ratio).reshape(-1)[0]) > 0
    if dropping and (training is not None and bool(np.asarray(training).reshape(-1)[0])
                     or not int(attribute(node, "is_test", 1))):
        raise WorkloadError(f"{describe(node)}: Dropout in training mode with a ratio above 0 drops at random; "
                            "only inference (or a ratio of 0) is supported")
    x = imp.value(node, 0)
    imp.compute(node, x.shape, lambda *idx: x.at(idx))
    if len(node.output) > 1 and node.output[1]:
        imp.compute(node, x.shape, lambda *idx: pw.cast(1, "bool"), output=1)


@op("Size")
def size(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if not all(isinstance(d, int) for d in x.shape):
        raise WorkloadError(f"{describe(node)}: the size of {x.shape}, which has symbolic dimensions; bind them "
                            "with shapes=")
    imp.constant(node.output[0], np.array(math.prod(x.shape), np.int64))


@op("Compress")
def compress(imp: Importer, node: onnx.NodeProto) -> None:
    """The slices along `axis` (of the flattened input without one) whose condition holds: a gather by
    the condition's true positions, which must be known at import (they set the output's length; a
    condition shorter than the axis leaves the rest out)."""
    x = imp.value(node, 0)
    condition = np.asarray(imp.array(node, 1, "condition")).reshape(-1).astype(bool)
    axis = attribute(node, "axis")
    if axis is None:
        if not all(isinstance(d, int) for d in x.shape):
            raise WorkloadError(f"{describe(node)}: Compress without an axis flattens {x.shape}; bind its "
                                "symbolic dimensions with shapes=")
        shape, axis = (math.prod(x.shape),), 0

        def read(idx):
            return x.at(_unflattened(idx[0], x.shape))
    else:
        axis = axis_of(node, int(axis), len(x.shape))
        shape, read = x.shape, x.at
    if len(condition) > shape[axis]:
        raise WorkloadError(f"{describe(node)}: condition of length {len(condition)} is longer than axis {axis} "
                            f"({shape[axis]})")
    picked = np.flatnonzero(condition).astype(np.int64)
    name = imp.name(f"{node.name or 'compress'}_picked")
    imp.constant(name, picked)
    table = imp.lookup(name)
    imp.compute(node, (*shape[:axis], len(picked), *shape[axis + 1:]),
                lambda *idx: read([*idx[:axis], table.at([idx[axis]]), *idx[axis + 1:]]))


def _unflattened(flat: Expr, shape: tuple[int, ...]) -> list[Expr]:
    """The row-major index into `shape` of element `flat`."""
    at = []
    for d in reversed(shape):
        at.append(flat % d)
        flat = flat // d
    return at[::-1]


@op("ReverseSequence")
def reverse_sequence(imp: Importer, node: onnx.NodeProto) -> None:
    """Each batch entry's first sequence_lens[b] steps along time_axis reversed, the rest as they are
    (the lengths read at run time: a gather along the time axis)."""
    x, lens = imp.value(node, 0), imp.value(node, 1)
    _integer(node, lens, "sequence_lens")
    rank = len(x.shape)
    batch_axis = axis_of(node, int(attribute(node, "batch_axis", 1)), rank)
    time_axis = axis_of(node, int(attribute(node, "time_axis", 0)), rank)
    if batch_axis == time_axis:
        raise WorkloadError(f"{describe(node)}: batch_axis and time_axis are both {batch_axis}")

    def body(*idx):
        t, n = idx[time_axis], pw.cast(lens.at([idx[batch_axis]]), "int64")
        at = list(idx)
        at[time_axis] = _wrapped(pw.where(t < n, n - 1 - t, t), x.shape[time_axis])
        return x.at(at)

    imp.compute(node, x.shape, body)


@op("Col2Im")
def col2im(imp: Importer, node: onnx.NodeProto) -> None:
    """The image whose blocks the columns hold, overlaps summed (im2col's adjoint): each pixel sums, over
    the block offsets k, the column of the block that covers it at k (where the stride lands on one)."""
    x = imp.value(node, 0)
    image = [int(v) for v in imp.array(node, 1, "image_shape").reshape(-1)]
    block = [int(v) for v in imp.array(node, 2, "block_shape").reshape(-1)]
    k = len(image)
    dilations = list(attribute(node, "dilations", [1] * k))
    strides = list(attribute(node, "strides", [1] * k))
    pads = list(attribute(node, "pads", [0] * 2 * k))
    counts = [(image[d] + pads[d] + pads[d + k] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(k)]
    if len(x.shape) != 3 or x.shape[1] % math.prod(block) or x.shape[2] != math.prod(counts):
        raise WorkloadError(f"{describe(node)}: input of shape {x.shape} for blocks {block} over an image {image} "
                            f"({math.prod(counts)} blocks) with pads {pads}, strides {strides}, dilations {dilations}")
    offsets = [pw.reduce_axis(b, f"k{d}") for d, b in enumerate(block)]

    def body(n, c, *pixel):
        valid, row, column = None, c, 0
        for d in range(k):
            shifted = pixel[d] + pads[d] - offsets[d] * dilations[d]
            p = shifted // strides[d]
            here = (shifted % strides[d] == 0) & (shifted >= 0) & (p < counts[d])
            valid = here if valid is None else valid & here
            row = row * block[d] + offsets[d]
            column = column * counts[d] + pw.clamp(p, 0, counts[d] - 1)
        return pw.sum(pw.where(valid, x.at([n, row, column]), 0.0), offsets)

    imp.compute(node, (x.shape[0], x.shape[1] // math.prod(block), *image), body)


@op("MaxUnpool")
def max_unpool(imp: Importer, node: onnx.NodeProto) -> None:
    """Each input element written to the output's element its index names (flat over the whole output,
    as MaxPool's Indices count), zeros elsewhere: a scatter (workloads/scatter.py).  Two elements naming
    one target (overlapping pooling windows picking one maximum) leave their larger value there."""
    x, indices = imp.value(node, 0), imp.value(node, 1)
    _integer(node, indices, "indices")
    kernel = [int(k) for k in attribute(node, "kernel_shape")]
    n = len(kernel)
    strides = [int(s) for s in attribute(node, "strides", [1] * n)]
    pads = [int(p) for p in attribute(node, "pads", [0] * 2 * n)]
    if tuple(indices.shape) != tuple(x.shape) or len(x.shape) != n + 2 or not all(isinstance(d, int) for d in x.shape):
        raise WorkloadError(f"{describe(node)}: X {x.shape} and I {indices.shape} must have one static shape, "
                            f"of rank {n + 2} for a kernel of {n} dimensions")
    shape = (*x.shape[:2], *((x.shape[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[n + d] for d in range(n)))
    given = imp.array(node, 2, "output_shape")  # the unpooled tensor at its start, zeros after (onnx's reference)
    out = tuple(int(d) for d in given) if given is not None else shape
    if len(out) != len(shape) or any(o < s for o, s in zip(out, shape)):
        raise WorkloadError(f"{describe(node)}: output_shape {list(out)} is smaller than the unpooled {list(shape)}")
    loops = [f"p{d}" for d in range(len(x.shape))]

    def target(*p):
        flat, coords = pw.cast(indices.at(p), "int64"), []
        for extent in reversed(shape):  # the flat index unravelled, last dimension fastest
            coords.append(flat % extent)
            flat = flat // extent
        return coords[::-1]
    largest = imp.wl.scatter(imp.name(f"{node.name or 'MaxUnpool'}_largest"), shape, x.shape,
                             with_parameters(target, loops), with_parameters(lambda *p: x.at(p), loops), combine="max")
    hits = imp.wl.scatter(imp.name(f"{node.name or 'MaxUnpool'}_hits"), shape, x.shape,
                          with_parameters(target, loops), with_parameters(lambda *p: pw.cast(1, "int32"), loops),
                          combine="add")

    def body(*i):
        at = tuple(pw.minimum(k, s - 1) if o > s else k for k, s, o in zip(i, shape, out))
        written = functools.reduce(lambda a, b: a & b, [k < s for k, s, o in zip(i, shape, out) if o > s],
                                   hits[at] > 0)
        return pw.where(written, largest[at], pw.cast(0, x.dtype))
    imp.compute(node, out, body)
