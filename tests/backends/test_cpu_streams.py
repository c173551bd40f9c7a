"""Software prefetch on the cpu target: long contiguous vector streams get one, short or strided ones none."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu.streams import DISTANCE_BYTES, MAX_STEP_BYTES, MIN_STREAM_BYTES, prefetch_ahead

pytestmark = pytest.mark.skipif("cpu" not in pw.targets(), reason="the cpu target is unavailable here")

PREFETCH = 'call void @"llvm.prefetch.p0"'


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
