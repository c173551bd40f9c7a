"""Property tests: random expression trees and shapes, reference vs a slow scalar evaluator.

The generator has two sorts.  *Exact* expressions (integers, and floats built
from small integers with + - * max min abs floor ...) must match bit for bit,
including after discontinuous operations (//, %, comparisons, casts).
*Inexact* ones (division, transcendental functions, powers) only feed
continuous operations and match within a float tolerance.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.errors import DTypeError
from ptowsp.te import evaluate
from tests.te.scalar_eval import scalar_compute

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
FLOATS = ["float32", "float64"]


class Gen:
    """Draws random expressions over given tensors and loop variables."""

    def __init__(self, draw, tensors, loops):
        self.draw, self.tensors, self.loops, self.bound = draw, tensors, list(loops), []
        self.axis_count = 0

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def var(self):
        return self.pick(self.loops + self.bound)

    def load(self):
        t = self.pick(self.tensors)
        if t.ndim and self.draw(st.booleans()):  # guarded, stencil-style: where(in bounds, t[v + c], 0)
            idx = [self.var() + self.draw(st.integers(-2, 2)) for _ in t.shape]
            inside = None
            for e, n in zip(idx, t.shape):
                c = (e >= 0) & (e < n)
                inside = c if inside is None else inside & c
            return pw.where(inside, t[tuple(idx)], self.pick([0, 1]) if t.dtype != "bool" else False)
        idx = []
        for n in t.shape:
            form = self.pick(["const", "mod", "shifted"])
            if form == "const":
                idx.append(self.draw(st.integers(0, n - 1)))
            elif form == "mod":
                idx.append(self.var() % n)
            else:
                idx.append((self.var() * self.draw(st.integers(1, 2)) + self.draw(st.integers(-3, 3))) % n)
        return t[tuple(idx)]

    def leaf(self):
        kind = self.pick(["load", "load", "var", "int", "float", "bool"])
        if kind == "load":
            return self.load()
        if kind == "var":
            return self.var()
        if kind == "int":
            return pw.cast(self.draw(st.integers(-3, 3)), self.pick(["int32", "int64"]))
        if kind == "float":
            return pw.cast(float(self.draw(st.integers(-3, 3))), self.pick(FLOATS))
        return pw.cast(self.draw(st.booleans()), "bool")

    def attempt(self, build, fallback):
        try:
            return build()
        except DTypeError:
            return fallback

    def reduction(self, body_sort, depth):
        axis = pw.reduce_axis(self.draw(st.integers(1, 3)), f"r{self.axis_count}")
        self.axis_count += 1
        self.bound.append(axis)
        body = body_sort(depth - 1)
        self.bound.pop()
        kind = self.pick(["sum", "max", "min"])
        # pw.sum refuses bool bodies; max is defined for every dtype
        return self.attempt(lambda: getattr(pw, kind)(body, axis), pw.max(body, axis))

    def exact(self, depth):
        if depth <= 0:
            return self.leaf()
        kind = self.pick(["leaf", "arith", "arith", "unary", "where", "cast", "intdiv", "reduce"])
        if kind == "leaf":
            return self.leaf()
        if kind == "reduce":
            return self.reduction(self.exact, depth)
        a = self.exact(depth - 1)
        if kind == "unary":
            op = self.pick([lambda x: -x, abs, pw.floor, pw.ceil, lambda x: ~x])
            return self.attempt(lambda: op(a), a)
        if kind == "cast":
            return pw.cast(a, self.pick(DTYPES))
        b = self.exact(depth - 1)
        if kind == "where":
            return pw.where(self.cond(depth - 1), a, b)
        if kind == "intdiv":
            if a.dtype not in ("int32", "int64") or b.dtype not in ("int32", "int64"):
                return a
            return self.pick([lambda: a // b, lambda: a % b])()
        op = self.pick([lambda: a + b, lambda: a - b, lambda: a * b, lambda: pw.maximum(a, b),
                        lambda: pw.minimum(a, b), lambda: a & b, lambda: a | b])
        return self.attempt(op, a)

    def cond(self, depth):
        kind = self.pick(["cmp", "cmp", "and", "or", "not"]) if depth > 0 else "cmp"
        if kind == "cmp":
            a, b = self.exact(depth - 1), self.exact(depth - 1)
            return self.pick([a < b, a <= b, a > b, a >= b, a == b, a != b])
        if kind == "not":
            return ~self.cond(depth - 1)
        a, b = self.cond(depth - 1), self.cond(depth - 1)
        return a & b if kind == "and" else a | b

    def inexact(self, depth):
        if depth <= 0:
            return pw.cast(self.exact(0), self.pick(FLOATS))
        kind = self.pick(["from_exact", "unary", "binary", "binary", "where", "reduce"])
        if kind == "from_exact":
            return pw.cast(self.exact(depth - 1), self.pick(FLOATS))
        if kind == "reduce":
            return self.reduction(self.inexact, depth)
        a = self.inexact(depth - 1)
        if kind == "unary":
            fn = self.pick([pw.exp, pw.log, pw.sqrt, pw.rsqrt, pw.tanh, pw.sigmoid, pw.erf, pw.abs])
            return fn(a)
        b = self.inexact(depth - 1)
        if kind == "where":
            return pw.where(self.cond(depth - 1), a, b)
        return self.pick([a + b, a - b, a * b, a / b, pw.pow(a, b), pw.maximum(a, b), pw.minimum(a, b)])


@st.composite
def cases(draw):
    wl = pw.Workload("prop")
    tensors, arrays = [], {}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    for n in range(draw(st.integers(1, 3))):
        shape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2))))
        dtype = draw(st.sampled_from(DTYPES))
        tensors.append(wl.input(f"T{n}", shape, dtype))
        values = rng.integers(0, 2, shape) if dtype == "bool" else rng.integers(-3, 4, shape)
        arrays[f"T{n}"] = np.asarray(values).astype(dtype)
    shape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 2))))
    sort = draw(st.sampled_from(["exact", "cond", "inexact"]))
    depth = draw(st.integers(1, 4))

    def body(*loops):
        gen = Gen(draw, tensors, loops)
        return {"exact": gen.exact, "cond": gen.cond, "inexact": gen.inexact}[sort](depth)

    fn = (lambda i: body(i)) if len(shape) == 1 else (lambda i, j: body(i, j))
    out = wl.compute("Out", shape, fn)
    wl.output(out)
    return wl, arrays, sort


def _check(got, expected, sort):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if sort == "inexact":
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


# Derandomized so CI is stable; run with HYPOTHESIS_RANDOM=1 to explore new examples.
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow],
          derandomize=not os.environ.get("HYPOTHESIS_RANDOM"))
@given(cases())
def test_reference_matches_scalar_evaluator(case):
    wl, arrays, sort = case
    task = wl.task("Out")
    str(task)  # every generated tree prints
    expected = scalar_compute(task.body, task.loop_names, task.tensor.shape, arrays)
    _check(pw.reference(wl, **arrays)["Out"], expected, sort)
    # tiny chunks exercise the chunking of outputs and of reductions
    _check(evaluate(task.body, task.loop_names, task.tensor.shape, arrays, budget=2), expected, sort)
