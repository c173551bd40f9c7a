"""Lowering: kernels and task tables, checked by interpreting them against pw.reference."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower import lower_program
from ptowsp.lower.interpret import interpret
from ptowsp.schedules.random_schedule import random_schedule
from ptowsp.workloads import zoo
from tests.conformance.catalogue import random_inputs

TINY = [
    zoo.matmul(7, 5, 6), zoo.matmul(4, 3, 5, "float16"), zoo.matmul(4, 3, 5, "int32"), zoo.softmax(3, 7),
    zoo.layernorm(3, 8), zoo.rmsnorm(2, 9), zoo.conv2d(1, 2, 5, 5, 2, 3, 2, 1), zoo.attention(1, 1, 4, 3, causal=True),
    zoo.mlp(3, 4, 5, 2), zoo.elementwise_chain((3, 5), 5), zoo.transformer_block(4, 8, 2, 8),
]


def check(wl, schedule, inputs=None):
    inputs = inputs or random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    got = interpret(lower_program(wl, schedule), **inputs)
    for name, value in expected.items():
        tol = 2e-2 if value.dtype == np.float16 else 1e-4
        np.testing.assert_allclose(got[name], value, rtol=tol, atol=tol, err_msg=f"{name} under\n{schedule}")


@pytest.mark.parametrize("wl", TINY, ids=lambda w: f"{w.name}-{w.tensor(w.outputs[0]).dtype}")
def test_random_legal_schedules_never_change_results(wl):
    for seed in range(8):
        check(wl, random_schedule(wl, seed))


def tiled_matmul(m, n, k, ti, tj, tk):
    wl = zoo.matmul(m, n, k)
    return wl, (wl.schedule().tile("C", i=ti, j=tj).split("C", "k", tk)
                .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
                .vectorize("C", "j.inner").unroll("C", "k.inner").parallel("C", "i.outer", "j.outer"))


def test_design_matmul_source_grid_and_task_table():
    wl, s = tiled_matmul(100, 64, 48, 32, 16, 8)
    prog = lower_program(wl, s)
    text = prog.source("C")
    assert text.startswith("parallel for i.outer in 0..4, j.outer in 0..4:  # task grid")
    assert "vectorized for j.inner in 0..16:" in text and "unrolled for k.inner in 0..8:" in text
    assert "if i.outer * 32 + i.inner < 100:" in text  # the guarded tail of 100 = 3 * 32 + 4
    assert len(prog.instances) == 16
    written = np.zeros((100, 64), int)
    for inst in prog.instances:
        (name, region), = inst.writes
        assert name == "C"
        written[tuple(slice(*r) for r in region)] += 1
        reads = dict(inst.reads)
        assert reads["A"][0] == region[0] and reads["A"][1] == (0, 48)  # a row band of A, all of k
        assert reads["B"][1] == region[1]
    assert (written == 1).all()  # tiles partition the output
    check(*tiled_matmul(10, 8, 7, 4, 4, 3))  # the same schedule shape, small enough to interpret


def test_inlined_tasks_have_no_kernel():
    wl = pw.Workload("chain")
    x = wl.input("x", (6,))
    a = wl.compute("a", (6,), lambda i: x[i] * 2.0)
    b = wl.compute("b", (6,), lambda i: pw.where(i > 0, a[i - 1], 0.0) + a[i])
    wl.output(b)
    s = wl.schedule().compute_inline("a")
    prog = lower_program(wl, s)
    assert list(prog.kernels) == ["b"] and prog.order == ("b",)
    assert "x[i - 1] * 2.0" in prog.source("b")
    with pytest.raises(pw.BuildError, match="inlined"):
        prog.source("a")
    check(wl, s)


def test_reductions_inside_expressions_and_under_guards():
    wl = pw.Workload("r")
    x = wl.input("x", (5, 6))
    c, r = pw.reduce_axis(6, "c"), pw.reduce_axis(5, "r")
    wl.output(
        wl.compute("siblings", (5,), lambda i: pw.sum(x[i, c], c) + pw.max(x[i, c], c)),
        wl.compute("nested", (3,), lambda i: pw.sum(pw.max(x[r, c], c) * pw.cast(i, "float32"), r)),
        wl.compute("guarded", (5,), lambda i: pw.where(i > 0, pw.sum(x[i - 1, c], c), -1.0)),
        wl.compute("hoisted", (5,), lambda i: pw.where(i > 0, pw.sum(x[i - 1, c], c) + pw.max(x[i, c], c), 0.0)),
    )
    check(wl, wl.schedule())
    check(wl, wl.schedule().split("guarded", "c", 4).split("nested", "r", 2))


def test_opaque_tasks_run_on_the_host_between_kernels():
    wl = pw.Workload("o")
    x = wl.input("x", (4, 5))
    y = wl.compute("y", (4, 5), lambda i, j: x[i, j] * 3.0)
    z = wl.opaque("sort", lambda a: np.sort(a, axis=1), inputs=[y], outputs=[("z", (4, 5))])
    wl.output(wl.compute("w", (4, 5), lambda i, j: z[i, j] + 1.0))
    prog = lower_program(wl, wl.schedule().parallel("y", "i"))
    assert [i.task for i in prog.instances] == ["y"] * 4 + ["sort", "w"]
    check(wl, wl.schedule().parallel("y", "i"))



def test_a_task_walking_tiles_keeps_one_tiles_accumulators():
    """Spatial loops outside every reduction loop are shared by init, update and epilogue, so the
    accumulator covers one iteration of them (one 8x8 tile), not the whole instance (3 tiles)."""
    from ptowsp.lower.ir import Allocate, walk_stmts

    wl = zoo.matmul(40, 40, 24, "float16")
    fused = "i.outer.j.outer.fused"
    s = (wl.schedule().tile("C", i=8, j=8).split("C", "k", 8).fuse("C", "i.outer", "j.outer")
         .split("C", fused, 3)  # 25 tiles in tasks of 3: the last task's third tile is guarded off
         .reorder("C", f"{fused}.outer", f"{fused}.inner", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("C", f"{fused}.outer"))
    prog = lower_program(wl, s)
    shapes = [n.buffer.shape for n in walk_stmts(prog.kernels["C"].body) if isinstance(n, Allocate)]
    assert shapes == [(8, 8)]
    assert prog.source("C").splitlines()[1].strip() == f"for {fused}.inner in 0..3:"
    check(wl, s)


def test_a_stencils_read_region_covers_both_borders():
    """Reads at i - 1, i and i + 1 over the whole row span one more than the row on each side; the
    region clipped into the tensor is all of it (the box was once capped at the tensor's size before
    clipping, so it started at -1 and missed the last element: a consumer ran before that producer)."""
    from ptowsp.lower.access import kernel_access

    wl = pw.Workload("stencil_region")
    x = wl.input("x", (20,))
    y = wl.compute("y", (20,), lambda i: x[i] * 2.0)
    wl.output(wl.compute("z", (20,), lambda i: pw.where(i >= 1, y[i - 1], 0.0) + y[i]
                         + pw.where(i < 19, y[i + 1], 0.0)))
    prog = lower_program(wl, wl.schedule())
    reads, _ = kernel_access(prog.kernels["z"]).regions()
    assert dict(reads)["y"] == ((0, 20),)


def test_a_paged_read_counts_one_row_per_token_for_the_cost_model():
    """A paged cache read at cache[table[j // 4], j % 4, d]: for a cost model (`gathered_rows`) the
    block dimension reaches 16 / 4 rows while j runs over 16 tokens, beside the slot's 4, so the box
    holds 16 rows of d, not 16 blocks of 4 (the aicore default once split a decode step's scores into
    34,560 tasks to fit that overcount into L0A).  Dependencies still see the whole cache."""
    from ptowsp.lower.access import kernel_access, statement_access

    wl = pw.Workload("paged")
    cache = wl.input("cache", (32, 4, 8))
    table = wl.input("table", (4,), "int32")
    wl.output(wl.compute("y", (16, 8), lambda j, d: cache[table[j // 4], j % 4, d] * 2.0))
    prog = lower_program(wl, wl.schedule())
    kernel = prog.kernels["y"]
    modelled = statement_access(kernel.body, [name for name, _ in kernel.grid], gathered_rows=True)
    reads, _ = modelled.regions()
    assert dict(reads)["cache"] == ((0, 4), (0, 4), (0, 8))
    reads, _ = kernel_access(kernel).regions()
    assert dict(reads)["cache"] == ((0, 32), (0, 4), (0, 8))
