"""Conformance cases for the narrow integer dtypes and bfloat16 (issue 29, item 1).

Each dtype goes through an elementwise, a reduction, a matmul-shaped and a
gather workload.  The integer formulas are numpy on arrays of the same dtype,
so they wrap exactly as ptowsp's rules say (docs/expressions.md); random
inputs span the whole range of 8- and 16-bit types, so wrap-around happens.
"""

from __future__ import annotations

import numpy as np

import ptowsp as pw
from ptowsp.te import dtypes

INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "uint32", "uint64")
BFLOAT16_RTOL = 3e-2  # a bfloat16 operation rounds to 8 significant bits


def _narrow(dtype: str) -> bool:
    return np.dtype(dtype).itemsize <= 2


def int_elementwise(dtype: str):
    """Wrapping arithmetic, floor division, bit operations, a mixed-dtype promotion, a saturating cast."""
    wl = pw.Workload(f"{dtype}_elementwise")
    a, b = wl.input("a", (6, 40), dtype), wl.input("b", (6, 40), dtype)
    y = wl.compute("Y", (6, 40), lambda i, j: pw.where(a[i, j] > b[i, j], a[i, j] - b[i, j], b[i, j] - a[i, j]) * 3
                   + a[i, j] // pw.maximum(b[i, j], 1) + a[i, j] % 7 - (a[i, j] & b[i, j]))
    z = wl.compute("Z", (6, 40), lambda i, j: pw.saturating_cast(pw.cast(a[i, j], "int64") * 2 - 100, dtype))
    m = wl.compute("M", (6, 40), lambda i, j: a[i, j] + pw.cast(b[i, j], "int8"))
    wl.output(y, z, m)
    lo, hi = dtypes.int_range(dtype)

    def expected(p):
        a, b = p["a"], p["b"]
        return {"Y": np.where(a > b, a - b, b - a) * 3 + a // np.maximum(b, 1) + a % 7 - (a & b),
                "Z": np.clip(a.astype(np.int64) * 2 - 100, lo, hi).astype(dtype),
                "M": a + b.astype(np.int8)}

    return wl, expected


def int_reduction(dtype: str):
    """A sum that wraps in its dtype, and max - min."""
    wl = pw.Workload(f"{dtype}_reduction")
    x = wl.input("x", (5, 24), dtype)
    k, r = pw.reduce_axis(24, "k"), pw.reduce_axis(24, "r")
    wl.output(wl.compute("S", (5,), lambda i: pw.sum(x[i, k], k)),
              wl.compute("R", (5,), lambda i: pw.max(x[i, r], r) - pw.min(x[i, r], r)))
    return wl, lambda p: {"S": p["x"].sum(1, dtype=dtype), "R": p["x"].max(1) - p["x"].min(1)}


def int_matmul(dtype: str):
    """8/16-bit: a quantized product (int32 accumulation, requantized by a saturating cast);
    32/64-bit unsigned: a matmul that wraps in its dtype."""
    wl = pw.Workload(f"{dtype}_matmul")
    a, b = wl.input("A", (12, 32), dtype), wl.input("B", (32, 10), dtype)
    k = pw.reduce_axis(32, "k")
    if not _narrow(dtype):
        wl.output(wl.compute("C", (12, 10), lambda i, j: pw.sum(a[i, k] * b[k, j], k)))
        return wl, lambda p: {"C": p["A"] @ p["B"]}
    c = wl.compute("C", (12, 10), lambda i, j: pw.sum(pw.cast(a[i, k], "int32") * pw.cast(b[k, j], "int32"), k))
    wl.output(c, wl.compute("Q", (12, 10), lambda i, j: pw.saturating_cast(c[i, j] // 256, dtype)))
    lo, hi = dtypes.int_range(dtype)

    def expected(p):
        c = p["A"].astype(np.int32) @ p["B"].astype(np.int32)
        return {"C": c, "Q": np.clip(c // 256, lo, hi).astype(dtype)}

    return wl, expected


def int_gather(dtype: str):
    """A table read at indices of the dtype (any value: taken modulo the table's length)."""
    wl = pw.Workload(f"{dtype}_gather")
    table, idx = wl.input("T", (13, 6), dtype), wl.input("idx", (9,), dtype)
    wl.output(wl.compute("Y", (9, 6), lambda i, j: table[idx[i] % 13, j] + table[(idx[i] + 1) % 13, 5 - j]))

    def expected(p):
        t, idx = p["T"], p["idx"]
        return {"Y": t[idx % 13] + t[(idx + 1) % 13][:, ::-1]}

    return wl, expected


def bfloat16_elementwise():
    """Math in float32 rounded per operation, a saturating cast to int8, bfloat16 + float16 = float32."""
    wl = pw.Workload("bfloat16_elementwise")
    a, b = wl.input("a", (6, 40), "bfloat16"), wl.input("b", (6, 40), "bfloat16")
    y = wl.compute("Y", (6, 40), lambda i, j: pw.tanh(a[i, j]) * b[i, j] + a[i, j] / (pw.abs(b[i, j]) + 1.0)
                   - pw.floor(a[i, j] * 4.0))
    z = wl.compute("Z", (6, 40), lambda i, j: pw.saturating_cast(a[i, j] * 100.0, "int8"))
    m = wl.compute("M", (6, 40), lambda i, j: a[i, j] + pw.cast(b[i, j], "float16"))
    wl.output(y, z, m)

    def expected(p):
        a, b = p["a"], p["b"]
        return {"Y": np.tanh(a) * b + a / (np.abs(b) + 1) - np.floor(a * 4),
                "Z": np.clip(np.trunc(a * 100), -128, 127).astype(np.int8), "M": a + b}

    return wl, expected


def bfloat16_reduction():
    wl = pw.Workload("bfloat16_reduction")
    x = wl.input("x", (5, 24), "bfloat16")
    k, r = pw.reduce_axis(24, "k"), pw.reduce_axis(24, "r")
    wl.output(wl.compute("S", (5,), lambda i: pw.sum(x[i, k], k)),
              wl.compute("R", (5,), lambda i: pw.max(x[i, r], r) - pw.min(x[i, r], r)))
    return wl, lambda p: {"S": p["x"].sum(1), "R": p["x"].max(1) - p["x"].min(1)}


def bfloat16_matmul():
    """bfloat16 in, float32 accumulation (pw.sum's rule), bfloat16 out."""
    wl = pw.zoo.matmul(12, 10, 32, dtype="bfloat16")
    return wl, lambda p: {"C": p["A"] @ p["B"]}


def bfloat16_gather():
    """A bfloat16 table read at uint8 indices."""
    wl = pw.Workload("bfloat16_gather")
    table, idx = wl.input("T", (13, 6), "bfloat16"), wl.input("idx", (9,), "uint8")
    wl.output(wl.compute("Y", (9, 6), lambda i, j: table[idx[i] % 13, j] * 2.0 - table[idx[i] % 13, 5 - j]))
    return wl, lambda p: {"Y": p["T"][p["idx"] % 13] * 2 - p["T"][p["idx"] % 13][:, ::-1]}


def _cases():
    for dtype in INTEGER_DTYPES:
        for kind, make in (("elementwise", int_elementwise), ("reduction", int_reduction),
                           ("matmul", int_matmul), ("gather", int_gather)):
            yield (f"{dtype}_{kind}", lambda make=make, dtype=dtype: make(dtype)[0],
                   lambda p, make=make, dtype=dtype: make(dtype)[1](p), 0)
    for make in (bfloat16_elementwise, bfloat16_reduction, bfloat16_matmul, bfloat16_gather):
        yield make.__name__, lambda make=make: make()[0], lambda p, make=make: make()[1](p), BFLOAT16_RTOL


DTYPE_CASES = list(_cases())  # (name, make, expected, rtol), as catalogue.Case takes them
