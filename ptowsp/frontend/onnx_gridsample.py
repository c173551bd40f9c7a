"""ONNX's GridSample (and DeformConv) over any number of spatial dimensions: each output element
samples the input at the point its grid entry gives (normalized to [-1, 1], the last spatial axis
first), by the nearest pixel, linear or cubic (Keys, a = -0.75) interpolation, with zeros, border or reflection padding and
align_corners, as onnx's reference (and torch) define them.

The grid is data, so each tap is a gather: per spatial axis a few (index, weight) pairs computed
from the grid value, and the output the sum over every combination of one tap per axis of the
product of their weights times the input there (2^k products for linear, 4^k for cubic, one for
nearest).  An index is clamped into its axis before it is read; with zeros padding a tap outside
contributes nothing.

DeformConv samples the same way: each tap of the convolution reads the input bilinearly at its place
moved by the offset the model computes for it.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence

import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import op, refuse
from ptowsp.te import Expr

_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic", "bicubic": "cubic"}
_PADDINGS = ("zeros", "border", "reflection")
_A = -0.75  # Keys' cubic


def _reflect(x: Expr, low: float, high: float) -> Expr:
    """x reflected by the nearer border until it lies in [low, high] (onnx's _gs_reflect)."""
    span = high - low
    if span <= 0:
        return x * 0.0 + low
    below, above = x < low, x > high
    dx = pw.where(below, low - x, x - high)
    n = pw.floor(dx / span)
    r = dx - n * span
    even = n - pw.floor(n * 0.5) * 2.0 == 0.0
    return pw.where(below, pw.where(even, low + r, high - r), pw.where(above, pw.where(even, high - r, low + r), x))


def _cubic_weights(t: Expr) -> list[Expr]:
    """Keys' weights of the taps at floor - 1 .. floor + 2, for t = x - floor(x)."""
    u, v, w = t + 1.0, 1.0 - t, 2.0 - t
    return [((u * _A - 5 * _A) * u + 8 * _A) * u - 4 * _A, ((t * (_A + 2) - (_A + 3)) * t) * t + 1.0,
            ((v * (_A + 2) - (_A + 3)) * v) * v + 1.0, ((w * _A - 5 * _A) * w + 8 * _A) * w - 4 * _A]


class _Axis:
    """One spatial axis of the input: its size and padding, and where a tap index lands."""

    def __init__(self, size: int, padding: str, align_corners: bool):
        self.size, self.padding, self.align_corners = size, padding, align_corners
        self.low, self.high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)

    def point(self, g: Expr) -> Expr:
        """The grid's normalized coordinate as a position along the axis."""
        return (g + 1.0) * 0.5 * (self.size - 1) if self.align_corners else ((g + 1.0) * self.size - 1.0) * 0.5

    def inside(self, x: Expr) -> Expr:
        """x moved into the axis' borders as the padding asks (before the taps are taken)."""
        if self.padding == "border":
            return pw.where((x < self.low) | (x > self.high), pw.clamp(x, 0.0, self.size - 1.0), x)
        if self.padding == "reflection":
            return _reflect(x, self.low, self.high)
        return x

    def tap(self, i: Expr) -> tuple[Expr, Expr | None]:
        """(the index read for tap i, a condition for it to count: None for always)."""
        last = self.size - 1
        if self.padding == "zeros":
            return pw.clamp(i, 0, last), (i >= 0) & (i <= last)
        if self.padding == "reflection":
            i = pw.cast(_reflect(pw.cast(i, "float32"), self.low, self.high), "int64")  # (truncates, as int())
        return pw.clamp(i, 0, last), None


def _taps(axis: _Axis, x: Expr, mode: str) -> list[tuple[Expr, Expr, Expr | None]]:
    """(index, weight, condition) of each tap along one axis at position x (for nearest, x is rounded
    already and the index is its integer part, as onnx's reference takes it)."""
    if mode == "nearest":
        index, valid = axis.tap(pw.cast(x, "int64"))
        return [(index, x * 0.0 + 1.0, valid)]
    first = pw.floor(x)
    t = x - first
    base = pw.cast(first, "int64")
    offsets, weights = ((0, 1), [1.0 - t, t]) if mode == "linear" else ((-1, 0, 1, 2), _cubic_weights(t))
    return [(index, w, valid) for o, w in zip(offsets, weights, strict=True) for index, valid in [axis.tap(base + o)]]


@op("GridSample")
def grid_sample(imp: Importer, node: onnx.NodeProto) -> None:
    x, grid = imp.value(node, 0), imp.value(node, 1)
    mode = text_attribute(node, "mode", "linear" if imp.opset >= 20 else "bilinear")
    if mode not in _MODES:
        refuse(node, "mode", mode, " or ".join(_MODES))
    padding = text_attribute(node, "padding_mode", "zeros")
    if padding not in _PADDINGS:
        refuse(node, "padding_mode", padding, " or ".join(_PADDINGS))
    align_corners = bool(int(attribute(node, "align_corners", 0)))
    spatial = len(x.shape) - 2
    if not all(isinstance(d, int) for d in (*x.shape, *grid.shape)):
        raise WorkloadError(f"{describe(node)}: GridSample over symbolic sizes; bind them with shapes=")
    if len(grid.shape) != spatial + 2 or grid.shape[-1] != spatial or grid.shape[0] != x.shape[0]:
        raise WorkloadError(f"{describe(node)}: grid of shape {grid.shape} for an input of {x.shape}; it must be "
                            f"(N, *output size, {spatial})")
    axes = [_Axis(n, padding, align_corners) for n in x.shape[2:]]
    compute = "float64" if "float64" in (x.dtype, grid.dtype) else "float32"

    def body(n, c, *out):
        points = []
        for d, axis in enumerate(axes):
            g = pw.cast(grid.at([n, *out, spatial - 1 - d]), compute)
            points.append(pw.round(axis.point(g)) if _MODES[mode] == "nearest" else axis.point(g))
        return pw.cast(sample(x, [n, c], points, axes, _MODES[mode], compute), x.dtype)

    imp.compute(node, (x.shape[0], x.shape[1], *grid.shape[1:-1]), body)


def sample(x: Value, lead: Sequence[Expr], points: Sequence[Expr], axes: Sequence[_Axis], mode: str,
           compute: str) -> Expr:
    """x[*lead, ...] interpolated at `points` (a position along each spatial axis, in pixels), in `compute`."""
    taps = [_taps(axis, axis.inside(point), mode) for axis, point in zip(axes, points, strict=True)]
    total = None
    for combination in itertools.product(*taps):
        value = pw.cast(x.at([*lead, *(i for i, _, _ in combination)]), compute)
        for _, w, _ in combination:
            value = value * w
        valid = [v for _, _, v in combination if v is not None]
        if valid:
            value = pw.where(functools.reduce(operator.and_, valid), value, 0.0)
        total = value if total is None else total + value
    return total


@op("DeformConv")
def deform_conv(imp: Importer, node: onnx.NodeProto) -> None:
    """A convolution whose every tap reads the input at its place moved by an offset the model computes
    (bilinear, zeros outside, as GridSample with align_corners samples), times a mask when given."""
    x, w, offset = imp.value(node, 0), imp.value(node, 1), imp.value(node, 2)
    bias, mask = imp.optional(node, 3), imp.optional(node, 4)
    spatial = len(x.shape) - 2
    shapes = [v.shape for v in (x, w, offset, bias, mask) if v is not None]
    if not all(isinstance(d, int) for shape in shapes for d in shape):
        raise WorkloadError(f"{describe(node)}: DeformConv over symbolic sizes; bind them with shapes=")
    kernel = list(attribute(node, "kernel_shape", w.shape[2:]))
    strides, dilations = attribute(node, "strides", [1] * spatial), attribute(node, "dilations", [1] * spatial)
    pads = attribute(node, "pads", [0] * 2 * spatial)
    group, offset_group = int(attribute(node, "group", 1)), int(attribute(node, "offset_group", 1))
    taps_count = math.prod(kernel)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group or x.shape[1] % offset_group \
            or offset.shape[1] != offset_group * taps_count * spatial:
        raise WorkloadError(f"{describe(node)}: X {x.shape}, W {w.shape} and offset {offset.shape} do not agree with "
                            f"group={group}, offset_group={offset_group} and a kernel of {kernel}")
    per_group, outs_per_group = w.shape[1], w.shape[0] // group
    per_offset_group = x.shape[1] // offset_group
    axes = [_Axis(n, "zeros", True) for n in x.shape[2:]]
    compute = "float64" if x.dtype == "float64" else "float32"
    c = pw.reduce_axis(per_group, "c")
    k = [pw.reduce_axis(n, f"k{d}") for d, n in enumerate(kernel)]

    def body(n, o, *out):
        channel = o // outs_per_group * per_group + c
        tap = functools.reduce(lambda flat, d: flat * kernel[d] + k[d], range(1, spatial), k[0])
        slot = channel // per_offset_group * taps_count + tap
        points = [pw.cast(out[d] * strides[d] - pads[d] + k[d] * dilations[d], compute)
                  + pw.cast(offset.at([n, slot * spatial + d, *out]), compute) for d in range(spatial)]
        term = sample(x, [n, channel], points, axes, "linear", compute) * pw.cast(w.at([o, c, *k]), compute)
        if mask is not None:
            term = term * pw.cast(mask.at([n, slot, *out]), compute)
        total = pw.sum(term, (c, *k))
        return pw.cast(total if bias is None else total + pw.cast(bias.at([o]), compute), x.dtype)

    imp.compute(node, (x.shape[0], w.shape[0], *offset.shape[2:]), body)
