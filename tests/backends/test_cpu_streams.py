"""Long streams on the cpu target: long contiguous vector streams get a software prefetch (short or
strided ones none), and big outputs written once non-temporal stores."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu.streams import (
    DISTANCE_BYTES, MAX_STEP_BYTES, MIN_STREAM_BYTES, STREAM_OUT_BYTES, prefetch_ahead, streamed_outputs, vector_aligned,
)
from ptowsp.lower import lower_program
from ptowsp.lower.ir import Buffer
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.te import Expr, Op
from ptowsp.workloads import random_inputs

pytestmark = pytest.mark.skipif("cpu" not in pw.targets(), reason="the cpu target is unavailable here")

PREFETCH = 'call void @"llvm.prefetch.p0"'


@pytest.fixture(autouse=True)
def own_kernel_cache(tmp_path, monkeypatch):
    """These tests read the LLVM IR, which only a compile makes: a kernel another test of the session
    built (the 4 MiB stream is both a long stream and a big output) would come from the shared cache."""
    monkeypatch.setenv("PTOWSP_CACHE_DIR", str(tmp_path))


def test_prefetch_ahead_rule():
    long = MIN_STREAM_BYTES // 64
    assert prefetch_ahead(64, long) == DISTANCE_BYTES  # a dense stream: a whole number of steps ahead
    assert prefetch_ahead(192, long) == 192 * -(-DISTANCE_BYTES // 192)
    assert prefetch_ahead(64, long - 1) is None  # too short a walk
    assert prefetch_ahead(MAX_STEP_BYTES * 2, long) is None  # a strided walk
    assert prefetch_ahead(0, long) is None and prefetch_ahead(-64, long) is None and prefetch_ahead(None, long) is None


def _elementwise(n: int):
    wl = pw.Workload(f"stream{n}")
    x, z = wl.input("x", (n,)), wl.input("z", (n,))
    wl.output(wl.compute("y", (n,), lambda i: pw.exp(x[i] * 0.5) + z[i]))
    return wl, wl.schedule().split("y", "i", 16).vectorize("y", "i.inner")


@pytest.mark.parametrize("n", [1 << 20, (1 << 20) + 5])  # the second has a guarded (masked) tail
def test_long_stream_is_prefetched_and_correct(n):
    wl, schedule = _elementwise(n)
    prog = pw.build(schedule, target="cpu")
    text = prog._executable.module_text
    assert text.count(PREFETCH) == 3  # two input streams and the output
    rng = np.random.default_rng(0)
    x, z = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(prog(x=x, z=z)["y"], np.exp(x * 0.5) + z, rtol=1e-6, atol=1e-6)


def test_short_rows_and_strided_walks_are_not_prefetched():
    wl = pw.Workload("rows")
    x = wl.input("x", (256, 1024))
    wl.output(wl.compute("y", (256, 1024), lambda i, j: x[i, j] * 2.0))
    rows = wl.schedule().split("y", "j", 16).vectorize("y", "j.inner")  # each j.outer walk is 4 KB
    assert PREFETCH not in pw.build(rows, target="cpu")._executable.module_text
    # the vector loop inside a loop over rows: every step jumps a whole row
    columns = wl.schedule().split("y", "j", 16).reorder("y", "j.outer", "i", "j.inner").vectorize("y", "j.inner")
    prog = pw.build(columns, target="cpu")
    assert PREFETCH not in prog._executable.module_text
    data = np.random.default_rng(1).standard_normal((256, 1024)).astype(np.float32)
    np.testing.assert_array_equal(prog(x=data)["y"], data * 2.0)


NONTEMPORAL = "!nontemporal"


def test_a_big_output_written_once_gets_non_temporal_stores_and_a_fence():
    n = STREAM_OUT_BYTES // 4
    wl, schedule = _elementwise(n)
    prog = pw.build(schedule, target="cpu")
    text = prog._executable.module_text
    assert NONTEMPORAL in text and "llvm.x86.sse.sfence" in text
    assert text.count(PREFETCH) == 2  # the inputs: a line written around the cache is not fetched first
    rng = np.random.default_rng(2)
    x, z = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = prog(x=x, z=z)["y"]
    assert out.ctypes.data % 64 == 0  # outputs start on a cache line: whole vectors land aligned
    np.testing.assert_allclose(out, np.exp(x * 0.5) + z, rtol=1e-6, atol=1e-6)


def test_small_outputs_and_accumulators_keep_plain_stores():
    small, schedule = _elementwise(STREAM_OUT_BYTES // 8)
    assert NONTEMPORAL not in pw.build(schedule, target="cpu")._executable.module_text
    mm = pw.zoo.matmul(2048, 1024, 64)  # an 8 MB result read back at every step of k
    kernel = lower_program(mm, default_schedule(mm, vector_bytes=64)).kernels["C"]
    assert streamed_outputs(kernel) == set()


def test_only_stores_whose_first_lane_is_vector_aligned_qualify():
    i, jo, ji = (Expr(Op.VAR, "int64", (), (n, e)) for n, e in (("i", 4), ("j.outer", 64), ("j.inner", 16)))
    column = jo * 16 + ji
    assert vector_aligned(Buffer("y", (4, 1024), "float32"), (i, column), "j.inner", 16)
    assert not vector_aligned(Buffer("y", (4, 1000), "float32"), (i, column), "j.inner", 16)  # rows of 1000
    assert not vector_aligned(Buffer("y", (4, 1040), "float32"), (i, column + 1), "j.inner", 16)  # one along


@pytest.mark.parametrize("shift", [0, 3], ids=["aligned", "shifted"])
def test_an_unflattened_index_is_a_contiguous_vector_load_where_the_lanes_stay_in_one_row(shift):
    """Y[s, j] = X[(s * 768 + j + shift) // 64 % 12, s, (s * 768 + j + shift) % 64]: a Reshape's index
    unflattened (BERT's head merge).  Aligned, a vector of 16 lanes stays in one row of 64: one load,
    no element gathered lane by lane; shifted by 3 it crosses rows, and is gathered."""
    wl = pw.Workload(f"merge{shift}")
    x = wl.input("X", (13, 4, 64))
    wl.output(wl.compute("Y", (4, 768), lambda s, j: x[(s * 768 + j + shift) // 64 % 13, s, (s * 768 + j + shift) % 64]))
    schedule = wl.schedule().split("Y", "j", 16).vectorize("Y", "j.inner")
    prog = pw.build(schedule, "cpu", workers=1)
    ir_text = prog.source("Y", "llvm")
    gathered = "llvm.masked.gather" in ir_text or ir_text.count("insertelement") >= 16
    assert gathered == bool(shift) and (shift or ir_text.count("insertelement") == 0)
    inputs = random_inputs(wl, seed=2)
    np.testing.assert_array_equal(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"])


@pytest.mark.parametrize("width", [56, 50])
def test_a_flattened_pixel_axis_reads_an_image_row_by_row_as_contiguous_vectors(width):
    """Y[c, p] = X[c, p // W, p % W]: a loop over the pixels of an NCHW image.  Vectors cross its rows
    (56 is not a multiple of 16), but the address (p // W) * W + p % W is p: one load per vector."""
    wl = pw.Workload(f"pixels{width}")
    x = wl.input("X", (3, 8, width))
    wl.output(wl.compute("Y", (3, 8 * width), lambda c, p: x[c, p // width, p % width] * 2.0))
    schedule = wl.schedule().split("Y", "p", 16).vectorize("Y", "p.inner")
    prog = pw.build(schedule, "cpu", workers=1)
    assert prog.source("Y", "llvm").count("insertelement") == 0
    inputs = random_inputs(wl, seed=3)
    np.testing.assert_array_equal(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"])


def test_a_bounds_check_the_lanes_share_is_computed_once_not_per_lane():
    """Y[y, x] = where(y >= 1, X[y - 1, x], 0): the row's check is the same in every lane of a vector
    along x.  It is one scalar comparison, splat, where it was a vector of 64-bit comparisons."""
    wl = pw.Workload("rows")
    x = wl.input("X", (8, 64))
    wl.output(wl.compute("Y", (8, 64), lambda y, xx: pw.where(y >= 1, x[pw.maximum(y - 1, 0), xx], 0.0)))
    prog = pw.build(wl.schedule().split("Y", "xx", 16).vectorize("Y", "xx.inner"), "cpu", workers=1)
    emitted = prog._executable.module_text  # as emitted, before LLVM's passes (which may peel the first row)
    assert "icmp" in emitted and not any("icmp" in line and "x i64>" in line for line in emitted.splitlines())
    inputs = random_inputs(wl, seed=4)
    np.testing.assert_array_equal(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"])


@pytest.mark.parametrize("mode", ["constant", "repeat_edge"])
def test_a_clamped_row_is_one_masked_vector_load_not_a_gather(mode):
    """A boundary condition clamps its column index, so a vector that straddles the edge read lane by
    lane.  Now it is one masked load of the lanes the clamp leaves in place; the lanes it moves (live
    under repeat_edge, masked off by the constant border's where) are gathered only then."""
    wl = pw.Workload(f"taps_{mode}")
    x = wl.input("X", (4, 37))
    view = x.boundary(mode, 0.0) if mode == "constant" else x.boundary(mode)
    wl.output(wl.compute("Y", (4, 37), lambda y, xx: view[y, xx - 3] + view[y, xx + 2] * 2.0))
    prog = pw.build(wl.schedule().split("Y", "xx", 8).vectorize("Y", "xx.inner"), "cpu", workers=1)
    emitted = prog._executable.module_text
    assert "llvm.masked.load" in emitted and "branch_weights" in emitted  # the gather: an unlikely branch
    for seed in range(3):
        inputs = random_inputs(wl, seed=seed)
        np.testing.assert_array_equal(prog.run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"])



@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
def test_a_strided_read_is_one_hardware_gather_masked_where_a_guard_is(dtype):
    """Y[i, j] = X[j, i] along j: each lane reads its own row, by one llvm.masked.gather (lanes a guard
    masks off, past the end of a non-dividing split, are not read)."""
    wl = pw.Workload(f"transpose_{dtype}")
    x = wl.input("X", (21, 12), dtype)
    wl.output(wl.compute("Y", (12, 21), lambda i, j: x[j, i]))
    prog = pw.build(wl.schedule().split("Y", "j", 8).vectorize("Y", "j.inner"), "cpu", workers=1)
    assert "llvm.masked.gather" in prog._executable.module_text
    for seed in range(2):
        inputs = random_inputs(wl, seed=seed)
        np.testing.assert_array_equal(prog.run(**inputs)["Y"], inputs["X"].T)
