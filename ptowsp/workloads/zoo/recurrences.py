"""Recurrences written as scans (workloads/scan.py): a running sum, Halide's IIR blur, an LSTM."""

from __future__ import annotations

from ptowsp.te import reduce_axis, reduce_sum, sigmoid, tanh, where
from ptowsp.workloads.workload import Workload


def cumsum(steps: int = 256, width: int = 512) -> Workload:
    """Y[t, i] = X[0, i] + ... + X[t, i]: the running sum down each column (TVM's scan example)."""
    wl = Workload("cumsum")
    x = wl.input("X", (steps, width))
    y = wl.scan("Y", (steps, width), axis="t", init=lambda i: x[0, i], update=lambda t, i: y[t - 1, i] + x[t, i])
    wl.output(y)
    return wl


def _blur_columns_transposed(wl: Workload, name: str, image, alpha: float):
    """Halide's blur_cols_transpose: a causal then an anti-causal first-order filter down the
    columns of `image` (h, w), returned transposed (w, h).

    causal:      C[y] = (1 - a) C[y - 1] + a image[y],   C[0] = image[0]
    anti-causal: A[y] = (1 - a) A[y + 1] + a C[y],       A[h - 1] = C[h - 1]
    A scan runs forwards, so the anti-causal one runs over r = h - 1 - y.
    """
    h, w = image.shape
    causal = wl.scan(f"{name}_causal", (h, w), axis="y", init=lambda x: image[0, x],
                     update=lambda y, x: causal[y - 1, x] * (1 - alpha) + image[y, x] * alpha)
    anti = wl.scan(f"{name}_anticausal", (h, w), axis="r", init=lambda x: causal[h - 1, x],
                   update=lambda r, x: anti[r - 1, x] * (1 - alpha) + causal[h - 1 - r, x] * alpha)
    return wl.compute(name, (w, h), lambda x, y: anti[h - 1 - y, x])


def iir_blur(height: int = 96, width: int = 128, alpha: float = 0.1) -> Workload:
    """Halide's apps/iir_blur on one float32 channel: the image's columns filtered causally then
    anti-causally (a = alpha), transposed, the same again, transposed back: Y has the input's shape."""
    wl = Workload("iir_blur")
    image = wl.input("image", (height, width))
    columns = _blur_columns_transposed(wl, "blur_y", image, alpha)  # (width, height)
    wl.output(_blur_columns_transposed(wl, "Y", columns, alpha))  # (height, width) again
    return wl


def lstm(steps: int = 16, inputs: int = 32, hidden: int = 64) -> Workload:
    """An LSTM layer over a sequence X (steps, inputs) from a zero state; gates i, f, g, o in rows 0..3
    of W (4, hidden, inputs), U (4, hidden, hidden) and b (4, hidden):

        z_g = W_g x_t + U_g h_{t-1} + b_g,   c_t = sig(z_f) c_{t-1} + sig(z_i) tanh(z_g),
        h_t = sig(z_o) tanh(c_t);            H[t] = h_t.

    The input projection of every step is one contraction (XW); the recurrence is a scan over
    state[t, 0] = c_t, state[t, 1] = h_t whose step holds the matmul U h_{t-1}.
    """
    wl = Workload("lstm")
    x = wl.input("X", (steps, inputs))
    w, u, b = wl.input("W", (4, hidden, inputs)), wl.input("U", (4, hidden, hidden)), wl.input("b", (4, hidden))
    k = reduce_axis(inputs, "k")
    xw = wl.compute("XW", (steps, 4, hidden), lambda t, g, j: reduce_sum(x[t, k] * w[g, j, k], k) + b[g, j])
    m = reduce_axis(hidden, "m")

    def gate(g: int, t, j):
        return xw[t - 1, g, j] + reduce_sum(u[g, j, m] * state[t - 1, 1, m], m)

    def step(t, s, j):
        c = sigmoid(gate(1, t, j)) * state[t - 1, 0, j] + sigmoid(gate(0, t, j)) * tanh(gate(2, t, j))
        return where(s == 0, c, sigmoid(gate(3, t, j)) * tanh(c))

    state = wl.scan("state", (steps + 1, 2, hidden), axis="t", init=lambda s, j: 0.0, update=step)
    wl.output(wl.compute("H", (steps, hidden), lambda t, j: state[t + 1, 1, j]))
    return wl
