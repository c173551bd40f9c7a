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


# -- several values: a tuple identity, a tuple body, one REDUCE per value ---------------------------


def _lse_pair(a, b):
    m = pw.maximum(a[0], b[0])
    return (m, a[1] * pw.exp(a[0] - m) + b[1] * pw.exp(b[0] - m))


LSE = pw.reducer(combine=_lse_pair, identity=(float("-inf"), 0.0), name="lse_pair")


def _pair_rows(values, shape=(6, 11), dtype="float32"):
    """A workload storing f(*values) of LSE-like reducer calls built by `values(x, i, r)`."""
    wl = pw.Workload("pair")
    x = wl.input("X", shape, dtype)
    r = pw.reduce_axis(shape[1], "r")
    wl.output(wl.compute("Y", shape[:1], lambda i: values(x, i, r)))
    return wl


def test_a_tuple_body_gives_one_expression_per_value():
    wl = pw.Workload("lse")
    x = wl.input("X", (4, 9))
    r = pw.reduce_axis(9, "r")
    m, s = LSE((x[0, r], 1.0), axis=r)
    assert (m.dtype, s.dtype) == ("float32", "float32")  # 1.0 is weak beside X's float32
    assert m.src[0] is s.src[0] and str(m).startswith("lse_pair<(") and str(m).endswith(">[0]((X[0, r], 1.0), r)")


def test_pair_reference_matches_logaddexp():
    wl = _pair_rows(lambda x, i, r: (lambda m, s: m + pw.log(s))(*LSE((x[i, r], 1.0), axis=r)))
    x = np.random.default_rng(2).standard_normal((6, 11)).astype(np.float32)
    np.testing.assert_allclose(pw.reference(wl, X=x)["Y"], np.logaddexp.reduce(x, axis=1), rtol=1e-5)


@pytest.mark.parametrize(("body", "identity", "dtypes"), [
    (lambda x: (x, 1.0), (0.0, 0.0), ("float32", "float32")),  # a Python scalar is weak beside the first Expr
    (lambda x: (x, 1.0), (0.0, np.float64(0.0)), ("float32", "float64")),  # ... unless the identity has a dtype
    (lambda x: (x, np.float64(1.0)), (0.0, 0.0), ("float32", "float64")),  # a numpy scalar keeps its own
    (lambda x: (pw.cast(x, "int32"), 1), (0, 0), ("int32", "int32")),
    (lambda x: (pw.cast(x, "int32"), 0.5), (0, 0), ("int32", "float64")),  # NEP 50: a float beside int32
    (lambda x: (2, 0.5), (0, 0), ("int64", "float64")),  # no Expr at all: the scalars' own dtypes
])
def test_value_dtypes(body, identity, dtypes):
    wl = pw.Workload("dt")
    x = wl.input("X", (3, 4))
    r = pw.reduce_axis(4, "r")
    pair = pw.reducer(combine=lambda a, b: (a[0] + b[0], a[1] + b[1]), identity=identity, name="twin")
    values = pair(body(x[0, r]), axis=r)
    assert tuple(v.dtype for v in values) == dtypes
    assert tuple(i.dtype for i in values[0].arg.reducer.identities) == dtypes  # identities cast to them


def test_wrong_body_length_is_refused():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 5))
    r = pw.reduce_axis(5, "r")
    with pytest.raises(pw.ShapeError, match="reducer lse_pair reduces 2 values .* a tuple of 3"):
        LSE((x[0, r], 1.0, 2.0), axis=r)
    with pytest.raises(pw.ShapeError, match="reducer lse_pair reduces 2 values .* one value"):
        LSE(x[0, r], axis=r)
    prod = pw.reducer(combine=lambda a, b: a * b, identity=1, name="prod")
    with pytest.raises(pw.ShapeError, match="reducer prod reduces one value"):
        prod((x[0, r], 1), axis=r)


def test_combine_returning_the_wrong_length_is_refused():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 5))
    r = pw.reduce_axis(5, "r")
    short = pw.reducer(combine=lambda a, b: (a[0] + b[0],), identity=(0.0, 0.0), name="short")
    with pytest.raises(pw.ShapeError, match="reducer short: combine must return a tuple of 2 .* got a tuple of 1"):
        short((x[0, r], x[0, r]), axis=r)
    single = pw.reducer(combine=lambda a, b: a[0] + b[0], identity=(0.0, 0.0), name="single")
    with pytest.raises(pw.ShapeError, match="reducer single: combine must return a tuple of 2 .* got one value"):
        single((x[0, r], x[0, r]), axis=r)


def test_combine_changing_a_dtype_is_refused():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 5), "int32")
    r = pw.reduce_axis(5, "r")
    mean = pw.reducer(combine=lambda a, b: (a[0] + b[0], (a[1] + b[1]) / 2), identity=(0, 0), name="mean")
    with pytest.raises(pw.DTypeError, match="reducer mean: combine gives value 1 as float64 .* value 1 is int32"):
        mean((x[0, r], x[0, r]), axis=r)


def test_combine_of_several_reading_a_tensor_is_refused():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 5))
    r = pw.reduce_axis(5, "r")
    bad = pw.reducer(combine=lambda a, b: (a[0] + b[0], a[1] + b[1] * x[0, 0]), identity=(0.0, 0.0), name="bad")
    with pytest.raises(pw.WorkloadError, match="reducer bad: combine may use only"):
        bad((x[0, r], x[0, r]), axis=r)


def test_different_tuple_combines_give_different_fingerprints():
    add = pw.reducer(combine=lambda a, b: (a[0] + b[0], a[1] + b[1]), identity=(0.0, 0.0), name="pair")
    mix = pw.reducer(combine=lambda a, b: (a[0] + b[0], a[1] * b[1]), identity=(0.0, 0.0), name="pair")
    first = _pair_rows(lambda x, i, r: add((x[i, r], x[i, r]), axis=r)[1])
    second = _pair_rows(lambda x, i, r: mix((x[i, r], x[i, r]), axis=r)[1])
    assert first.fingerprint != second.fingerprint


def test_storing_the_whole_tuple_says_to_combine_the_values():
    with pytest.raises(pw.ShapeError, match="returned 2 values .*a task stores one"):
        _pair_rows(lambda x, i, r: LSE((x[i, r], 1.0), axis=r))
