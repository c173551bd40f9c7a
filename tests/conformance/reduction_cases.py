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


def _lse_pair(a, b):
    m = pw.maximum(a[0], b[0])
    return (m, a[1] * pw.exp(a[0] - m) + b[1] * pw.exp(b[0] - m))


def pair_logsumexp(m: int = 7, n: int = 29):
    """log-sum-exp as a (running max, scaled sum) pair folded in one pass; the epilogue reads both."""
    lse = pw.reducer(combine=_lse_pair, identity=(float("-inf"), 0.0), name="lse_pair")
    wl = pw.Workload("pair_logsumexp")
    x = wl.input("X", (m, n))
    k = pw.reduce_axis(n, "k")

    def row(i):
        top, scaled = lse((x[i, k], 1.0), axis=k)
        return top + pw.log(scaled)

    wl.output(wl.compute("Y", (m,), row))
    return wl, lambda p: {"Y": np.logaddexp.reduce(p["X"], axis=1)}


def _first_max(a, b):
    take = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
    return pw.where(take, b[0], a[0]), pw.where(take, b[1], a[1])


def pair_argmax(m: int = 9, n: int = 23):
    """argmax written as a user (value, index) reducer with first-index ties, over values 0..3 (many
    ties); the task stores the index, and a second one the pair's value."""
    low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    first_max = pw.reducer(combine=_first_max, identity=(low, high), name="first_max")
    wl = pw.Workload("pair_argmax")
    x = wl.input("X", (m, n), "int32")
    r, s = pw.reduce_axis(n, "r"), pw.reduce_axis(n, "s")
    index = wl.compute("I", (m,), lambda i: first_max((x[i, r] % 4, pw.cast(r, "int32")), axis=r)[1])
    value = wl.compute("V", (m,), lambda i: first_max((x[i, s] % 4, pw.cast(s, "int32")), axis=s)[0] * 10)
    wl.output(index, value)
    return wl, lambda p: {"I": np.argmax(np.mod(p["X"], 4), axis=1).astype(np.int32),
                          "V": np.mod(p["X"], 4).max(axis=1).astype(np.int32) * 10}


def pair_mean_variance(m: int = 6, n: int = 5, w: int = 7):
    """Sum and sum of squares over two axes in one pass, an epilogue making the variance of both."""
    moments = pw.reducer(combine=lambda a, b: (a[0] + b[0], a[1] + b[1]), identity=(0.0, 0.0), name="moments")
    wl = pw.Workload("pair_mean_variance")
    x = wl.input("X", (m, n, w))
    y, z = pw.reduce_axis(n, "y"), pw.reduce_axis(w, "z")

    def variance(i):
        total, squares = moments((x[i, y, z], x[i, y, z] * x[i, y, z]), axis=(y, z))
        mean = total / (n * w)
        return squares / (n * w) - mean * mean

    wl.output(wl.compute("Var", (m,), variance))
    return wl, lambda p: {"Var": p["X"].reshape(m, -1).var(axis=1)}


REDUCTION_CASES += [pair_logsumexp, pair_argmax, pair_mean_variance]
EXACT_CASES = {argmax_rows, argmin_ties, argmax_two_axes, reducer_product, pair_argmax}  # integer results: exact
