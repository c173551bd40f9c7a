"""lower/verify.py: the loop IR's invariants, checked between lowering passes (PTOWSP_VERIFY=1)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.errors import BuildError
from ptowsp.lower import kernel
from ptowsp.lower.ir import LOCAL, Allocate, Buffer, For, IfThen, Let, Store, block, let_var, var
from ptowsp.lower.verify import verify
from ptowsp.te import const

OUT = Buffer("Y", (4,), "float32")
TMP = Buffer("t", (4,), "float32", LOCAL)
I = var("i", 4)


def _problem(stmt, grid=()) -> str:
    with pytest.raises(BuildError) as caught:
        verify(stmt, grid, "Y", "some_pass")
    assert "task 'Y': after lowering pass 'some_pass'" in str(caught.value)
    return str(caught.value)


def test_a_well_formed_nest_passes():
    body = Allocate(TMP, block(For("i", 4, "serial", Store(TMP, (I,), const(1.0, "float32"))),
                               For("i", 4, "serial", Let("v", TMP[I], Store(OUT, (I,), let_var("v", "float32"))))))
    assert verify(body, (), "Y", "some_pass") is None  # no BuildError
    assert verify(Store(OUT, (var("g", 4),), const(0.0, "float32")), ("g",), "Y", "some_pass") is None  # grid


def test_each_broken_invariant_is_named():
    assert "loop variable i read outside" in _problem(Store(OUT, (I,), const(0.0, "float32")))
    assert "let variable v read outside" in _problem(
        For("i", 4, "serial", Store(OUT, (I,), let_var("v", "float32"))))
    assert "loop i inside a loop of the same name" in _problem(
        For("i", 4, "serial", For("i", 4, "serial", Store(OUT, (I,), const(0.0, "float32")))))
    assert "local buffer t used outside its allocation" in _problem(
        For("i", 4, "serial", Store(OUT, (I,), TMP[I])))
    assert "buffer Y of 1 dimension(s) indexed with 2" in _problem(
        For("i", 4, "serial", Store(OUT, (I, I), const(0.0, "float32"))))
    assert "a store of a float64 value into float32 buffer Y" in _problem(
        For("i", 4, "serial", Store(OUT, (I,), const(0.0, "float64"))))
    assert "a guard of dtype int64" in _problem(IfThen(const(1, "int64"), Store(OUT, (const(0, "int64"),),
                                                                                 const(0.0, "float32"))))


def test_lower_task_names_the_pass_that_broke_the_ir(monkeypatch):
    """Verification on (as `make test` runs): a pass that drops an allocation is caught right after it."""
    def unallocated(stmt, lowered):  # every local buffer's allocation dropped, its uses left
        if isinstance(stmt, Allocate):
            return unallocated(stmt.body, lowered)
        return stmt.with_children([unallocated(c, lowered) for c in stmt.children()])

    wl = pw.zoo.softmax(8, 16)  # its row max and sum are computed at its rows, in local buffers
    monkeypatch.setenv("PTOWSP_VERIFY", "1")
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(X=x)["Y"], pw.reference(wl, X=x)["Y"], rtol=1e-5)
    s = pw.build(wl, "numpy").schedule
    monkeypatch.setattr(kernel, "PASSES", (*kernel.PASSES[:3], kernel.Pass("careless", unallocated, "a test's"),
                                          *kernel.PASSES[3:]))
    with pytest.raises(BuildError, match="after lowering pass 'careless'.*local buffer .* outside its allocation"):
        kernel.lower_task(s.workload, s, "Y")
