"""The aicore target: device model, kernel cost, device clock (ptowsp/backends/aicore, runtime/device.py)."""

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.aicore import AicoreBackend
from ptowsp.backends.aicore.cost import DEFAULT_MAX_BLOCKS, MAX_BLOCKS, TooManyBlocks
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.workloads import random_inputs, zoo

SMALL = pw.DeviceModel(clusters=4, schedulers=2)
QUICK = SMALL.model_copy(update={"schedule_seconds": 1e-8, "orchestrate_seconds": 1e-8})  # never dispatch-bound


def matmul_tiled(n=256, tile=64, k_block=64, dtype="float16", prefetch=0):
    wl = zoo.matmul(n, n, n, dtype)
    s = (wl.schedule().tile("C", i=tile, j=tile).split("C", "k", k_block)
         .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("C", "i.outer", "j.outer"))
    return wl, s.prefetch(prefetch) if prefetch else s


def run(schedule, device=SMALL):
    wl = schedule.workload
    prog = pw.build(schedule, target="aicore", device=device)
    inputs = random_inputs(wl)
    out = prog.run(**inputs)
    for name, want in pw.reference(wl, **inputs).items():
        half = want.dtype.name in ("float16", "bfloat16")
        np.testing.assert_allclose(out[name].astype(np.float64), want.astype(np.float64), rtol=2e-2 if half else 1e-4,
                                   atol=1e-2)
    return prog.trace


def test_the_target_is_registered_and_device_figures_carry_sources():
    assert "aicore" in pw.targets()
    sources = pw.DeviceModel().sources()
    assert {"clock_hz", "ub_bytes", "schedule_seconds", "gm_to_l1_bytes_per_second", "dma_startup_seconds"} <= set(sources)
    assert all(sources.values())
    assert pw.DeviceModel().core_classes().count("cube") == 24
    with pytest.raises(pw.BuildError, match="device model"):
        pw.build(zoo.softmax(8, 8), target="aicore", workers=2)
    with pytest.raises(pw.BuildError, match="takes no device model"):
        pw.build(zoo.softmax(8, 8), target="cpu", device=SMALL)


def test_two_runs_give_identical_traces():
    _, s = matmul_tiled(prefetch=1)
    first, second = run(s), run(s)
    assert first.events == second.events and first.waits == second.waits
    assert first.makespan == second.makespan > 0
    assert first.clock == "device"


def test_the_trace_does_not_depend_on_what_ran_before_in_the_process():
    """Ties between equal wake-up times are broken in a fixed order, not by object addresses."""
    schedule = pw.build(zoo.transformer_block(), target="aicore").schedule  # the aicore default

    def trace():
        return run(schedule, pw.DeviceModel()).events

    first = trace()
    run(matmul_tiled(prefetch=2)[1])  # other objects come and go: addresses move
    _ = [object() for _ in range(10_000)]
    assert trace() == first


def test_matmul_runs_on_cube_cores_and_softmax_on_vector_cores():
    _, s = matmul_tiled()
    trace = run(s)
    cores = {e.core for e in trace.events if e.id >= 0}
    assert cores == {"cube"}
    summary = trace.summary()
    assert summary.classes["cube"] > 0 and summary.classes["vector"] == 0
    assert set(summary.control) == {"orchestrator", "scheduler0", "scheduler1"}
    soft = run(zoo.softmax(64, 64).schedule().split("Y", "i", 8).parallel("Y", "i.outer"))
    assert {e.core for e in soft.events if e.id >= 0} == {"vector"}


def test_a_task_that_does_not_fit_its_buffers_is_refused_at_build_time():
    wl = zoo.softmax(512, 512)
    with pytest.raises(pw.ScheduleError, match=r"task 'Y.*' needs .* of UB .* holds 192\.0 KiB"):
        pw.build(wl.schedule().fuse_by_category(), target="aicore", device=SMALL)
    wl, s = matmul_tiled(n=512, tile=128, k_block=512)  # a whole 128x512 fp16 block: 128 KiB > L0A
    with pytest.raises(pw.ScheduleError, match="L0A/L0B"):
        pw.build(s, target="aicore", device=SMALL)
    _, s = matmul_tiled(n=512, tile=128, k_block=128)
    pw.build(s, target="aicore", device=SMALL)  # streamed in 128-deep blocks: fits


def makespan(schedule, **figures):
    return run(schedule, QUICK.model_copy(update=figures)).makespan


def test_each_model_term_moves_the_makespan_the_expected_way():
    _, s = matmul_tiled()
    base = makespan(s)
    assert makespan(s, clock_hz=SMALL.clock_hz * 2) < base
    assert makespan(s, clusters=2) > base
    assert makespan(s, gm_to_l1_bytes_per_second=SMALL.gm_to_l1_bytes_per_second / 8) > base
    assert makespan(s, l0c_to_gm_bytes_per_second=SMALL.l0c_to_gm_bytes_per_second / 64) > base
    assert makespan(s, hbm_bytes_per_second=1e10) > base
    assert makespan(s, schedule_seconds=50e-6) > base
    assert makespan(s, dma_startup_seconds=5e-6) > base


def test_prefetch_overlaps_loads_with_compute():
    def overlap(trace):
        by_core = {}
        for e in trace.events:
            by_core.setdefault(e.worker, []).append(e)
        total = 0.0
        for events in by_core.values():
            loads = [e for e in events if e.name.endswith(" load")]
            computes = [e for e in events if e.id >= 0]
            total += sum(max(0.0, min(a.end, b.end) - max(a.start, b.start)) for a in loads for b in computes)
        return total

    # one block per task (k.outer has one iteration), so the merged stage events are exact intervals
    t0, t1, t2 = (run(matmul_tiled(k_block=256, prefetch=depth)[1], QUICK) for depth in (0, 1, 2))
    assert overlap(t0) < 1e-12 and overlap(t1) > 1e-9 and overlap(t2) > 1e-9
    assert t0.makespan > t1.makespan > t2.makespan
    assert t2.summary().classes["cube"] > t1.summary().classes["cube"] > t0.summary().classes["cube"]


def per_core_matmul(n=256, tile=64, tasks=4, prefetch=0, dtype="float16"):
    """Each task walks a share of the tiles, each streamed along k (the way Ascend kernels split a matmul)."""
    wl = zoo.matmul(n, n, n, dtype)
    fused = "i.outer.j.outer.fused"
    s = (wl.schedule().tile("C", i=tile, j=tile).split("C", "k", 64).fuse("C", "i.outer", "j.outer")
         .split("C", fused, -(-(n // tile) ** 2 // tasks))
         .reorder("C", f"{fused}.outer", f"{fused}.inner", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("C", f"{fused}.outer"))
    return s.prefetch(prefetch) if prefetch else s


def test_a_task_walking_tiles_needs_one_tiles_accumulators_and_stores_each_tile():
    s = per_core_matmul(n=256, tile=128, tasks=1)  # 4 tiles of 128x128 in one task: 4 x 64 KiB > L0C
    trace = run(s)
    assert len([e for e in trace.events if e.id >= 0]) == 1
    assert trace.statistics["memory"]["hbm_written_bytes"] == 256 * 256 * 2  # every tile stored once
    with pytest.raises(pw.ScheduleError, match=r"needs 256\.0 KiB of L0C .* tile's accumulators"):
        pw.build(matmul_tiled(n=512, tile=256, k_block=32)[1], target="aicore", device=SMALL)


def test_prefetch_carries_across_the_tiles_of_a_task():
    one_cube = QUICK.model_copy(update={"clusters": 1})  # 4 tasks of 4 tiles of 8 blocks on one cube core
    t0, t2 = (run(per_core_matmul(512, 128, 4, depth, "float32"), one_cube) for depth in (0, 2))
    assert t2.makespan < 0.7 * t0.makespan
    assert t2.summary().classes["cube"] > 0.8


def test_more_scheduler_threads_help_a_dispatch_bound_run():
    wl = zoo.softmax(1024, 16)
    s = wl.schedule().split("Y", "i", 2).parallel("Y", "i.outer").fuse_by_category()  # 512 tiny tasks
    slow = 5e-6  # scheduler work per task well above the orchestrator's: the schedulers are the bottleneck
    spans = [run(s, SMALL.model_copy(update={"schedulers": k, "schedule_seconds": slow})).makespan for k in (1, 2, 3)]
    assert spans[0] > spans[1] > spans[2]
    assert spans[0] >= 512 * slow  # bounded below by one scheduler's throughput


def _cube_seconds(dtype: str, device=QUICK) -> float:
    """Device seconds of the cube's compute events of a tiled 256^3 matmul with `dtype` inputs
    (int8: summed in int32 through casts, the quantized form)."""
    wl = pw.Workload(f"mm_{dtype}")
    a, b = wl.input("A", (256, 256), dtype), wl.input("B", (256, 256), dtype)
    k = pw.reduce_axis(256, "k")
    widen = (lambda x: pw.cast(x, "int32")) if dtype == "int8" else (lambda x: x)
    wl.output(wl.compute("C", (256, 256), lambda i, j: pw.sum(widen(a[i, k]) * widen(b[k, j]), k)))
    s = (wl.schedule().tile("C", i=64, j=64).split("C", "k", 64)
         .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("C", "i.outer", "j.outer"))
    trace = run(s, device)
    return sum(e.end - e.start for e in trace.events if e.name == "C" and e.core == "cube")


def test_cube_rates_follow_the_input_dtype():
    """int8 in (int32 sums) at cube_int8_speedup times the float16 rate; bfloat16 as float16 (float32
    sums); float32 at cube_float32_share of it."""
    int8, half, bf16, single = (_cube_seconds(d) for d in ("int8", "float16", "bfloat16", "float32"))
    assert int8 < half == bf16 < single
    assert _cube_seconds("int8", QUICK.model_copy(update={"cube_int8_speedup": 1.0})) > int8


@pytest.mark.parametrize("slow, cause", [("schedule_seconds", "dispatch"), ("orchestrate_seconds", "starvation")])
def test_idle_core_time_is_charged_to_what_held_the_cores_back(slow, cause):
    wl = zoo.softmax(1024, 16)
    s = wl.schedule().split("Y", "i", 2).parallel("Y", "i.outer").fuse_by_category()  # 512 tiny tasks
    device = SMALL.model_copy(update={"schedulers": 1, "schedule_seconds": 1e-8, "orchestrate_seconds": 1e-8,
                                      slow: 5e-6})
    trace = run(s, device)
    summary = trace.summary()
    idle = summary.idle
    assert set(idle) == {"dependencies", "dispatch", "starvation"}
    assert idle[cause] > 0.8 * sum(idle.values())
    # the vector cores' idle time, split (no task may use a cube core: theirs has no cause)
    vector = [k for k, (_, core) in enumerate(trace.workers) if core == "vector"]
    busy = 0.0
    for k in vector:  # the union of each core's stage events (a load may overlap the compute before it)
        end = 0.0
        for e in sorted((e for e in trace.events if e.worker == k), key=lambda e: e.start):
            busy += max(0.0, e.end - max(e.start, end))
            end = max(end, e.end)
    assert sum(idle.values()) == pytest.approx(len(vector) * trace.makespan - busy, rel=1e-9)
    assert "idle cores" in str(summary) and cause in str(summary)


def test_the_default_streams_a_reduction_whose_blocks_overflow_a_buffer():
    wl = zoo.conv2d(1, 2048, 7, 7, 16, 3, 1, 1)  # 2048 channels of a 7x7 image: 392 KiB > 64 KiB of L0A/L0B
    inputs = random_inputs(wl, seed=3)
    with pytest.raises(pw.ScheduleError, match="needs .* of L0A/L0B for its largest input block"):
        pw.build(wl.schedule().parallel("Y", "n"), "aicore", device=SMALL)  # a user's schedule: as given
    prog = pw.build(wl, "aicore", device=SMALL)
    loops = [lp.name for lp in prog.schedule.nest("Y").loops]
    assert any(name.startswith("c.") for name in loops)  # the channels stream in blocks
    np.testing.assert_allclose(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-3)


def test_tiles_so_small_that_an_instance_streams_millions_of_blocks_are_refused():
    """2x2 tiles, two k a block: 2 million DMA, compute and store steps in one instance."""
    wl = zoo.matmul(256, 256, 256, "float16")
    s = (wl.schedule().tile("C", i=2, j=2).split("C", "k", 2)
         .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"))
    with pytest.raises(TooManyBlocks, match=r"task 'C' streams 2,097,152 blocks per instance \(128 x 128 x 128"):
        pw.build(s, target="aicore")
    assert issubclass(TooManyBlocks, pw.ScheduleError)


def _sum_with_epilogue() -> pw.Workload:
    """A classifier's `x . W^T + b` as one task, the sum inside its bias: W's 2048 x 1000 do not fit L0B."""
    wl = pw.Workload("classifier")
    x, w, b = wl.input("x", (1, 2048)), wl.input("w", (1000, 2048)), wl.input("b", (1000,))
    k = pw.reduce_axis(2048, "k")
    wl.output(wl.compute("y", (1, 1000), lambda i, j: pw.sum(x[i, k] * w[j, k], axis=k) + b[j]))
    return wl


def _patchify() -> pw.Workload:
    """A vision transformer's patch embedding: 16 x 16 patches, stride 16.  One channel of the 224 x 224
    image (196 KiB) is the block of every output pixel's tile however the channels stream."""
    wl = pw.Workload("patches")
    x, w = wl.input("x", (1, 3, 224, 224)), wl.input("w", (32, 3, 16, 16))
    c, r, s = pw.reduce_axis(3, "c"), pw.reduce_axis(16, "r"), pw.reduce_axis(16, "s")
    conv = wl.compute("conv", (1, 32, 14, 14), lambda n, o, y, q: pw.sum(
        x[n, c, y * 16 + r, q * 16 + s] * w[o, c, r, s], axis=(c, r, s)))
    wl.output(wl.compute("y", (1, 32, 14, 14), lambda n, o, y, q: pw.maximum(conv[n, o, y, q], 0.0)))
    return wl


@pytest.mark.parametrize("make, streamed", [(_sum_with_epilogue, "y"), (_patchify, "conv")])
def test_the_default_fits_sums_in_epilogues_and_blocks_only_a_narrower_tile_shrinks(make, streamed):
    """The sum inside `+ b[j]` streams its k; the patch embedding, computed inside its ReLU's loops, is
    stored on its own and its tile narrowed along the image's rows and columns until one channel's
    block fits."""
    wl = make()
    inputs = random_inputs(wl, seed=5)
    prog = pw.build(wl, "aicore", device=SMALL)
    assert streamed not in prog.schedule.compute_at_locations
    nest = prog.schedule.nest(streamed)
    assert any(lp.reduce and lp.name.endswith(".outer") for lp in nest.loops), str(prog.schedule)
    if make is _patchify:  # the grid splits the image's rows and columns too
        grid = {root for lp in nest.loops if lp.annotation == "parallel" for root in nest.roots(lp.name)}
        assert {"y", "q"} <= grid, str(prog.schedule)
    out = prog.run(**inputs)
    for name, want in pw.reference(wl, **inputs).items():
        np.testing.assert_allclose(out[name], want, rtol=1e-4, atol=1e-3)


def test_the_default_streams_channels_outside_a_tile_that_would_take_too_many_blocks():
    """A strided 1x1 convolution as one task: the default vectorizes 4 pixels and walks the 256 channels
    inside the rest of its tile, 25.7 million blocks; the aicore default streams the channels outside instead."""
    wl = zoo.conv2d(1, 256, 56, 56, 512, 1, 2, 0)
    aicore = AicoreBackend()
    choices = aicore.schedule_choices(None)

    def one_task(name, candidates, default):
        return 1 if name == "Y.tasks" else choices(name, candidates, default)

    default = default_schedule(wl, vector_bytes=aicore.vector_bytes, workers=len(aicore.cores(None, None)),
                               choose=one_task)
    with pytest.raises(TooManyBlocks):
        pw.build(default, "aicore")  # that schedule, as given
    prog = pw.build(wl, "aicore")
    nest = prog.schedule.nest("Y")
    grid = [lp.name for lp in nest.loops if lp.annotation == "parallel"]
    assert nest.names[len(grid)] == "c.outer", str(prog.schedule)  # the block loop just inside the grid
    inputs = random_inputs(wl, seed=2)
    np.testing.assert_allclose(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-3)


def test_the_default_keeps_each_instance_to_a_few_thousand_blocks():
    """A 1x1 convolution whose plain default walks 64 channels, one a block, inside tiles of a few pixels:
    legal (below the device's limit, so a user's schedule like it builds), but under a cube fractal of
    arithmetic a block.  The aicore default streams the channels outside the tile instead."""
    wl = zoo.conv2d(1, 64, 28, 28, 64, 1, 1, 0)
    aicore = AicoreBackend()
    default = default_schedule(wl, vector_bytes=aicore.vector_bytes, workers=len(aicore.cores(None, None)),
                               choose=aicore.schedule_choices(None))
    resolved = ResolvedSchedule(default)  # as pw.build hands a schedule to its target
    assert DEFAULT_MAX_BLOCKS < aicore.compile(resolved).shapes["Y"].blocks <= MAX_BLOCKS  # as given: builds
    assert all(shape.blocks <= DEFAULT_MAX_BLOCKS for shape in aicore.compile_default(resolved).shapes.values())
    prog = pw.build(wl, "aicore")
    inputs = random_inputs(wl, seed=4)
    np.testing.assert_allclose(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-3)


def test_a_cores_busy_share_counts_its_overlapping_units_once():
    """Loads, compute and stores of one core overlap on the device clock (prefetch): busy is their union,
    at most the whole run, and a core that ran nothing adds no overhead."""
    _, s = matmul_tiled(prefetch=2)
    summary = run(s).summary()
    assert 0 < max(summary.busy.values()) <= 1.0
    assert summary.overhead <= summary.makespan * sum(1 for b in summary.busy.values() if b > 0)


def test_the_summary_names_what_bounds_a_device_run():
    tiny = pw.Workload("scale")
    x = tiny.input("X", (512, 64))
    tiny.output(tiny.compute("Y", (512, 64), lambda i, j: x[i, j] * 2.0))
    summary = run(tiny.schedule().parallel("Y", "i")).summary()  # a row a task: the orchestrator cannot keep up
    assert summary.bound == "orchestrator" and "bound by        orchestrator" in str(summary)
    _, s = matmul_tiled(n=512, tile=128, k_block=128, prefetch=2)  # 16 large tiles, AICPU work negligible
    summary = run(s, QUICK).summary()
    assert summary.bound in ("cube", "cube loads")
    assert set(summary.bounds) >= {"cube", "cube loads", "HBM", "orchestrator", "schedulers"}
    assert all(0 <= share <= 1 for share in summary.bounds.values())
    on_cpu = pw.build(zoo.softmax(8, 8), target="cpu")
    on_cpu.run(X=np.ones((8, 8), np.float32))
    assert on_cpu.trace.summary().bounds is None  # the real clock: no model to say what binds
