"""Simplification after inlining and let-bound common subexpressions (issue 29, item 7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower import Let, lower_program, to_source
from ptowsp.lower.cse import bind_common
from ptowsp.lower.interpret import interpret
from ptowsp.lower.ir import Buffer, For, Store, let_var, var, walk_stmts
from ptowsp.lower.simplify import simplify_expr
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.te import Op, cast, const, walk, where
from tests.conformance.catalogue import random_inputs
from tests.conformance.edge_cases import image_pipeline

X = Buffer("X", (8,), "float32")
N = Buffer("N", (8,), "int32")
i = var("i", 8)


def test_constant_conditions_and_comparisons_fold():
    zero = const(0, "int64")
    assert simplify_expr(where(zero == 0, X[i], X[i] * 2.0)).same_as(X[i])
    assert simplify_expr(where(i >= 0, X[i], 0.0)).same_as(X[i])  # a loop variable is never negative
    assert simplify_expr(where(i < 8, X[i], 0.0)).same_as(X[i])
    kept = where(i - 1 >= 0, X[i - 1], 0.0)
    assert simplify_expr(kept).op is Op.WHERE  # i == 0 makes it false
    assert simplify_expr((i >= 0) & (N[i] > 0)).same_as(N[i] > 0)


def test_folding_evaluates_constants_as_the_reference_does():
    assert simplify_expr(const(3.0, "float32") - const(2.0, "float32") * const(0.5, "float32")).arg == 2.0
    assert simplify_expr(cast(const(2.5, "float32") * const(3.0, "float32"), "int32")).arg == 7
    assert simplify_expr(const(-7, "int32") // const(2, "int32")).arg == -4  # floor division
    assert simplify_expr(const(2**31 - 1, "int32") + const(1, "int32")).arg == -(2**31)  # wraps
    exp = pw.exp(const(1.0, "float32"))
    assert simplify_expr(exp).op is Op.EXP  # the target's own exp, not numpy's


def test_identities_hold_bit_for_bit_only():
    x = X[i]
    assert simplify_expr(x * 1.0).same_as(x) and simplify_expr(x / 1.0).same_as(x)
    assert simplify_expr(x - 0.0).same_as(x) and simplify_expr(x + -0.0).same_as(x)
    assert simplify_expr(x + 0.0).op is Op.ADD  # -0.0 + 0.0 is +0.0
    assert simplify_expr(x * 0.0).op is Op.MUL  # NaN * 0 is NaN
    assert simplify_expr(x - x).op is Op.SUB
    n = N[i]
    assert simplify_expr(n - n).arg == 0 and simplify_expr(n * 0).arg == 0 and simplify_expr(n + 0).same_as(n)
    assert simplify_expr(-(-x)).same_as(x)
    assert simplify_expr(where(n > 0, x, x)).same_as(x)


def test_repeated_parts_are_bound_once_per_point():
    clip = pw.minimum(pw.maximum(X[i] * 2.0 - 1.0, 0.0), 1.0)
    curve = clip * clip * (3.0 - 2.0 * clip)
    out = Buffer("Y", (8,), "float32")
    stmt = bind_common(For("i", 8, "serial", Store(out, (i,), pw.sqrt(curve) + curve)))
    lets = [s for s in walk_stmts(stmt) if isinstance(s, Let)]
    assert [str(s.value) for s in lets] == [str(clip), "%0 * %0 * (3.0 - 2.0 * %0)"]
    assert to_source(stmt.body.body.body) == "Y[i] = sqrt(%1) + %1"


def test_one_side_of_a_where_is_never_hoisted():
    guarded = X[i - 1] * X[i - 1]
    out = Buffer("Y", (8,), "float32")
    value = where(i > 0, guarded + guarded, 0.0)  # X[i - 1] is read only where i > 0
    stmt = bind_common(Store(out, (i,), value))
    assert isinstance(stmt, Store)
    shared = X[i] * 2.0
    stmt = bind_common(Store(out, (i,), where(i > 0, shared, 0.0) + shared))  # read at every point too
    assert isinstance(stmt, Let) and stmt.value.same_as(shared)


def test_indices_are_never_bound():
    out = Buffer("Y", (8,), "float32")
    j = cast(N[i], "int64") + 1
    stmt = bind_common(Store(out, (i,), X[j] + X[j] + cast(j, "float32") * cast(j, "float32")))
    for s in walk_stmts(stmt):
        for e in (*getattr(s, "indices", ()), getattr(s, "value", const(0, "int64"))):
            loads = [n for n in walk(e) if n.op is Op.LOAD]
            assert not any(m.op is Op.VAR and m.arg[1] is None for ld in loads for ix in ld.src for m in walk(ix))


def test_lets_print_and_interpret():
    wl, _ = image_pipeline(6, 7)
    program = lower_program(wl, default_schedule(wl, vector_bytes=32, workers=2))
    source = program.source("out")
    assert "let %0: " in source and "0 == 0" not in source
    inputs = random_inputs(wl)
    np.testing.assert_allclose(interpret(program, **inputs)["out"], pw.reference(wl, **inputs)["out"], rtol=1e-5)
    stmt = Let("%0", X[i] * 2.0, Store(Buffer("Y", (8,), "float32"), (i,), let_var("%0", "float32") + 1.0))
    assert to_source(stmt) == "let %0: float32 = X[i] * 2.0\nY[i] = %0 + 1.0"


@pytest.mark.parametrize("box", [False, True], ids=["separable", "box"])
def test_six_inlined_stages_stay_small(box):
    """Before: a 256x256 pipeline's kernel printed as 11 KB (separable blurs) and 111 KB (3x3 box
    blurs), 0.3 MB and 3.4 MB of LLVM IR.  Each stage's value now appears once.  (Every stage
    inlined: the default's own policy keeps the first blur stored, tests/schedules/test_inlining.py.)"""
    wl, _ = image_pipeline(256, 256, box=box)
    every = lambda name, candidates, default: "all" if name == "inline" else default  # noqa: E731
    schedule = default_schedule(wl, vector_bytes=64, workers=2, choose=every)
    assert set(schedule.inlined) == {"bx", "by", "sharp", "clip", "curve"}
    source = lower_program(wl, schedule).source("out")
    assert len(source) < (8_000 if box else 2_000)
    if "cpu" in pw.targets():
        module = pw.build(schedule, target="cpu")._executable.module_text
        assert module == "" or len(module) < (250_000 if box else 60_000)  # "": served from the cache


def test_gamma_mix_stays_exact():
    """A folded expression computes the reference's numbers (float32 rounding per operation)."""
    wl = pw.Workload("fold")
    x = wl.input("x", (5,))
    wl.output(wl.compute("y", (5,), lambda k: x[k] * (pw.cast(3, "float32") / 7.0) + math.pi))
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["y"]
    for target in [t for t in pw.targets() if t != "numpy"]:
        np.testing.assert_array_equal(pw.build(wl, target=target).run(**inputs)["y"], expected)
