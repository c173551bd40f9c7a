"""Conformance cases for scans (issue 29, item 2), appended to OPERATOR_CASES.  Each returns
(workload, expected outputs from the inputs, in numpy loops written from the math)."""

from __future__ import annotations

import numpy as np

import ptowsp as pw


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def scan_decay(steps: int = 9, width: int = 13):
    """C[t] = 0.9 C[t - 1] + X[t] from C[0] = X[0], then a consumer of the scan."""
    wl = pw.Workload("scan_decay")
    x = wl.input("X", (steps, width))
    c = wl.scan("C", (steps, width), axis="t", init=lambda i: x[0, i], update=lambda t, i: c[t - 1, i] * 0.9 + x[t, i])
    wl.output(wl.compute("D", (steps, width), lambda t, i: c[t, i] + 1.0))

    def expected(p):
        out = p["X"].copy()
        for t in range(1, steps):
            out[t] = out[t - 1] * 0.9 + p["X"][t]
        return {"D": out + 1.0}

    return wl, expected


def scan_fibonacci(steps: int = 14, width: int = 6):
    """Two delays (F[t] = F[t - 1] + F[t - 2] + X[t]) and an init that takes the scan axis: the first
    two steps are X's; int32, exact."""
    wl = pw.Workload("scan_fibonacci")
    x = wl.input("X", (steps, width), "int32")
    f = wl.scan("F", (steps, width), axis="t", init=lambda t, i: x[t, i],
                update=lambda t, i: f[t - 1, i] + f[t - 2, i] + x[t, i])
    wl.output(f)

    def expected(p):
        out = p["X"].astype(np.int32).copy()
        for t in range(2, steps):
            out[t] = out[t - 1] + out[t - 2] + p["X"][t]
        return {"F": out}

    return wl, expected


def scan_of_producer(steps: int = 7, width: int = 16):
    """A scan along the last axis over an injective producer (which schedules may inline into it),
    its running maximum: each row is an independent chain."""
    wl = pw.Workload("scan_of_producer")
    x = wl.input("X", (width, steps))
    p2 = wl.compute("P", (width, steps), lambda i, t: x[i, t] * 2.0 - 1.0)
    m = wl.scan("M", (width, steps), axis="t", init=lambda i: p2[i, 0],
                update=lambda i, t: pw.maximum(m[i, t - 1], p2[i, t]))
    wl.output(m)
    return wl, lambda p: {"M": np.maximum.accumulate(p["X"] * 2.0 - 1.0, axis=1)}


def zoo_cumsum():
    wl = pw.zoo.cumsum(11, 40)
    return wl, lambda p: {"Y": np.cumsum(p["X"], axis=0)}


def iir_columns_transposed(image: np.ndarray, a: float) -> np.ndarray:
    """Halide's blur_cols_transpose in numpy: causal, anti-causal down the columns, transposed."""
    causal = image.astype(np.float64).copy()
    for y in range(1, len(causal)):
        causal[y] = (1 - a) * causal[y - 1] + a * image[y]
    anti = causal.copy()
    for y in range(len(anti) - 2, -1, -1):
        anti[y] = (1 - a) * anti[y + 1] + a * causal[y]
    return anti.T


def zoo_iir_blur():
    wl = pw.zoo.iir_blur(10, 24, alpha=0.25)
    return wl, lambda p: {"Y": iir_columns_transposed(iir_columns_transposed(p["image"], 0.25), 0.25)}


def lstm_reference(p: dict) -> np.ndarray:
    """An LSTM layer from a zero state, gates i, f, g, o."""
    x, w, u, b = p["X"], p["W"], p["U"], p["b"]
    h, c, out = np.zeros(u.shape[1]), np.zeros(u.shape[1]), []
    for t in range(x.shape[0]):
        z = w @ x[t] + u @ h + b
        c = _sigmoid(z[1]) * c + _sigmoid(z[0]) * np.tanh(z[2])
        h = _sigmoid(z[3]) * np.tanh(c)
        out.append(h)
    return np.array(out)


def zoo_lstm():
    wl = pw.zoo.lstm(steps=4, inputs=6, hidden=16)
    return wl, lambda p: {"H": lstm_reference(p)}


def scan_one_reduction(steps: int = 6, hidden: int = 12):
    """H[t] = tanh(sum_m U[j, m] H[t - 1, m] + X[t, j]): the update holds exactly one reduction, whose
    loops a scan's nest keeps inside its steps (an ONNX Loop body's MatMul imports as this)."""
    wl = pw.Workload("scan_one_reduction")
    x = wl.input("X", (steps, hidden))
    u = wl.input("U", (hidden, hidden))
    m = pw.reduce_axis(hidden, "m")
    h = wl.scan("H", (steps, hidden), axis="t", init=lambda j: pw.tanh(x[0, j]),
                update=lambda t, j: pw.tanh(pw.sum(u[j, m] * h[t - 1, m], m) + x[t, j]))
    wl.output(h)

    def expected(p):
        out = [np.tanh(p["X"][0])]
        for t in range(1, steps):
            out.append(np.tanh(p["U"] @ out[-1] + p["X"][t]))
        return {"H": np.array(out)}

    return wl, expected


SCAN_CASES = [scan_decay, scan_fibonacci, scan_of_producer, scan_one_reduction, zoo_cumsum, zoo_iir_blur, zoo_lstm]
EXACT_SCANS = {scan_fibonacci}
