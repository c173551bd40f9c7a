"""Integer image and quantized workloads as their authors wrote them (Halide's apps/blur, TVM's
quantized conv2d): narrow dtypes, widening arithmetic, boundary conditions."""

from __future__ import annotations

import functools
import math
import operator

from ptowsp.errors import ShapeError
from ptowsp.te import Tensor, cast, reduce_axis, reduce_sum
from ptowsp.workloads.workload import Workload


def blur(height: int = 96, width: int = 128) -> Workload:
    """Halide's apps/blur on uint16: blur_x(x, y) = (in(x-1, y) + in(x, y) + in(x+1, y)) / 3, then the
    same along y, over a repeat_edge view so the output keeps the input's size.  Sums widen to
    uint32 (three uint16 values overflow uint16) and narrow back after the division."""
    wl = Workload("blur")
    image = wl.input("input", (height, width), "uint16")
    edge = image.boundary("repeat_edge")

    def wide(v):
        return cast(v, "uint32")

    bx = wl.compute("blur_x", (height, width),
                    lambda y, x: cast((wide(edge[y, x - 1]) + wide(edge[y, x]) + wide(edge[y, x + 1])) // 3, "uint16"))
    bxe = bx.boundary("repeat_edge")
    wl.output(wl.compute("blur_y", (height, width), lambda y, x: cast(
        (wide(bxe[y - 1, x]) + wide(bxe[y, x]) + wide(bxe[y + 1, x])) // 3, "uint16")))
    return wl


def quantized_conv2d(batch: int = 1, in_channels: int = 16, height: int = 16, width: int = 16,
                     out_channels: int = 16, kernel: int = 3) -> Workload:
    """int8 NCHW convolution with int32 accumulation (TVM's quantized conv2d), zero padding through a
    constant boundary: Y[n, o, y, x] = sum(int32(X[n, c, y + r - p, x + s - p]) * int32(W[o, c, r, s]))."""
    if min(batch, in_channels, height, width, out_channels, kernel) < 1 or kernel % 2 == 0:
        raise ShapeError("quantized_conv2d sizes must be positive and the kernel odd")
    pad = kernel // 2
    wl = Workload("quantized_conv2d")
    x = wl.input("X", (batch, in_channels, height, width), "int8")
    w = wl.input("W", (out_channels, in_channels, kernel, kernel), "int8")
    padded = x.boundary("constant", 0)
    c, r, s = reduce_axis(in_channels, "c"), reduce_axis(kernel, "r"), reduce_axis(kernel, "s")
    wl.output(wl.compute("Y", (batch, out_channels, height, width), lambda n, o, y, xx: reduce_sum(
        cast(padded[n, c, y + r - pad, xx + s - pad], "int32") * cast(w[o, c, r, s], "int32"), (c, r, s))))
    return wl


def unsharp(height: int = 96, width: int = 128, sigma: float = 1.5) -> Workload:
    """Halide's apps/unsharp on a planar float32 RGB image (3, h, w): gray = 0.299 r + 0.587 g + 0.114 b,
    a 7-tap Gaussian (sigma) blur of gray along y then x over repeat_edge views, sharpen = 2 gray - blur,
    out[c] = (sharpen / gray) * input[c]."""
    wl = Workload("unsharp")
    wl.output(unsharp_mask(wl, wl.input("input", (3, height, width)), sigma))
    return wl


def unsharp_mask(wl: Workload, image: Tensor, sigma: float = 1.5) -> Tensor:
    """The stages of `unsharp` added to `wl` over a (3, h, w) tensor of it; returns `out`."""
    taps = [math.exp(-(i * i) / (2 * sigma * sigma)) for i in range(-3, 4)]
    weights = [t / sum(taps) for t in taps]
    _, height, width = image.shape
    gray = wl.compute("gray", (height, width),
                      lambda y, x: image[0, y, x] * 0.299 + image[1, y, x] * 0.587 + image[2, y, x] * 0.114)
    ge = gray.boundary("repeat_edge")
    def taps(view, at):  # the weighted sum of the 7 taps, without sum()'s leading 0.0 + ...
        return functools.reduce(operator.add, (w * view[at(i - 3)] for i, w in enumerate(weights)))

    blur_y = wl.compute("blur_y", (height, width), lambda y, x: taps(ge, lambda d: (y + d, x)))
    be = blur_y.boundary("repeat_edge")
    blur_x = wl.compute("blur_x", (height, width), lambda y, x: taps(be, lambda d: (y, x + d)))
    ratio = wl.compute("ratio", (height, width), lambda y, x: (gray[y, x] * 2.0 - blur_x[y, x]) / gray[y, x])
    return wl.compute("out", (3, height, width), lambda c, y, x: ratio[y, x] * image[c, y, x])
