"""The cpu's panel packing of a contraction's B (schedules/passes/panels.py): constant, or an input
with many rows."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.panels import PACKED_ROWS, pack_panels
from ptowsp.workloads import random_inputs

WIDTH = 32  # the tile's two vectors of float32 columns with AVX-512 (a test width: any works)


def dense(m=64, k=48, n=96, constant=True, batch=()):
    """Y = X @ W with W a constant (a model's weights) or an input."""
    wl = pw.Workload("dense")
    x = wl.input("X", (*batch, m, k))
    values = np.random.default_rng(0).standard_normal((*batch, k, n)).astype(np.float32)
    w = wl.constant("W", values) if constant else wl.input("W", (*batch, k, n))
    r = pw.reduce_axis(k, "k")
    if batch:
        wl.output(wl.compute("Y", (*batch, m, n), lambda b, i, j: pw.sum(x[b, i, r] * w[b, r, j], axis=r)))
    else:
        wl.output(wl.compute("Y", (m, n), lambda i, j: pw.sum(x[i, r] * w[r, j], axis=r)))
    return wl


@pytest.mark.parametrize("batch", [(), (3,)], ids=["matmul", "batched"])
def test_a_constant_b_becomes_panels_the_contraction_reads_by_panel(batch):
    wl = dense(batch=batch)
    packed = pack_panels(wl, (WIDTH,))
    assert packed.tasks == ["Y_W_panels", "Y"]
    assert packed.tensor("Y_W_panels").shape == (*batch, 96 // WIDTH, 48, WIDTH)
    assert "Y_W_panels[" + ("b, " if batch else "") + "j // 32, k, j % 32]" in str(packed.task("Y").body)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.reference(packed, **inputs)["Y"], pw.reference(wl, **inputs)["Y"], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: dense(constant=False),  # an input B would be copied on every run, for too few rows
    lambda: dense(m=62),  # rows the register tile does not divide
    lambda: dense(n=80),  # columns that are not whole panels
], ids=["input", "rows", "columns"])
def test_what_the_tile_would_not_take_or_a_run_would_pay_for_is_left_alone(make):
    wl = make()
    assert pack_panels(wl, (WIDTH,)) is wl


def test_the_register_tile_reads_the_panels_with_no_packing_per_task():
    wl = pack_panels(dense(), (WIDTH,))
    s = default_schedule(wl, vector_bytes=WIDTH * 2, workers=2)  # 16 lanes: a tile of 2 vectors is one panel
    assert s.cache_reads == []  # nothing packed inside the tasks
    loops = s.nest("Y").loops
    assert [lp.name for lp in loops][-3:] == ["i.inner", "j.inner.outer", "j.inner.inner"]
    assert loops[-1].extent == 16 and loops[-2].extent == 2
    inputs = random_inputs(wl)
    got = pw.build(s, "cpu", workers=2).run(**inputs)["Y"]
    np.testing.assert_allclose(got, pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)


def test_the_cpu_build_packs_a_models_weights_once_at_build_time():
    wl = dense(m=128, k=256, n=512)
    prog = pw.build(wl, "cpu", workers=2)
    assert any(t.endswith("_panels") for t in prog.schedule.workload.tasks)
    assert prog.program.order == ("Y",)  # the panels are folded: no task of theirs runs
    x = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(prog.run(X=x)["Y"], pw.reference(wl, X=x)["Y"], rtol=1e-4, atol=1e-4)


def test_an_input_b_with_many_rows_is_packed_by_a_task_of_its_own_on_every_run():
    wl = dense(m=PACKED_ROWS, k=64, n=128, constant=False)
    prog = pw.build(wl, "cpu", workers=2)
    assert prog.program.order == ("Y_W_panels", "Y")  # a run packs W once, then every row task reads the panels
    assert prog.schedule.cache_reads == []
    inputs = random_inputs(wl, seed=3)
    np.testing.assert_allclose(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)


def test_each_contraction_takes_the_first_panel_width_its_columns_are_a_multiple_of():
    assert pack_panels(dense(n=96), (24, 16)).tensor("Y_W_panels").shape == (4, 48, 24)
    assert pack_panels(dense(n=80), (24, 16)).tensor("Y_W_panels").shape == (5, 48, 16)


@pytest.mark.parametrize("n, columns", [(96, 24), (80, 16)])
def test_with_avx2s_16_registers_the_tile_takes_three_vectors_of_columns_where_they_divide(n, columns):
    wl = pack_panels(dense(n=n), (24, 16))
    s = default_schedule(wl, vector_bytes=32, workers=2)
    loops = s.nest("Y").loops
    assert [lp.extent for lp in loops][-2:] == [columns // 8, 8]
    inputs = random_inputs(wl)
    got = pw.build(s, "cpu", workers=2).run(**inputs)["Y"]
    np.testing.assert_allclose(got, pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)
