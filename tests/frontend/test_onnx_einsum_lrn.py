"""Einsum (one product summed over the letters the output leaves out) and LRN, against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import ptowsp as pw
from tests.frontend.test_onnx import check, model

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i", [(6,), (6,)]),  # an inner product: a 0-d result
    ("ii->i", [(4, 4)]),  # a diagonal
    ("ij->", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 2)]),  # the ellipsis broadcasts
    ("ij,kj", [(3, 4), (5, 4)]),  # implicit output: ik
])
def test_einsum(equation, shapes):
    names = [f"x{k}" for k in range(len(shapes))]
    node = oh.make_node("Einsum", names, ["y"], equation=equation)
    m = model([node], {n: (s, TP.FLOAT) for n, s in zip(names, shapes)}, {"y": (None, TP.FLOAT)}, opset=12)
    check(m, {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}, target="cpu",
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn_normalises_over_a_window_of_channels(size):
    """(onnx.reference's LRN walks the batch where the channels are meant: the expected output is the
    spec's formula in numpy, as onnx's own test cases compute it.)"""
    alpha, beta, bias = 0.01, 0.6, 2.0
    node = oh.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    m = model([node], {"x": ((2, 6, 3, 4), TP.FLOAT)}, {"y": ((2, 6, 3, 4), TP.FLOAT)})
    x = RNG.standard_normal((2, 6, 3, 4)).astype(np.float32)
    squares = np.zeros_like(x)
    for c in range(6):
        lo, hi = max(0, c - (size - 1) // 2), min(6, c + -(-(size - 1) // 2) + 1)
        squares[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    want = x / (bias + alpha / size * squares) ** beta
    wl = pw.frontend.from_onnx(m)
    np.testing.assert_allclose(pw.reference(wl, x=x)["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(x=x)["y"], want, rtol=1e-5, atol=1e-6)
