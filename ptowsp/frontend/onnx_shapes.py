"""The ONNX operators that move, select or count elements: views, concatenation, slices, gathers,
and the shape queries folded at import.  onnx_ops.py holds the registry and the arithmetic; importing
OPS from here gives the registry with both modules' operators."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_elementwise import known
from ptowsp.frontend.onnx_ops import OPS, axis_of, op, refuse
from ptowsp.frontend.onnx_sizes import Dim, broadcast, extents, quotient, same, shown, size_value
from ptowsp.te import const, sizes

__all__ = ["OPS"]  # the registry, complete once this module's operators have registered


# -- shapes --------------------------------------------------------------------------------------
def _reindex(imp: Importer, node: onnx.NodeProto, x: Value, shape: Sequence[Dim]) -> None:
    """A task viewing x's elements, in row-major order, as `shape` (Reshape, Flatten, Squeeze...).
    Leading and trailing dimensions the view keeps (a symbolic batch, say) pass through; the rest must
    be static."""
    lead = 0
    while lead < min(len(shape), len(x.shape)) and same(shape[lead], x.shape[lead]):
        lead += 1
    trail = 0
    while trail < min(len(shape), len(x.shape)) - lead and same(shape[-1 - trail], x.shape[-1 - trail]):
        trail += 1
    middle_in, middle_out = x.shape[lead:len(x.shape) - trail], shape[lead:len(shape) - trail]
    if not all(isinstance(d, int) for d in (*middle_in[1:], *middle_out[1:])):  # strides must be numbers
        raise WorkloadError(f"{describe(node)}: viewing {shown(x.shape)} as {shown(shape)} regroups symbolic "
                            "dimensions; bind them with shapes=")
    if lead or trail or not all(isinstance(d, int) for d in (*middle_in, *middle_out)):
        if not same(quotient(node, middle_in, middle_out), 1):
            raise WorkloadError(f"{describe(node)}: cannot view shape {shown(x.shape)} as {shown(shape)}")
        imp.compute(node, shape, lambda *idx: x.at([*idx[:lead], *regrouped(idx[lead:len(idx) - trail],
                                                                              middle_out, middle_in),
                                                    *idx[len(idx) - trail:]]))
        return
    if math.prod(shape) != math.prod(x.shape):
        raise WorkloadError(f"{describe(node)}: cannot view shape {x.shape} as {tuple(shape)}")
    if [n for n in shape if n != 1] == [n for n in x.shape if n != 1]:  # only unit dimensions change
        kept = [d for d, n in enumerate(shape) if n != 1]
        imp.compute(node, shape, lambda *idx: x.at(_unit_map(idx, kept, x.shape)))
    else:
        imp.compute(node, shape, lambda *idx: x.at(regrouped(idx, shape, x.shape)))


def regrouped(idx: Sequence[object], out: Sequence[int], into: Sequence[int]) -> list[object]:
    """The index into shape `into` of element `idx` of shape `out` (the same elements, row-major)."""
    linear = sum(i * math.prod(out[d + 1:]) for d, i in enumerate(idx))
    # (a symbolic first dimension takes no wrap: the index is below it anyway)
    return [linear // math.prod(into[d + 1:]) % n if d or isinstance(n, int) else linear // math.prod(into[1:])
            for d, n in enumerate(into)]


def _unit_map(idx: Sequence[object], kept: Sequence[int], shape: Sequence[int]) -> list[object]:
    values = iter(idx[d] for d in kept)
    return [next(values) if n != 1 else 0 for n in shape]


@op("Reshape")
def reshape(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    target = extents(imp, node, 1, "shape")
    given = [d for d in target if isinstance(d, int)]
    if not int(attribute(node, "allowzero", 0)):  # a 0 copies the input's dimension (allowzero=1: it is empty)
        if any(isinstance(n, int) and n == 0 and d >= len(x.shape) for d, n in enumerate(target)):
            raise WorkloadError(f"{describe(node)}: shape {shown(target)} copies (0) a dimension past the input's "
                                f"{len(x.shape)}")
        target = [x.shape[d] if isinstance(n, int) and n == 0 else n for d, n in enumerate(target)]
    if given.count(-1) > 1:
        raise WorkloadError(f"{describe(node)}: shape {shown(target)} has more than one -1")
    if -1 in given:
        at = next(d for d, n in enumerate(target) if isinstance(n, int) and n == -1)
        target[at] = quotient(node, x.shape, [n for d, n in enumerate(target) if d != at])
    _reindex(imp, node, x, target)


@op("Flatten")
def flatten(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    axis = int(attribute(node, "axis", 1))
    axis = axis % len(x.shape) if axis < 0 else axis
    _reindex(imp, node, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@op("Squeeze", "Unsqueeze")
def squeeze(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    axes = attribute(node, "axes")
    if axes is None and len(node.input) > 1:
        axes = imp.array(node, 1, "axes")
    if axes is not None:
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]  # (a 0-d axes is one axis)
    if node.op_type == "Squeeze":
        drop = {axis_of(node, int(a), len(x.shape)) for a in axes} if axes is not None else \
            {d for d, n in enumerate(x.shape) if n == 1}
        shape = [n for d, n in enumerate(x.shape) if d not in drop]
    else:
        rank = len(x.shape) + len(axes)
        add = {axis_of(node, int(a), rank) for a in axes}
        dims = iter(x.shape)
        shape = [1 if d in add else next(dims) for d in range(rank)]
    _reindex(imp, node, x, shape)


@op("Transpose")
def transpose(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    perm = list(attribute(node, "perm", list(reversed(range(len(x.shape))))))
    if sorted(perm) != list(range(len(x.shape))):
        raise WorkloadError(f"{describe(node)}: perm {perm} is no permutation of {len(x.shape)} axes")
    inverse = [perm.index(d) for d in range(len(perm))]
    imp.compute(node, [x.shape[p] for p in perm], lambda *idx: x.at([idx[inverse[d]] for d in range(len(perm))]))


@op("Expand")
def expand(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    shape = broadcast(node, x.shape, extents(imp, node, 1, "shape"))
    imp.compute(node, shape, lambda *idx: x.broadcast_at(idx, shape))


@op("Concat")
def concat(imp: Importer, node: onnx.NodeProto) -> None:
    parts = [imp.value(node, k) for k in range(len(node.input))]
    rank = len(parts[0].shape)
    axis = axis_of(node, int(attribute(node, "axis")), rank)
    if any(len(p.shape) != rank or p.shape[:axis] + p.shape[axis + 1:] != parts[0].shape[:axis] +
           parts[0].shape[axis + 1:] for p in parts):
        raise WorkloadError(f"{describe(node)}: shapes {[p.shape for p in parts]} do not concatenate on axis {axis}")
    starts = np.cumsum([0] + [p.shape[axis] for p in parts]).tolist()
    shape = (*parts[0].shape[:axis], starts[-1], *parts[0].shape[axis + 1:])

    def body(*idx):
        j = idx[axis]
        value = None
        for part, start in zip(parts, starts, strict=False):  # the last part whose start j has passed wins
            inner = pw.clamp(j - start, 0, part.shape[axis] - 1)
            read = part.at([*idx[:axis], inner, *idx[axis + 1:]])
            value = read if value is None else pw.where(j >= start, read, value)
        return value
    imp.compute(node, shape, body)


@op("Split")
def split(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    axis = axis_of(node, int(attribute(node, "axis", 0)), len(x.shape))
    sizes = imp.array(node, 1, "split") if len(node.input) > 1 else attribute(node, "split")
    outputs = [o for o in node.output]
    if sizes is None:  # equal parts; from opset 18 (num_outputs) the last may be shorter
        if x.shape[axis] % len(outputs) and imp.opset < 18:
            raise WorkloadError(f"{describe(node)}: {x.shape[axis]} does not split in {len(outputs)} equal parts")
        part = -(-x.shape[axis] // len(outputs))
        sizes = [part] * (len(outputs) - 1) + [x.shape[axis] - part * (len(outputs) - 1)]
    sizes = [int(n) for n in sizes]
    if sum(sizes) != x.shape[axis] or len(sizes) != len(outputs):
        raise WorkloadError(f"{describe(node)}: split sizes {sizes} do not cover axis {axis} of {x.shape}")
    start = 0
    for k, n in enumerate(sizes):
        shape = (*x.shape[:axis], n, *x.shape[axis + 1:])
        imp.compute(node, shape, lambda *idx, s=start: x.at([*idx[:axis], idx[axis] + s, *idx[axis + 1:]]), output=k)
        start += n


@op("Slice")
def slice_(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if imp.opset < 10:  # starts, ends and axes were attributes; no steps
        starts, ends, axes, steps = attribute(node, "starts"), attribute(node, "ends"), attribute(node, "axes"), None
        if starts is None or ends is None:
            raise WorkloadError(f"{describe(node)}: Slice (opset {imp.opset}) needs the starts and ends attributes")
    else:
        starts, ends = imp.array(node, 1, "starts"), imp.array(node, 2, "ends")
        axes, steps = imp.array(node, 3, "axes"), imp.array(node, 4, "steps")
    axes = list(range(len(starts))) if axes is None else [axis_of(node, int(a), len(x.shape)) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    first, step, shape = [0] * len(x.shape), [1] * len(x.shape), list(x.shape)
    for a, s0, e0, st in zip(axes, starts, ends, steps, strict=True):
        if st == 0:
            raise WorkloadError(f"{describe(node)}: step 0 on axis {a}")
        if not isinstance(x.shape[a], int):
            if int(s0) == 0 and st == 1 and int(e0) >= 2**31 - 1:  # the whole of a symbolic axis
                continue
            raise WorkloadError(f"{describe(node)}: slicing the symbolic axis {a} ({x.shape[a]}) is not supported; "
                                "bind it with shapes=")
        picked = range(x.shape[a])[slice(int(s0), int(e0), st)]  # numpy's (and ONNX's) clamping rules
        first[a], step[a], shape[a] = (picked.start if len(picked) else 0), st, len(picked)
    imp.compute(node, shape, lambda *idx: x.at([f + i * s for i, f, s in zip(idx, first, step, strict=True)]))


@op("Gather")
def gather(imp: Importer, node: onnx.NodeProto) -> None:
    data, indices = imp.value(node, 0), imp.value(node, 1)
    axis = axis_of(node, int(attribute(node, "axis", 0)), len(data.shape))
    if np.dtype(indices.dtype).kind not in "iu":
        raise WorkloadError(f"{describe(node)}: indices of dtype {indices.dtype}; an integer type is needed")
    n, q = data.shape[axis], len(indices.shape)
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1:])

    def body(*idx):
        k = indices.at(idx[axis:axis + q])
        k = pw.where(k < 0, k + n, k)  # ONNX counts negative indices from the end
        return data.at([*idx[:axis], pw.clamp(pw.cast(k, "int64"), 0, n - 1), *idx[axis + q:]])
    imp.compute(node, shape, body)


@op("Shape")
def shape_of(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    start, end = int(attribute(node, "start", 0)), attribute(node, "end")
    dims = size_value(np.array(list(x.shape[start:end if end is None else int(end)]), dtype=object))
    if dims.dtype == object:  # symbolic dimensions: shape arithmetic folds over them (onnx_sizes.py)
        imp.sizes[node.output[0]] = dims
    else:
        imp.constant(node.output[0], dims)


@op("ConstantOfShape")
def constant_of_shape(imp: Importer, node: onnx.NodeProto) -> None:
    shape = extents(imp, node, 0, "shape")
    value = attribute(node, "value")
    fill = onnx.numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    if all(isinstance(d, int) for d in shape):
        imp.constant(node.output[0], np.full(shape, fill[0], fill.dtype))
    else:  # a symbolic shape: a task filling it
        imp.compute(node, shape, lambda *idx: const(fill[0].item(), fill.dtype.name))


@op("Range")
def range_(imp: Importer, node: onnx.NodeProto) -> None:
    """start + i * delta for i below ceil((limit - start) / delta): over a symbolic limit (a sequence length),
    a task (over constants it was folded before it got here)."""
    for k, what in enumerate(("start", "limit", "delta")):
        if node.input[k] not in imp.sizes:  # its value sets the output's length: ValueNeeded names the input
            imp.array(node, k, what)  # it comes from (else a constant; else it is refused as computed at run time)
    start, limit, delta = (extents(imp, node, k, what)[0] for k, what in enumerate(("start", "limit", "delta")))
    if not isinstance(start, int) or not isinstance(delta, int) or delta < 1:
        raise WorkloadError(f"{describe(node)}: Range over sizes needs a constant start and a positive constant "
                            f"delta, got start {start}, delta {delta}; bind the symbolic dimensions with shapes=")
    dtype = np.dtype(imp.arrays[node.input[0]].dtype).name if node.input[0] in imp.arrays else "int64"
    length = sizes.ceil_div(sizes.sub(limit, start), delta)
    imp.compute(node, (length,), lambda i: pw.cast(i * delta + start, dtype))


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


@op("Pad")
def pad(imp: Importer, node: onnx.NodeProto) -> None:
    """Each output index reads the input at index - leading pad: where that lies outside, a constant, or
    the input's edge, its reflection (not repeating the edge) or its wrap-around; a negative pad crops."""
    x = imp.value(node, 0)
    rank = len(x.shape)
    mode = text_attribute(node, "mode", "constant")
    if mode not in _PAD_MODES:
        refuse(node, "mode", mode, " or ".join(_PAD_MODES))
    if imp.opset < 11:
        given, value, axes = attribute(node, "pads"), np.asarray(attribute(node, "value", 0.0)), None
    else:
        given, axes = imp.array(node, 1, "pads"), imp.array(node, 3, "axes")
        value = known(imp, node, 2)  # (a value computed at run time is read as a 0-d tensor)
    axes = list(range(rank)) if axes is None else [axis_of(node, int(a), rank) for a in axes]
    given = [int(p) for p in given]
    if len(given) != 2 * len(axes):
        raise WorkloadError(f"{describe(node)}: {len(given)} pads for {len(axes)} axes; 2 per axis are needed")
    begin, end = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begin[a], end[a] = given[k], given[k + len(axes)]
    shape = [n + b + e for n, b, e in zip(x.shape, begin, end, strict=True)]
    if min(shape, default=1) < 1:
        raise WorkloadError(f"{describe(node)}: pads {given} leave nothing of shape {list(x.shape)}")
    if mode == "reflect" and any(max(b, e) >= n for n, b, e in zip(x.shape, begin, end, strict=True)):
        raise WorkloadError(f"{describe(node)}: reflect pads {given} of shape {list(x.shape)}: a pad must be shorter "
                            "than its axis")
    kind = np.dtype(x.dtype).kind
    if isinstance(value, Value):
        fill = value.at([0] * len(value.shape))
    else:
        fill = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()
        fill = bool(fill) if kind == "b" else int(fill) if kind in "iu" else float(fill)

    def body(*idx):
        source, inside = [], None
        for i, n, b, e in zip(idx, x.shape, begin, end, strict=True):
            k = i - b
            if b <= 0 and e <= 0:  # cropped at most: every index is inside
                source.append(k)
            elif mode == "constant":
                source.append(k)
                here = (k >= 0) & (k < n)
                inside = here if inside is None else inside & here
            elif mode == "edge":
                source.append(pw.clamp(k, 0, n - 1))
            elif mode == "reflect":
                source.append(pw.where(k < 0, -k, pw.where(k > n - 1, 2 * (n - 1) - k, k)))
            else:  # wrap
                source.append(k % n)
        read = x.at(source)
        return read if inside is None else pw.where(inside, read, fill)

    imp.compute(node, shape, body)


@op("Trilu")
def trilu(imp: Importer, node: onnx.NodeProto) -> None:
    """The upper (or lower) triangle of the last two axes from diagonal k, zeros elsewhere: the causal masks
    torch's exporter writes (over a constant input it was folded before it got here)."""
    x = imp.value(node, 0)
    if len(x.shape) < 2:
        raise WorkloadError(f"{describe(node)}: Trilu of shape {list(x.shape)}; at least 2 dimensions are needed")
    k = imp.array(node, 1, "k")
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    upper = bool(int(attribute(node, "upper", 1)))
    zero = False if np.dtype(x.dtype).kind == "b" else 0

    def body(*idx):
        i, j = idx[-2], idx[-1]
        return pw.where((j - i >= k) if upper else (j - i <= k), x.at(idx), zero)

    imp.compute(node, x.shape, body)
