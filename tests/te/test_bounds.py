"""Build-time bounds checks: guarded stencils and padding pass, real overruns are caught."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


@pytest.fixture
def wl():
    w = pw.Workload("b")
    w.input("A", (8, 6))
    return w


def test_plain_and_affine_accesses_pass(wl):
    a = wl.tensor("A")
    wl.output(wl.compute("T", (8, 6), lambda i, j: a[i, j]),
              wl.compute("S", (7, 3), lambda i, j: a[i + 1, 2 * j]),
              wl.compute("R", (4, 6), lambda i, j: a[(i * 3 + 5) % 8, j // 1]))
    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    out = pw.reference(wl, A=x)
    np.testing.assert_array_equal(out["T"], x)
    np.testing.assert_array_equal(out["S"], x[1:, ::2])
    np.testing.assert_array_equal(out["R"], x[(np.arange(4) * 3 + 5) % 8])


@pytest.mark.parametrize(
    "shape, fn, witness",
    [
        ((8, 6), lambda a, i, j: a[i + 1, j], "index i + 1 = 8 at i=7"),
        ((8, 4), lambda a, i, j: a[i, 2 * j], "index 2 * j = 6 at j=3"),
        ((8, 6), lambda a, i, j: a[i - 1, j], "index i - 1 = -1 at i=0"),
        ((9, 6), lambda a, i, j: a[i, j], "index i = 8 at i=8"),
    ],
)
def test_overruns_name_tensor_dimension_and_a_witness(wl, shape, fn, witness):
    a = wl.tensor("A")
    with pytest.raises(pw.BoundsError, match="task 'T'") as info:
        wl.compute("T", shape, lambda i, j: fn(a, i, j))
    assert witness in str(info.value) and "shape (8, 6)" in str(info.value)


def test_where_guards_make_stencils_and_padding_expressible(wl):
    a = wl.tensor("A")
    wl.compute("Left", (8, 6), lambda i, j: pw.where(i > 0, a[i - 1, j], 0.0))
    wl.compute("Right", (8, 6), lambda i, j: pw.where(i + 1 >= 8, 0.0, a[i + 1, j]))  # else-branch guard
    r = pw.reduce_axis(3, "r")
    wl.compute(
        "Pad", (8, 6),
        lambda i, j: pw.sum(pw.where((i + r - 1 >= 0) & (i + r - 1 < 8), a[i + r - 1, j], 0.0), r),
    )
    wl.compute("Either", (8, 6), lambda i, j: pw.where((i < 1) | (j < 1), 0.0, a[i - 1, j - 1]))
    wl.output(*(wl.tensor(n) for n in ("Left", "Right", "Pad", "Either")))
    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    out = pw.reference(wl, A=x)
    padded = np.pad(x, ((1, 1), (1, 1)))
    np.testing.assert_array_equal(out["Left"], padded[:-2, 1:-1])
    np.testing.assert_array_equal(out["Right"], padded[2:, 1:-1])
    np.testing.assert_array_equal(out["Pad"], padded[:-2, 1:-1] + x + padded[2:, 1:-1])
    np.testing.assert_array_equal(out["Either"], padded[:-2, :-2])


def test_a_guard_that_is_off_by_one_is_caught(wl):
    a = wl.tensor("A")
    with pytest.raises(pw.BoundsError, match="i = 8 at i=8"):
        wl.compute("Bad", (9, 6), lambda i, j: pw.where(i <= 8, a[i, j], 0.0))


def test_reduce_axes_are_bounded_by_their_extent(wl):
    a = wl.tensor("A")
    k = pw.reduce_axis(7, "k")
    with pytest.raises(pw.BoundsError, match="k = 6 at k=6"):
        wl.compute("Sum", (8,), lambda i: pw.sum(a[i, k], k))


def test_the_first_bad_access_in_reading_order_is_reported(wl):
    a = wl.tensor("A")
    with pytest.raises(pw.BoundsError, match="i - 1 = -1 at i=0"):
        wl.compute("T", (8, 6), lambda i, j: a[i - 1, j] + a[i + 1, j])
