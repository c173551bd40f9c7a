"""Edge-case workloads for the conformance catalogue, each with an independent numpy formula."""

from __future__ import annotations

import numpy as np

import ptowsp as pw


def broadcast_add():
    wl = pw.Workload("broadcast_add")
    x, row, col = wl.input("X", (7, 5)), wl.input("row", (5,)), wl.input("col", (7,))
    wl.output(wl.compute("Y", (7, 5), lambda i, j: x[i, j] + row[j] * col[i]))
    return wl, lambda p: {"Y": p["X"] + p["row"][None, :] * p["col"][:, None]}


def transpose():
    wl = pw.Workload("transpose")
    x = wl.input("X", (6, 11))
    wl.output(wl.compute("Y", (11, 6), lambda i, j: x[j, i]))
    return wl, lambda p: {"Y": p["X"].T}


def stencil_blur():
    """3x3 box blur with zero borders, written with where guards."""
    wl = pw.Workload("stencil_blur")
    x = wl.input("X", (9, 8))
    r, c = pw.reduce_axis(3, "r"), pw.reduce_axis(3, "c")

    def blur(i, j):
        y, z = i + r - 1, j + c - 1
        inside = (y >= 0) & (y < 9) & (z >= 0) & (z < 8)
        return pw.sum(pw.where(inside, x[y, z], 0.0), (r, c)) / 9.0

    wl.output(wl.compute("Y", (9, 8), blur))

    def expected(p):
        padded = np.pad(p["X"], 1)
        return {"Y": sum(padded[a:a + 9, b:b + 8] for a in range(3) for b in range(3)) / 9.0}

    return wl, expected


def int_arith():
    wl = pw.Workload("int_arith")
    a, b = wl.input("a", (13,), "int32"), wl.input("b", (13,), "int32")
    wl.output(wl.compute("q", (13,), lambda i: a[i] // b[i] * 3 + a[i] % b[i] - pw.maximum(a[i], b[i])))
    return wl, lambda p: {"q": (np.floor_divide(p["a"], p["b"]) * 3 + np.remainder(p["a"], p["b"])
                                - np.maximum(p["a"], p["b"])).astype(np.int32)}


def int64_sum():
    wl = pw.Workload("int64_sum")
    x = wl.input("x", (5, 17), "int64")
    k = pw.reduce_axis(17, "k")
    wl.output(wl.compute("s", (5,), lambda i: pw.sum(x[i, k] * x[i, k], k) - pw.max(x[i, k], k)))
    return wl, lambda p: {"s": (p["x"] ** 2).sum(1) - p["x"].max(1)}


def float16_chain():
    wl = pw.Workload("float16_chain")
    x = wl.input("x", (6, 10), "float16")
    y = wl.compute("y", (6, 10), lambda i, j: pw.tanh(x[i, j]) * 0.5 + 1.0)
    k = pw.reduce_axis(10, "k")
    wl.output(wl.compute("s", (6,), lambda i: pw.sum(y[i, k], k)))
    return wl, lambda p: {"s": (np.tanh(p["x"]) * 0.5 + 1.0).sum(1)}


def multi_axis_sum():
    wl = pw.Workload("multi_axis_sum")
    x = wl.input("x", (3, 4, 5))
    r, c = pw.reduce_axis(4, "r"), pw.reduce_axis(5, "c")
    wl.output(wl.compute("s", (3,), lambda b: pw.sum(x[b, r, c], (r, c))))
    return wl, lambda p: {"s": p["x"].sum((1, 2))}


def two_outputs():
    wl = pw.Workload("two_outputs")
    x = wl.input("x", (4, 6))
    k = pw.reduce_axis(6, "k")
    mx = wl.compute("mx", (4,), lambda i: pw.max(x[i, k], k))
    wl.output(mx, wl.compute("centered", (4, 6), lambda i, j: x[i, j] - mx[i]))
    return wl, lambda p: {"mx": p["x"].max(1), "centered": p["x"] - p["x"].max(1, keepdims=True)}


def opaque_middle():
    wl = pw.Workload("opaque_middle")
    x = wl.input("x", (4, 7))
    y = wl.compute("y", (4, 7), lambda i, j: x[i, j] * 2.0 - 1.0)
    s = wl.opaque("sort", lambda a: np.sort(a, axis=1), inputs=[y], outputs=[("sorted", (4, 7))])
    wl.output(wl.compute("z", (4, 3), lambda i, j: s[i, j + 4] - s[i, j]))
    return wl, lambda p: {"z": (lambda v: v[:, 4:] - v[:, :3])(np.sort(p["x"] * 2 - 1, axis=1))}


def size_one():
    wl = pw.Workload("size_one")
    a, b = wl.input("A", (1, 1)), wl.input("B", (1, 3))
    k = pw.reduce_axis(1, "k")
    wl.output(wl.compute("C", (1, 3), lambda i, j: pw.sum(a[i, k] * b[k, j], k)))
    return wl, lambda p: {"C": p["A"] @ p["B"]}


def compare_to_bool():
    wl = pw.Workload("compare_to_bool")
    x, y = wl.input("x", (8,)), wl.input("y", (8,))
    wl.output(wl.compute("m", (8,), lambda i: (x[i] > y[i]) | (pw.abs(x[i]) < 0.5)))
    return wl, lambda p: {"m": (p["x"] > p["y"]) | (np.abs(p["x"]) < 0.5)}


def casts():
    wl = pw.Workload("casts")
    x = wl.input("x", (9,))
    wl.output(wl.compute("y", (9,), lambda i: pw.cast(pw.cast(x[i] * 3.0, "int32"), "float64") + pw.floor(x[i])))
    return wl, lambda p: {"y": (p["x"].astype(np.float32) * 3).astype(np.int32).astype(np.float64) + np.floor(p["x"])}


def guarded_reduction():
    """Row sums of the previous row, guarded: the reduction itself sits under a where."""
    wl = pw.Workload("guarded_reduction")
    x = wl.input("x", (5, 6))
    k = pw.reduce_axis(6, "k")
    wl.output(wl.compute("y", (5,), lambda i: pw.where(i > 0, pw.sum(x[i - 1, k], k), -1.0)))
    return wl, lambda p: {"y": np.concatenate([[-1.0], p["x"][:-1].sum(1)])}


def float64_matmul():
    wl = pw.zoo.matmul(9, 13, 7, dtype="float64")
    return wl, lambda p: {"C": p["A"] @ p["B"]}


def gather_rows():
    """Reads at affine, strided and modular indices."""
    wl = pw.Workload("gather_rows")
    x = wl.input("x", (12, 5))
    wl.output(wl.compute("y", (6, 5), lambda i, j: x[2 * i + 1, j] + x[(i * 5) % 12, 4 - j]))
    return wl, lambda p: {"y": p["x"][1::2] + p["x"][(np.arange(6) * 5) % 12][:, ::-1]}


EDGE_CASES = [broadcast_add, transpose, stencil_blur, int_arith, int64_sum, float16_chain, multi_axis_sum,
              two_outputs, opaque_middle, size_one, compare_to_bool, casts, guarded_reduction, float64_matmul,
              gather_rows]
