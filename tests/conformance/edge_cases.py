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


def opaque_scalar():
    """An opaque task reading a 0-d input and writing a 0-d tensor (a target may hold them in buffers of
    shape (1,))."""
    wl = pw.Workload("opaque_scalar")
    x, s = wl.input("x", (5,)), wl.input("s", ())
    half = wl.opaque("half", lambda t: np.asarray(t / 2, t.dtype), inputs=[s], outputs=[("half", ())])
    wl.output(wl.compute("shifted", (5,), lambda i: x[i] - half[()]))
    return wl, lambda p: {"shifted": p["x"] - p["s"] / 2}


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


def rounding():
    """pw.round: ties to even (every half from -2 to 2 is hit through the loop index), then random values."""
    wl = pw.Workload("rounding")
    x = wl.input("x", (9,))
    wl.output(wl.compute("y", (9,), lambda i: pw.round(pw.cast(i - 4, "float32") * 0.5) * 10.0 + pw.round(x[i] * 3.0)))
    return wl, lambda p: {"y": np.rint((np.arange(9) - 4) * 0.5) * 10 + np.rint(p["x"] * np.float32(3))}


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


def where_on_gathered_rows():
    """A producer choosing by its row, inlined into a read at rows from an int32 tensor: the
    producer's `s == 0` compares an index read from the tensor (issue 29, 6a)."""
    wl = pw.Workload("where_on_gathered_rows")
    x, idx = wl.input("X", (2, 64)), wl.input("idx", (16,), "int32")
    s = wl.compute("S", (2, 64), lambda r, c: pw.where(r == 0, x[0, c], x[1, c] * 2.0))
    wl.output(wl.compute("Y", (16, 64), lambda j, c: s[idx[j] % 2, c]))

    def expected(p):
        rows = np.stack([p["X"][0], p["X"][1] * 2.0])
        return {"Y": rows[p["idx"] % 2]}

    return wl, expected


def gather_by_computed_index():
    """A table and the index that gathers from it both computed, both inlined (issue 29, 6b)."""
    wl = pw.Workload("gather_by_computed_index")
    g, x = wl.input("G", (32,)), wl.input("X", (40,))
    table = wl.compute("B", (32,), lambda k: g[k] * 2.0)
    index = wl.compute("zi", (40,), lambda i: pw.cast(pw.abs(x[i]) * 8.0, "int32") % 32)
    wl.output(wl.compute("Y", (40,), lambda i: table[index[i]]))

    def expected(p):
        zi = (np.abs(p["X"].astype(np.float32)) * np.float32(8.0)).astype(np.int32) % 32
        return {"Y": p["G"][zi] * 2.0}

    return wl, expected


def image_pipeline(h: int = 20, w: int = 24, box: bool = False):
    """Six stages, all inlined by the default schedule: a blur along x then y (a 3x3 box blur twice
    with `box`) with zero borders written as where guards, an unsharp mask, a clip, a tone curve and
    a gamma-like mix.  Each stage reads the last several times (issue 29, 7)."""
    wl = pw.Workload("image_pipeline")
    img = wl.input("img", (h, w))

    def tap(t, y, x):
        return pw.where((y >= 0) & (y < h) & (x >= 0) & (x < w), t[y, x], 0.0)

    def blur(t, offsets):
        return lambda y, x: sum(tap(t, y + a, x + b) for a, b in offsets) / float(len(offsets))

    square = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1)]
    bx = wl.compute("bx", (h, w), blur(img, square if box else [(0, -1), (0, 0), (0, 1)]))
    by = wl.compute("by", (h, w), blur(bx, square if box else [(-1, 0), (0, 0), (1, 0)]))
    sharp = wl.compute("sharp", (h, w), lambda y, x: img[y, x] * 2.0 - by[y, x])
    clip = wl.compute("clip", (h, w), lambda y, x: pw.minimum(pw.maximum(sharp[y, x], 0.0), 1.0))
    curve = wl.compute("curve", (h, w), lambda y, x: clip[y, x] * clip[y, x] * (3.0 - 2.0 * clip[y, x]))
    wl.output(wl.compute("out", (h, w), lambda y, x: pw.sqrt(curve[y, x]) * 0.5 + curve[y, x] * 0.5))

    def expected(p):
        def blurred(x, axes):
            padded = np.pad(x, 1)
            shifts = [(a, b) for a in ((-1, 0, 1) if 0 in axes else (0,)) for b in ((-1, 0, 1) if 1 in axes else (0,))]
            return sum(padded[1 + a: 1 + a + h, 1 + b: 1 + b + w] for a, b in shifts) / len(shifts)

        both = (0, 1)
        smooth = blurred(blurred(p["img"], both), both) if box else blurred(blurred(p["img"], (1,)), (0,))
        c = np.clip(p["img"] * 2.0 - smooth, 0.0, 1.0)
        curve = c * c * (3.0 - 2.0 * c)
        return {"out": np.sqrt(curve) * 0.5 + curve * 0.5}

    return wl, expected


def loop_names_like_a_schedule_s():
    """Loop variables named `outer`, `inner`, `fused` and `local` (words the schedule's own loop names use),
    and a producer whose (i, j) are its consumer's (j, i): the random and hand schedules compute each
    producer inside its consumer, where the names meet."""
    wl = pw.Workload("loop_names_like_a_schedule_s")
    x = wl.input("X", (12, 10))
    p = wl.compute("P", (12, 10), lambda outer, inner: x[outer, inner] * 2.0)
    q = wl.compute("Q", (10, 12), lambda j, i: p[i, j] + 1.0)
    total = pw.reduce_axis(12, "outer")  # a reduce axis of that name too
    r = wl.compute("R", (10, 12), lambda fused, local: q[fused, local] * 3.0 + p[local, fused] +
                   pw.sum(q[fused, total], total))
    wl.output(r)

    def expected(p):
        q = (p["X"] * 2.0).T + 1.0
        return {"R": q * 3.0 + (p["X"] * 2.0).T + q.sum(axis=1, keepdims=True)}

    return wl, expected


def scalar_tensors():
    """0-d tensors (ONNX's scalars): a 0-d input, a 0-d reduction read by a later task, a 0-d output.
    The reader must wait for the writer of a tensor that has no axes (runtime/table.py)."""
    wl = pw.Workload("scalar_tensors")
    x, scale = wl.input("X", (9,)), wl.input("scale", ())
    k = pw.reduce_axis(9, "k")
    total = wl.compute("total", (), lambda: pw.sum(x[k], k) * scale[()])
    wl.output(total, wl.compute("Y", (9,), lambda i: x[i] - total[()]))

    def expected(p):
        t = p["X"].sum() * p["scale"]
        return {"total": t, "Y": p["X"] - t}

    return wl, expected


def empty_tensors():
    """A dimension of 0 (workloads/empties.py): reductions over an empty set give their identity, a
    concatenation's empty part is never read, a task over an empty shape gives an empty array."""
    wl = pw.Workload("empty_tensors")
    x, y = wl.input("X", (3, 0, 4)), wl.input("Y", (3, 4))
    k = pw.reduce_axis(0, "k")
    total = wl.compute("total", (3, 4), lambda i, j: pw.sum(x[i, k, j], axis=k) + y[i, j])
    top = wl.compute("top", (3, 4), lambda i, j: pw.max(x[i, k, j] * 2.0, axis=k))
    joined = wl.compute("joined", (3, 0 + 4), lambda i, j: pw.where(j < 0, x[i, 0, j], y[i, j]))
    doubled = wl.compute("doubled", (3, 0, 4), lambda i, k2, j: x[i, k2, j] * 2.0 + total[i, j])
    wl.output(total, top, joined, doubled)

    def expected(p):
        return {"total": p["X"].sum(axis=1) + p["Y"], "top": np.full((3, 4), -np.inf, np.float32),
                "joined": np.concatenate([np.zeros((3, 0), np.float32), p["Y"]], axis=1),
                "doubled": np.zeros((3, 0, 4), np.float32)}

    return wl, expected


EDGE_CASES = [scalar_tensors, broadcast_add, transpose, stencil_blur, int_arith, int64_sum, float16_chain, multi_axis_sum,
              two_outputs, opaque_middle, opaque_scalar, size_one, compare_to_bool, casts, rounding, guarded_reduction, float64_matmul,
              gather_rows, where_on_gathered_rows, gather_by_computed_index, image_pipeline, loop_names_like_a_schedule_s,
              empty_tensors]
