"""Conformance cases for the operators of real models and image pipelines (issue 29): boundary
conditions so far.  Each returns (workload, expected outputs from the inputs, in numpy)."""

from __future__ import annotations

import numpy as np

import ptowsp as pw


def boundary_blur(h: int = 14, w: int = 21):
    """A separable blur over a repeat_edge view, then a mirror view of the result, plus a
    constant-border read far outside: every view in one pipeline."""
    wl = pw.Workload("boundary_blur")
    img = wl.input("img", (h, w))
    edge = img.boundary("repeat_edge")
    bx = wl.compute("bx", (h, w), lambda y, x: (edge[y, x - 1] + edge[y, x] * 2.0 + edge[y, x + 1]) / 4.0)
    mirror = bx.boundary("mirror")
    by = wl.compute("by", (h, w), lambda y, x: (mirror[y - 2, x] + mirror[y, x] + mirror[y + 2, x]) / 3.0)
    dark = img.boundary("constant", -1.0)
    wl.output(wl.compute("out", (h, w), lambda y, x: by[y, x] + dark[y + 3, x - 5]))

    def expected(p):
        e = np.pad(p["img"], 1, mode="edge")
        bx = (e[1:-1, :-2] + e[1:-1, 1:-1] * 2 + e[1:-1, 2:]) / 4
        m = np.pad(bx, 2, mode="symmetric")
        by = (m[:-4, 2:-2] + m[2:-2, 2:-2] + m[4:, 2:-2]) / 3
        c = np.pad(p["img"], 5, mode="constant", constant_values=-1.0)
        return {"out": by + c[8:8 + h, 0:w]}

    return wl, expected


def boundary_uint8(h: int = 9, w: int = 40):
    """A byte image through a repeat_edge view: integer taps, a widening sum, a saturating store."""
    wl = pw.Workload("boundary_uint8")
    img = wl.input("img", (h, w), "uint8")
    edge = img.boundary("repeat_edge")
    wl.output(wl.compute("out", (h, w), lambda y, x: pw.saturating_cast(
        pw.cast(edge[y, x - 1], "int16") + pw.cast(edge[y, x + 1], "int16") - pw.cast(edge[y - 1, x], "int16"),
        "uint8")))

    def expected(p):
        e = np.pad(p["img"], 1, mode="edge").astype(np.int16)
        return {"out": np.clip(e[1:-1, :-2] + e[1:-1, 2:] - e[:-2, 1:-1], 0, 255).astype(np.uint8)}

    return wl, expected


OPERATOR_CASES = [boundary_blur, boundary_uint8]
