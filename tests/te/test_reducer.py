"""pw.reducer: one-value commutative reducers, checked against numpy, and their misuse."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def _rows(r_fn, x_dtype="float32", shape=(6, 11)):
    wl = pw.Workload("red")
    x = wl.input("X", shape, x_dtype)
    r = pw.reduce_axis(shape[1], "r")
    wl.output(wl.compute("Y", shape[:1], lambda i: r_fn(x[i, r], axis=r)))
    return wl


def test_product_wraps_like_numpy():
    prod = pw.reducer(combine=lambda a, b: a * b, identity=1, name="prod")
    x = np.random.default_rng(0).integers(-9, 10, (6, 11)).astype(np.int32)
    np.testing.assert_array_equal(pw.reference(_rows(prod, "int32"), X=x)["Y"], np.prod(x, axis=1, dtype=np.int32))


def test_identity_may_depend_on_the_dtype():
    biggest = pw.reducer(combine=pw.maximum, identity=lambda dt: np.iinfo(dt).min, name="biggest")
    x = np.random.default_rng(1).integers(-9, 10, (6, 11)).astype(np.int16)
    np.testing.assert_array_equal(pw.reference(_rows(biggest, "int16"), X=x)["Y"], x.max(axis=1))


def test_odd_lengths_fold_every_element():
    total = pw.reducer(combine=lambda a, b: a + b, identity=0)
    for n in (1, 2, 3, 7, 13):
        x = np.arange(4 * n, dtype=np.int64).reshape(4, n)
        np.testing.assert_array_equal(pw.reference(_rows(total, "int64", (4, n)), X=x)["Y"], x.sum(axis=1))


def test_combine_reading_a_tensor_is_refused():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 5))
    r = pw.reduce_axis(5, "r")
    bad = pw.reducer(combine=lambda a, b: a + b * x[0, 0], identity=0.0, name="bad")
    with pytest.raises(pw.WorkloadError, match="combine may use only"):
        bad(x[0, r], axis=r)


def test_combine_changing_the_dtype_is_refused():
    halve = pw.reducer(combine=lambda a, b: (a + b) / 2, identity=0)
    with pytest.raises(pw.DTypeError, match="cast it back"):
        _rows(halve, "int32")


def test_different_combines_give_different_fingerprints():
    add = pw.reducer(combine=lambda a, b: a + b, identity=0.0)
    mul = pw.reducer(combine=lambda a, b: a * b, identity=0.0)
    assert _rows(add).fingerprint != _rows(mul).fingerprint
