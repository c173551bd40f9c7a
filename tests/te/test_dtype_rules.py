"""The dtype rules of docs/expressions.md against numpy, on the reference and the cpu target.

Promotion is checked exhaustively against `numpy.result_type`; wrapping
arithmetic, casts and saturating casts with hypothesis-drawn values (the
edges of every range, NaN, infinities, -0.0) against numpy on arrays of the
same dtype, or against a formula written here in plain Python where numpy
leaves the result undefined (float -> integer out of range).  Each program
is compiled once and run on every drawn example, under the default schedule
(vector code with a tail) and the empty one (scalar code).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.te import dtypes

ALL = dtypes.DTYPES
INTS = [*dtypes.SIGNED_DTYPES, *dtypes.UNSIGNED_DTYPES]
N = 37  # elements per drawn array: a vector body and a tail


def values(dtype: str) -> st.SearchStrategy:
    """Scalars of a dtype, edges and specials included."""
    if dtype == "bool":
        return st.booleans()
    if dtype in INTS:
        lo, hi = dtypes.int_range(dtype)
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1, lo + 1, hi - 1]))
    width = 64 if dtype == "float64" else 32  # (float16 and bfloat16: rounded from float32 by numpy)
    return st.one_of(st.floats(width=width), st.sampled_from([0.0, -0.0, 0.5, -2.5, 1e30, -1e30, 3e38, 1e300]))


def arrays(dtype: str) -> st.SearchStrategy:
    return st.lists(values(dtype), min_size=N, max_size=N).map(lambda v: _array(v, dtype))


def _array(v: list, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):  # 1e300 as float32: inf, as numpy converts it
        wide = np.array(v, dtype=np.float64) if dtype in dtypes.FLOATS else np.array(v, dtype=object)
        return dtypes.cast_array(wide, dtype) if dtype in dtypes.FLOATS else wide.astype(dtype)


@functools.cache
def programs(wl_maker, *args) -> tuple[pw.Workload, list]:
    wl = wl_maker(*args)
    return wl, [pw.build(wl, target="cpu"), pw.build(wl.schedule(), target="cpu")]


def check(wl_maker, args, inputs: dict, expected: dict) -> None:
    """The reference and both cpu builds give exactly `expected` (NaN where it has NaN)."""
    wl, built = programs(wl_maker, *args)
    for name, got in [("reference", pw.reference(wl, **inputs)), *[(f"cpu {k}", p.run(**inputs))
                                                                   for k, p in enumerate(built)]]:
        for out, want in expected.items():
            assert got[out].dtype == want.dtype, (name, out)
            as_float = want.dtype.name in dtypes.FLOATS  # (numpy does not see bfloat16's NaNs: compare as float64)
            np.testing.assert_array_equal(got[out].astype(np.float64) if as_float else got[out],
                                          want.astype(np.float64) if as_float else want,
                                          err_msg=f"{out} on {name}, inputs {inputs}")


# -- promotion -------------------------------------------------------------------------------------


@pytest.mark.parametrize("a", ALL)
@pytest.mark.parametrize("b", ALL)
def test_promotion_is_numpys_table(a, b):
    wl = pw.Workload("p")
    x, y = wl.input("x", (2,), a), wl.input("y", (2,), b)
    got = pw.maximum(x[0], y[0]).dtype
    try:
        numpy = np.result_type(a, b).name
    except TypeError:  # ml_dtypes leaves bfloat16 with most types undefined
        numpy = None
    if "bfloat16" not in (a, b):
        assert got == numpy
    else:  # bfloat16 promotes as float16 does; with float16 itself, float32
        other = b if a == "bfloat16" else a
        as_float16 = np.result_type("float16", other).name if other != "bfloat16" else "bfloat16"
        assert got == {"float16": "bfloat16"}.get(as_float16, as_float16) if other != "float16" else "float32"
        assert numpy is None or numpy == got


@pytest.mark.parametrize("dtype", [*INTS, "float16", "bfloat16", "float32"])
@given(value=st.one_of(st.integers(-(2**65), 2**65), st.floats(-1e3, 1e3)))
@settings(max_examples=40)
def test_python_scalars_are_weak(dtype, value):
    """A Python scalar takes the other operand's dtype (NEP 50); an int that does not fit is an error.
    (ml_dtypes makes bfloat16 + a Python float float32; ptowsp keeps bfloat16, as for float16.)"""
    wl = pw.Workload("w")
    x = wl.input("x", (2,), dtype)
    try:
        with np.errstate(over="ignore"):
            want = "bfloat16" if dtype == "bfloat16" else (np.zeros(2, dtype) + value).dtype.name
    except OverflowError:
        with pytest.raises(pw.DTypeError, match=f"constant {value} does not fit the {dtype} operand"):
            _ = x[0] + value
        return
    assert (x[0] + value).dtype == want == (value * x[1]).dtype


# -- integer arithmetic wraps -------------------------------------------------------------------------

_INT_OPS = {"add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
            "mul": (lambda a, b: a * b, np.multiply), "floordiv": (lambda a, b: a // b, np.floor_divide),
            "mod": (lambda a, b: a % b, np.remainder), "max": (pw.maximum, np.maximum),
            "min": (pw.minimum, np.minimum), "bitand": (lambda a, b: a & b, np.bitwise_and),
            "bitor": (lambda a, b: a | b, np.bitwise_or), "lt": (lambda a, b: a < b, np.less),
            "ge": (lambda a, b: a >= b, np.greater_equal)}


def _int_ops(dtype: str) -> pw.Workload:
    wl = pw.Workload(f"ops_{dtype}")
    a, b = wl.input("a", (N,), dtype), wl.input("b", (N,), dtype)
    for name, (fn, _) in _INT_OPS.items():
        wl.output(wl.compute(name, (N,), lambda i, fn=fn: fn(a[i], b[i])))
    wl.output(wl.compute("neg", (N,), lambda i: -a[i]), wl.compute("abs", (N,), lambda i: pw.abs(a[i])),
              wl.compute("plus_one", (N,), lambda i: a[i] + 1), wl.compute("invert", (N,), lambda i: ~a[i]))
    return wl


@pytest.mark.parametrize("dtype", INTS)
@given(data=st.data())
@settings(max_examples=15)
def test_integer_arithmetic_wraps_as_numpy(dtype, data):
    a, b = data.draw(arrays(dtype)), data.draw(arrays(dtype))
    with np.errstate(all="ignore"):
        expected = {name: np_fn(a, b) for name, (_, np_fn) in _INT_OPS.items()}
        expected |= {"neg": -a, "abs": np.abs(a), "plus_one": a + 1, "invert": ~a}
    check(_int_ops, (dtype,), {"a": a, "b": b}, expected)


def test_uint8_wraps_as_halide_says():
    wl = pw.Workload("u8")
    x = wl.input("x", (1,), "uint8")
    wl.output(wl.compute("y", (1,), lambda i: x[i] + 100))
    got = pw.build(wl, target="cpu").run(x=np.array([200], np.uint8))["y"]
    assert got.dtype == np.uint8 and got[0] == 44


# -- casts ------------------------------------------------------------------------------------------


def _expected_cast(x: np.ndarray, dst: str, saturate: bool = False) -> np.ndarray:
    """The cast rules, written from their statement (plain Python for float -> int)."""
    src = x.dtype.name
    if dst in INTS and src in dtypes.FLOATS:
        lo, hi = dtypes.int_range(dst)
        out = [0 if math.isnan(v) else min(max(math.trunc(v), lo), hi) if math.isfinite(v) else (hi if v > 0 else lo)
               for v in x.astype(np.float64).tolist()]
        return np.array(out, dtype=object).astype(dst)
    if saturate and dst in INTS and src in INTS:
        lo, hi = dtypes.int_range(dst)
        return np.array([min(max(int(v), lo), hi) for v in x.tolist()], dtype=object).astype(dst)
    if saturate and dst in dtypes.FLOATS and src in INTS and dtypes.float_max(dst) < dtypes.int_range(src)[1]:
        top = int(dtypes.float_max(dst))  # at the float's largest integer (exact in float64)
        x = np.array([min(max(int(v), -top), top) for v in x.tolist()], dtype=np.float64)
    elif saturate and dst in dtypes.FLOATS and src in dtypes.FLOATS and dtypes.float_max(dst) < dtypes.float_max(src):
        top = dtypes.float_max(dst)  # a narrower float: at its largest finite value; NaN stays
        x = np.clip(x.astype(np.float64), -top, top)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float32) if dst == "bfloat16" and x.dtype.name != "float32" else x
        return wide.astype(dst)


def _casts(src: str, saturating: bool) -> pw.Workload:
    wl = pw.Workload(f"casts_{src}")
    x = wl.input("x", (N,), src)
    convert = pw.saturating_cast if saturating else pw.cast
    for dst in ALL:
        if dst != src:
            wl.output(wl.compute(f"to_{dst}", (N,), lambda i, dst=dst: convert(x[i], dst)))
    return wl


@pytest.mark.parametrize("saturating", [False, True], ids=["cast", "saturating_cast"])
@pytest.mark.parametrize("src", ALL)
@given(data=st.data())
@settings(max_examples=12)
def test_casts(src, saturating, data):
    """pw.cast: integers wrap, floats round to nearest even, float -> int truncates and saturates
    (NaN -> 0); pw.saturating_cast: clamps to the target's range first."""
    x = data.draw(arrays(src))
    expected = {f"to_{dst}": _expected_cast(x, dst, saturating) for dst in ALL if dst != src}
    check(_casts, (src, saturating), {"x": x}, expected)


def test_cast_of_a_constant_folds_by_the_same_rules():
    assert pw.cast(300, "uint8").arg == 44
    assert pw.cast(-1, "uint16").arg == 65535
    assert pw.cast(pw.cast(2.9e10, "float64"), "int32").arg == 2**31 - 1
    assert pw.cast(float("nan"), "int8").arg == 0
    assert pw.cast(-7.9, "int8").arg == -7
    assert pw.saturating_cast(300, "uint8").arg == 255
    assert pw.saturating_cast(-5, "uint8").arg == 0
    assert pw.saturating_cast(1e6, "float16").arg == 65504.0


# -- bfloat16: float32 arithmetic, one rounding per operation ----------------------------------------------

_BF16_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


def _bfloat16_ops() -> pw.Workload:
    wl = pw.Workload("bf16")
    a, b = wl.input("a", (N,), "bfloat16"), wl.input("b", (N,), "bfloat16")
    for name, fn in (("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y),
                     ("div", lambda x, y: x / y)):
        wl.output(wl.compute(name, (N,), lambda i, fn=fn: fn(a[i], b[i])))
    wl.output(wl.compute("fma", (N,), lambda i: a[i] * b[i] + a[i]))  # two roundings: never fused
    return wl


@given(data=st.data())
@settings(max_examples=25)
def test_bfloat16_rounds_after_each_operation(data):
    a, b = data.draw(arrays("bfloat16")), data.draw(arrays("bfloat16"))
    wa, wb = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        expected = {name: fn(wa, wb).astype("bfloat16") for name, fn in _BF16_OPS.items()}
        expected["fma"] = ((wa * wb).astype("bfloat16").astype(np.float32) + wa).astype("bfloat16")
        for name, fn in _BF16_OPS.items():  # which is what numpy computes with ml_dtypes
            np.testing.assert_array_equal(fn(a, b).astype(np.float64), expected[name].astype(np.float64))
    check(_bfloat16_ops, (), {"a": a, "b": b}, expected)


# -- inputs, outputs and errors --------------------------------------------------------------------


@pytest.mark.parametrize("dtype, given", [("uint8", "int8"), ("bfloat16", "float32"), ("int16", "uint16"),
                                          ("uint64", "int64")])
def test_inputs_of_another_dtype_are_refused_on_every_target(dtype, given):
    wl = pw.Workload("inputs")
    x = wl.input("x", (4,), dtype)
    wl.output(wl.compute("y", (4,), lambda i: x[i] + 1))
    wrong = np.zeros(4, given)
    for run in (lambda: pw.reference(wl, x=wrong), lambda: pw.build(wl, target="cpu").run(x=wrong)):
        with pytest.raises(pw.InputError, match=f"expected a {dtype} array .* got dtype {given}; "
                                                f"convert with .astype\\('{dtype}'\\)"):
            run()
    out = pw.build(wl, target="cpu").run(x=np.full(4, 7, dtype))["y"]
    assert out.dtype == np.dtype(dtype) and (out == np.full(4, 8, dtype)).all()


def test_a_python_int_that_does_not_fit_says_what_to_do():
    x = pw.Workload("e").input("x", (2,), "uint8")
    with pytest.raises(pw.DTypeError, match=r"constant 300 does not fit the uint8 operand it meets \(range "
                                            r"0\.\.255\); cast the"):
        _ = x[0] + 300
    assert (pw.cast(x[0], "int16") + 300).dtype == "int16"


def test_clamp_and_saturating_cast_build_plain_expressions():
    x = pw.Workload("c").input("x", (2,), "int16")
    assert str(pw.clamp(x[0], 0, 255)) == "minimum(maximum(x[0], 0), 255)"
    assert str(pw.saturating_cast(x[0], "uint8")) == "uint8(minimum(maximum(x[0], 0), 255))"
    assert str(pw.saturating_cast(x[0], "int32")) == "int32(x[0])"  # int32 holds every int16


@pytest.mark.parametrize("saturating", [False, True], ids=["cast", "saturating_cast"])
def test_a_float16_nan_casts_to_zero_in_the_scalar_tail(saturating):
    """Found by test_casts: LLVM's half -> i16 saturating conversion gave -32768 for a NaN in the
    scalar tail of the loop (the vector body was right); float16 is widened to float32 first now."""
    x = np.zeros(N, np.float16)
    x[-1] = x[0] = np.nan
    expected = {f"to_{dst}": _expected_cast(x, dst, saturating) for dst in ALL if dst != "float16"}
    check(_casts, ("float16", saturating), {"x": x}, expected)


@pytest.mark.parametrize("level", ["host", "x86-64-v3"])
@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "uint16"])
def test_a_float_cast_to_a_narrow_integer_is_vector_code(level, dst, monkeypatch):
    """No lane is clamped and converted alone (LLVM scalarizes `fptosi.sat` to 8 and 16 bits: ResNet-50
    int8's requantizations on AVX-512, 16.5 -> 10.1 ms when they became vector code)."""
    monkeypatch.setenv("PTOWSP_CPU", level)
    wl = pw.Workload("narrow")
    x = wl.input("x", (64,), "float32")
    wl.output(wl.compute("y", (64,), lambda i: pw.cast(x[i] * 3.0, dst)))
    asm = pw.build(wl.schedule().split("y", "i", 8).vectorize("y", "i.inner"), target="cpu").source("y", "asm")
    assert "cvttps2dq" in asm and "cvttss2si" not in asm
