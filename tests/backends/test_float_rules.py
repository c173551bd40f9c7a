"""maximum and minimum on the cpu target follow numpy to the bit: NaN from either side, the
second operand on a tie between zeros; with a constant on either side too, where the code takes
x86's one-instruction max/min (codegen.float_max_min)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ptowsp as pw

pytestmark = pytest.mark.skipif("cpu" not in pw.targets(), reason="the cpu target is unavailable here")

VALUES = np.array([0.0, -0.0, 6.0, -6.0, -3.0, 3.0, 1e-30, math.inf, -math.inf, math.nan, 2.5, -0.5, 7.0, 5.0,
                   -1e30, 1e30], dtype=np.float32)
CONSTANTS = [0.0, -0.0, 6.0, -3.0, math.inf, math.nan]


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    both_nan = np.isnan(got) & np.isnan(expected)
    return bool(np.all(both_nan | (got.view(np.uint32) == expected.view(np.uint32))))


@pytest.mark.parametrize("vectorized", [True, False])
@pytest.mark.parametrize("constant", CONSTANTS)
def test_max_and_min_with_a_constant_on_either_side_match_numpy(constant, vectorized):
    n = VALUES.size
    wl = pw.Workload("max_min_constant")
    x, y = wl.input("x", (n,)), wl.input("y", (n,))
    c = float(constant)
    forms = {
        "max_xc": (lambda i: pw.maximum(x[i], c), lambda a, b: np.maximum(a, np.float32(c))),
        "max_cx": (lambda i: pw.maximum(c, x[i]), lambda a, b: np.maximum(np.float32(c), a)),
        "min_xc": (lambda i: pw.minimum(x[i], c), lambda a, b: np.minimum(a, np.float32(c))),
        "min_cx": (lambda i: pw.minimum(c, x[i]), lambda a, b: np.minimum(np.float32(c), a)),
        "max_xy": (lambda i: pw.maximum(x[i], y[i]), np.maximum),
        "min_xy": (lambda i: pw.minimum(x[i], y[i]), np.minimum),
        "clip": (lambda i: pw.minimum(pw.maximum(x[i], 0.0), c), lambda a, b: np.minimum(np.maximum(a, 0), c)),
    }
    for name, (body, _) in forms.items():
        wl.output(wl.compute(name, (n,), body))
    s = wl.schedule()
    if vectorized:
        for name in forms:
            s = s.vectorize(name, "i")
    a = VALUES
    b = np.roll(VALUES, 3)
    got = pw.build(s, target="cpu")(x=a, y=b)
    for name, (_, reference) in forms.items():
        expected = np.asarray(reference(a, b), dtype=np.float32)
        assert same_bits(got[name], expected), (name, got[name], expected)
