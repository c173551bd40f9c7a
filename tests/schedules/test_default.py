"""The default schedule: fused, grouped, tiled and parallel without a line of schedule from the user."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.loopnest import PARALLEL, VECTORIZED
from ptowsp.schedules.passes.default import (
    MIN_TASK_WORK, TASKS_PER_WORKER, TERMS_PER_ELEMENT, balanced_grid, default_schedule,
)
from ptowsp.workloads import zoo
from tests.tolerance import assert_sums_close


def _annotated(s: pw.Schedule, task: str, annotation: str) -> list[str]:
    return [lp.name for lp in s.nest(task).loops if lp.annotation == annotation]


def test_softmax_runs_as_one_task_per_row_block():
    wl = zoo.softmax(256, 256)
    s = default_schedule(wl, vector_bytes=32, workers=2)
    # max, exp and sum are computed per row inside Y: one kernel, no stored intermediate
    assert s.compute_at_locations == {t: ("Y", "i.inner") for t in ("Y_max", "Y_exp", "Y_sum")}
    # Y and Y_exp an element each, the rows' max and sum 256 terms per row: a task per MIN_TASK_WORK
    tasks = min((2 * 256 * 256 + 2 * 256 * 256 // TERMS_PER_ELEMENT) // MIN_TASK_WORK, 2 * TASKS_PER_WORKER)
    assert _annotated(s, "Y", PARALLEL) == ["i.outer"] and s.nest("Y").loop("i.outer").extent == tasks > 1
    assert _annotated(s, "Y_sum", VECTORIZED) == ["k.inner.inner"]  # vector partial sums (8 float32 lanes)
    assert s.nest("Y_sum").loop("k.inner.inner").extent == 8
    assert pw.build(s, "cpu").program.order == ("Y",)


def test_matmul_gets_a_register_tile_a_packed_panel_and_a_grid():
    wl = zoo.matmul(256, 256, 256)
    s = default_schedule(wl, vector_bytes=64, workers=2)
    assert s.loops("C") == ["i.outer.outer", "j.outer", "k.outer", "i.outer.inner", "k.inner", "i.inner",
                            "j.inner.outer", "j.inner.inner"]
    assert s.nest("C").loop("j.inner.inner").extent == 16 and _annotated(s, "C", VECTORIZED) == ["j.inner.inner"]
    assert s.cache_reads == [("C", "B", "local", "k.outer")]
    assert _annotated(s, "C", PARALLEL) == ["i.outer.outer"]


def test_epilogues_and_injective_chains_fuse():
    wl = zoo.mlp()
    s = default_schedule(wl, vector_bytes=32, workers=2)
    assert s.inlined == {"H_bias"}
    # H is G's epilogue anchor, Y_mm Y's; the G group (a block of rows of gelu(H + b1)) joins Y's
    # task at its grid loop, since Y_mm reads G row by row
    assert s.compute_at_locations == {"H": ("G", "j.outer"), "Y_mm": ("Y", "j.outer"), "G": ("Y", "i.outer.outer")}
    assert pw.build(s, "cpu").program.order == ("Y",)
    unfused = default_schedule(wl, vector_bytes=32, workers=2, fuse=False)
    assert not unfused.inlined and not unfused.compute_at_locations
    assert pw.build(unfused, "cpu").program.order == tuple(wl.tasks)


def test_attention_runs_whole_heads_per_task():
    wl = zoo.attention()  # 2 x 4 heads of 64 x 64 scores
    s = default_schedule(wl, vector_bytes=32, workers=2)
    assert set(s.compute_at_locations) == {"S", "M", "E", "Z", "P"}
    assert {c for c, _ in s.compute_at_locations.values()} == {"O"}
    grid = _annotated(s, "O", PARALLEL)
    assert grid[0] == "b" and grid[-1].startswith("h")
    assert s.compute_at_locations["S"][1] == grid[-1]  # the contraction at the grid loop: whole heads at once
    prog = pw.build(s, "cpu")
    extents = [s.nest("O").loop(name).extent for name in grid]
    assert prog.program.order == ("O",) and len(prog.program.instances) == extents[0] * extents[1] <= 8


def test_tiny_work_makes_one_task_and_large_work_at_most_a_few_per_worker():
    tiny = zoo.elementwise_chain((16, 16))
    s = default_schedule(tiny, vector_bytes=32, workers=2)
    assert not _annotated(s, "Y", PARALLEL)
    big = zoo.elementwise_chain((1024, 1024))
    for workers in (1, 2, 4):
        prog = pw.build(default_schedule(big, vector_bytes=32, workers=workers), "cpu")
        assert len(prog.program.instances) == TASKS_PER_WORKER * workers
    assert 1024 * 1024 // (TASKS_PER_WORKER * 4) >= MIN_TASK_WORK


@pytest.mark.parametrize("extents, target, grid", [
    ((1, 5, 14, 14), 4, (2, 2)),  # 5 channel blocks, each one's rows cut in two: 10 even tasks, not 5
    ((1, 5, 14, 14), 2, (1, 2)),  # two tasks of 3 and 2 blocks: the rows would make more than 3 x 2
    ((256, 256), 8, (0, 8)),  # rows in 8 equal blocks
    ((197,), 8, (0, 6)),  # 6 blocks of 33 rows share out over 2 workers better than 8 of 25
    ((2, 4, 64), 8, (2, 1)),  # two loops taken whole
    ((1, 1), 4, (0, 1)),  # nothing to cut
])
def test_the_grid_shares_its_instances_evenly_over_the_workers(extents, target, grid):
    assert balanced_grid(extents, target, workers=2) == grid


def test_a_small_pointwise_convolution_keeps_both_workers_busy():
    """MobileNetV3-Small's 1x1 projection, 240 -> 40 channels at 14 x 14: 1.9 M multiply-adds (about 0.1
    ms) that had run as one task, the other worker idle."""
    wl = zoo.conv2d(1, 240, 14, 14, 40, 1, 1, 0)
    prog = pw.build(default_schedule(wl, vector_bytes=64, workers=2), "cpu")
    assert len(prog.program.instances) >= 2 and len(prog.program.instances) % 2 == 0


def _guarded(s: pw.Schedule, task: str) -> bool:
    return any(getattr(r, "guarded", False) for r in s.nest(task).relations)


def test_rows_and_keys_no_tile_divides_get_a_guarded_last_tile():
    """ViT's 197 tokens: a matmul's register tile of rows and columns, a softmax's vectors and partial
    sums each end in a guarded tile (which lowering runs apart from the others, lower/partition.py);
    they had been left unrolled and scalar, 5.8x onnxruntime's time."""
    wl = zoo.matmul(197, 64, 197)
    s = default_schedule(wl, vector_bytes=64, workers=2)
    assert _guarded(s, "C") and _annotated(s, "C", VECTORIZED) and len(_annotated(s, "C", "unrolled")) == 2
    soft = zoo.softmax(197, 197)
    t = default_schedule(soft, vector_bytes=64, workers=2)
    assert all(_annotated(t, task, VECTORIZED) for task in ("Y", "Y_sum", "Y_max"))
    rng = np.random.default_rng(0)
    for work, schedule, want in ((wl, s, lambda p: p["A"] @ p["B"]), (soft, t, None)):
        inputs = {n: rng.standard_normal(work.tensor(n).shape).astype(np.float32) for n in work.inputs}
        got = pw.build(schedule, "cpu").run(**inputs)
        expected = pw.reference(work, **inputs) if want is None else {"C": want(inputs)}
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


def test_a_batch_of_one_row_products_takes_its_batch_as_rows():
    """(197, 1, 768) x (768, 64), as torch's attention projects a sequence-first input: the batch loop
    is the register tile's rows (the one-row loop left none)."""
    wl = pw.Workload("projection")
    x, w = wl.input("X", (197, 1, 96)), wl.input("W", (96, 64))
    k = pw.reduce_axis(96, "k")
    wl.output(wl.compute("Y", (197, 1, 64), lambda b, i, j: pw.sum(x[b, i, k] * w[k, j], k)))
    s = default_schedule(wl, vector_bytes=64, workers=2)
    assert "b.inner" in _annotated(s, "Y", "unrolled")
    rng = np.random.default_rng(1)
    xs, ws = rng.standard_normal((197, 1, 96)).astype(np.float32), rng.standard_normal((96, 64)).astype(np.float32)
    np.testing.assert_allclose(pw.build(s, "cpu").run(X=xs, W=ws)["Y"], xs @ ws, rtol=1e-5, atol=1e-5)


def test_extents_the_tiles_do_not_divide_get_no_tail():
    """Short ones: a guarded tile is only worth its code where there are a few whole tiles beside it."""
    wl = zoo.matmul(30, 17, 19)
    s = default_schedule(wl, vector_bytes=32, workers=2)
    for task in wl.tasks:
        assert all(not r.guarded for r in s.nest(task).relations if hasattr(r, "guarded"))
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
    assert_sums_close(pw.build(wl, "cpu").run(**inputs)["C"], inputs["A"] @ inputs["B"], terms=19)


@pytest.mark.parametrize("name", ["transformer_block", "conv2d", "layernorm", "batch_matmul"])
def test_default_schedule_is_data_and_is_what_build_uses(name):
    wl = getattr(zoo, name)()
    made_for = pw.backends.backend("cpu").default_workload(wl)  # the cpu's graph passes
    assert (made_for is wl) == (name not in ("conv2d", "transformer_block"))  # blocked; keys transposed
    s = default_schedule(made_for, vector_bytes=pw.backends.backend("cpu").vector_bytes, workers=2)
    assert pw.Schedule.from_json(made_for, s.to_json()) == s
    assert pw.build(wl, "cpu", workers=2).schedule == s


def test_a_vector_never_has_more_lanes_than_a_loop_may_vectorize():
    """aicore's 256-byte vectors hold 128 float16; a vectorized loop takes at most 64 lanes."""
    s = default_schedule(zoo.matmul(4096, 4096, 4096, dtype="float16"), vector_bytes=256, workers=72)
    assert all(lp.extent <= 64 for lp in s.nest("C").loops if lp.annotation == VECTORIZED)


@pytest.mark.parametrize("reduced", [False, True])
def test_a_channel_blocked_task_is_vectorized_one_block_a_vector(reduced):
    """A task over a channel-blocked tensor whose last axis is exactly one vector (16 float lanes of
    AVX-512): a ReLU6 or a global mean of the blocked layout.  The ReLU6's last axis was left scalar (no
    wider vector divides it), which made MobileNetV2's blocked ReLU6s 1 ms each."""
    wl = pw.Workload("blocked")
    x = wl.input("x", (1, 4, 28, 28, 16))
    if reduced:
        r, s = pw.reduce_axis(28, "r"), pw.reduce_axis(28, "s")
        y = wl.compute("y", (1, 4, 16), lambda n, b, l: pw.sum(x[n, b, r, s, l], axis=(r, s)) / 784.0)
    else:
        y = wl.compute("y", x.shape, lambda n, b, h, w, l: pw.minimum(pw.maximum(x[n, b, h, w, l], 0.0), 6.0))
    wl.output(y)
    schedule = default_schedule(wl, vector_bytes=64, workers=2)
    nest = schedule.nest("y")
    assert nest.loops[-1].annotation == VECTORIZED and nest.loops[-1].extent == 16, str(schedule)
    inputs = {"x": np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)}
    np.testing.assert_allclose(pw.build(schedule, "cpu", workers=2).run(**inputs)["y"],
                               pw.reference(wl, **inputs)["y"], rtol=1e-5, atol=1e-5)


def test_a_contraction_over_symbolic_rows_splits_its_columns_and_packs_its_panels():
    """A projection over `seq` rows with a residual epilogue: column tiles outermost and the grid over
    them (a count that holds at every seq), B's panel packed (its box is fixed), and the projection,
    whose placement in its epilogue would need a buffer of `seq` rows, stored with a grid of its own."""
    wl = pw.Workload("projection")
    x, r = wl.input("X", ("seq", 256)), wl.input("R", ("seq", 512))
    w = wl.input("W", (256, 512))
    k = pw.reduce_axis(256, "k")
    p = wl.compute("P", ("seq", 512), lambda i, j: pw.sum(x[i, k] * w[k, j], k))
    wl.output(wl.compute("Y", ("seq", 512), lambda i, j: p[i, j] + r[i, j]))
    s = default_schedule(wl, vector_bytes=64, workers=2)
    assert s.loops("P")[0].startswith("j.outer") and ("P", "W", "local", "k.outer") in s.cache_reads
    assert "P" not in s.compute_at_locations
    for task in ("P", "Y"):
        grid = _annotated(s, task, PARALLEL)
        assert grid and all(isinstance(s.nest(task).loop(g).extent, int) for g in grid)
    rng = np.random.default_rng(0)
    prog = pw.build(s, target="cpu")
    weights = rng.random((256, 512), dtype=np.float32)
    for n in (3, 70):
        a, b = rng.random((n, 256), dtype=np.float32), rng.random((n, 512), dtype=np.float32)
        np.testing.assert_allclose(prog.run(X=a, R=b, W=weights)["Y"], a @ weights + b, rtol=1e-5)


def test_a_grid_over_symbolic_rows_only_moves_to_the_fixed_loops():
    """Attention's weighted sum over a prompt's rows: at the typical size the grid cuts the rows in
    blocks, which at a short prompt make one task; over the symbol the grid takes the 16 heads."""
    wl = pw.Workload("weighted")
    p, v = wl.input("P", (16, "seq", "seq")), wl.input("V", ("seq", 16, 64))
    t = pw.reduce_axis(wl.size("seq"), "t")
    wl.output(wl.compute("A", ("seq", 16, 64), lambda i, h, d: pw.sum(p[h, i, t] * v[t, h, d], t)))
    s = default_schedule(wl, vector_bytes=64, workers=2)
    grid = _annotated(s, "A", PARALLEL)
    assert grid and all(isinstance(s.nest("A").loop(g).extent, int) for g in grid)
    rng = np.random.default_rng(0)
    prog = pw.build(s, target="cpu")
    for n in (1, 9):
        a, b = rng.random((16, n, n), dtype=np.float32), rng.random((n, 16, 64), dtype=np.float32)
        np.testing.assert_allclose(prog.run(P=a, V=b)["A"], np.einsum("hit,thd->ihd", a, b), rtol=1e-5)
