"""Conformance cases for argmax / argmin and user reducers (issue 29, item 3), appended to
OPERATOR_CASES.  Each returns (workload, expected outputs from the inputs, in numpy)."""

from __future__ import annotations

import numpy as np

import ptowsp as pw


def argmax_rows(m: int = 13, n: int = 37):
    """The first maximum of each row, then the row's element there (a gather by the int64 index)."""
    wl = pw.Workload("argmax_rows")
    x = wl.input("X", (m, n))
    r = pw.reduce_axis(n, "r")
    idx = wl.compute("I", (m,), lambda i: pw.argmax(x[i, r], axis=r))
    wl.output(idx, wl.compute("V", (m,), lambda i: x[i, idx[i]] * 2.0))

    def expected(p):
        i = np.argmax(p["X"], axis=1)
        return {"I": i, "V": p["X"][np.arange(m), i] * 2.0}

    return wl, expected


def argmin_ties(m: int = 11, n: int = 29):
    """Integers in -5..5 folded to 0..2: many ties, and the first index must win on every schedule."""
    wl = pw.Workload("argmin_ties")
    x = wl.input("X", (m, n), "int32")
    r = pw.reduce_axis(n, "r")
    wl.output(wl.compute("I", (m,), lambda i: pw.argmin(x[i, r] % 3, axis=r)))
    return wl, lambda p: {"I": np.argmin(np.mod(p["X"], 3), axis=1)}


def argmax_two_axes(b: int = 5, h: int = 6, w: int = 7):
    """argmax over (y, x): the flat row-major index, as numpy's argmax of the reshaped image."""
    wl = pw.Workload("argmax_two_axes")
    x = wl.input("X", (b, h, w), "int32")
    y, xx = pw.reduce_axis(h, "y"), pw.reduce_axis(w, "x")
    wl.output(wl.compute("I", (b,), lambda i: pw.argmax(x[i, y, xx], axis=(y, xx))))
    return wl, lambda p: {"I": np.argmax(p["X"].reshape(b, -1), axis=1)}


def argmax_in_expression(m: int = 9, n: int = 21):
    """An argmin beside a sum in one expression: both hoisted into scalar loops of their own."""
    wl = pw.Workload("argmax_in_expression")
    x = wl.input("X", (m, n))
    r, s = pw.reduce_axis(n, "r"), pw.reduce_axis(n, "s")
    wl.output(wl.compute("Y", (m,), lambda i: pw.cast(pw.argmin(x[i, r], axis=r), "float32") * 0.5
                         + pw.sum(x[i, s], axis=s)))
    return wl, lambda p: {"Y": np.argmin(p["X"], axis=1) * 0.5 + p["X"].sum(axis=1)}


REDUCTION_CASES = [argmax_rows, argmin_ties, argmax_two_axes, argmax_in_expression]


def reducer_product(m: int = 8, n: int = 13):
    """A product reducer over int32 (-5..5): wraps in int32 as numpy's prod does, in any order."""
    prod = pw.reducer(combine=lambda a, b: a * b, identity=1, name="prod")
    wl = pw.Workload("reducer_product")
    x = wl.input("X", (m, n), "int32")
    r = pw.reduce_axis(n, "r")
    wl.output(wl.compute("P", (m,), lambda i: prod(x[i, r], axis=r)))
    return wl, lambda p: {"P": np.prod(p["X"], axis=1, dtype=np.int32)}


def reducer_logsumexp(m: int = 9, n: int = 35):
    """log-add-exp as one-value reducer (identity -inf, guarded so -inf with -inf stays -inf), and an
    epilogue on its result."""
    def lae(a, b):
        hi = pw.maximum(a, b)
        return pw.where(hi == float("-inf"), hi, hi + pw.log(pw.exp(a - hi) + pw.exp(b - hi)))

    lse = pw.reducer(combine=lae, identity=float("-inf"), name="logaddexp")
    wl = pw.Workload("reducer_logsumexp")
    x = wl.input("X", (m, n))
    r = pw.reduce_axis(n, "r")
    wl.output(wl.compute("L", (m,), lambda i: lse(x[i, r], axis=r) * 0.5))
    return wl, lambda p: {"L": np.logaddexp.reduce(p["X"], axis=1) * 0.5}


REDUCTION_CASES += [reducer_product, reducer_logsumexp]
EXACT_CASES = {argmax_rows, argmin_ties, argmax_two_axes, reducer_product}  # integer results: compared exactly
