"""The zoo: documented formulas, expected categories, size errors.  Numerics: tests/conformance."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.workloads.zoo import ZOO, layers


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_workload_documents_its_formula_and_builds(name):
    fn = ZOO[name]
    assert fn.__doc__ and ("=" in fn.__doc__ or "->" in fn.__doc__)
    wl = fn()
    assert wl.tasks and wl.outputs


@pytest.mark.parametrize(
    "wl, categories",
    [
        (pw.zoo.matmul(8, 8, 8), ["COMPLEX_OUT_FUSABLE"]),
        (pw.zoo.conv2d(1, 2, 5, 5, 2, 3, 1, 1), ["COMPLEX_OUT_FUSABLE"]),
        (pw.zoo.softmax(4, 4), ["REDUCTION", "INJECTIVE", "REDUCTION", "INJECTIVE"]),
        (pw.zoo.mlp(4, 4, 4, 4), ["COMPLEX_OUT_FUSABLE", "INJECTIVE", "INJECTIVE", "COMPLEX_OUT_FUSABLE", "INJECTIVE"]),
        (pw.zoo.attention(1, 1, 4, 4),
         ["COMPLEX_OUT_FUSABLE", "REDUCTION", "INJECTIVE", "REDUCTION", "INJECTIVE", "COMPLEX_OUT_FUSABLE"]),
    ],
)
def test_zoo_categories(wl, categories):
    assert [wl.category(t).name for t in wl.tasks] == categories


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: pw.zoo.conv2d(1, 2, 3, 3, 2, kernel=5, padding=0), "does not fit"),
        (lambda: pw.zoo.conv2d(1, 2, 3, 3, 2, kernel=3, stride=0), "positive"),
        (lambda: pw.zoo.elementwise_chain((4, 4), 0), "length"),
        (lambda: pw.zoo.elementwise_chain((4, 4, 4), 2), "2-d"),
        (lambda: pw.zoo.transformer_block(8, 30, 4, 16), "not divisible by 4 heads"),
    ],
)
def test_zoo_size_errors(build, match):
    with pytest.raises(pw.ShapeError, match=match):
        build()


def test_layers_check_operand_shapes():
    wl = pw.Workload("l")
    a, b = wl.input("a", (2, 3)), wl.input("b", (4, 2))
    with pytest.raises(pw.ShapeError, match="inner sizes differ"):
        layers.matmul(wl, "c", a, b)


def test_zero_dimensional_tensors():
    wl = pw.Workload("z")
    s = wl.input("s", ())
    x = wl.input("x", (3,), "float64")
    t = wl.compute("t", (), lambda: s[()] * 2.0)
    wl.output(t, wl.compute("u", (3,), lambda i: x[i] + t[()]))
    assert str(wl.task("t")) == "t[] = s[] * 2.0"
    out = pw.reference(wl, s=np.array(1.5, np.float32), x=np.arange(3.0))
    assert out["t"].shape == () and out["t"] == 3.0
    np.testing.assert_array_equal(out["u"], [3.0, 4.0, 5.0])


def test_dtypes_accept_numpy_spellings():
    wl = pw.Workload("d")
    assert wl.input("a", (2,), np.float16).dtype == "float16"
    assert wl.input("b", (2,), np.dtype("int64")).dtype == "int64"
    assert wl.input("c", (2,), bool).dtype == "bool"
