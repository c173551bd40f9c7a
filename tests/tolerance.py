"""Float comparisons whose tolerance follows from the computation, not from the CPU that ran it.

A compiled sum of `terms` rounded products comes out in another order on another CPU (AVX2 adds
8 lanes at a time, AVX-512 16; register tiles of other shapes), so two correct results differ by
up to about terms x eps x the terms' magnitude.  An element near zero then has a large relative
error and a small absolute one: a relative tolerance alone fails on one CPU and passes on another.
"""

from __future__ import annotations

import numpy as np


def sum_tolerance(want: np.ndarray, terms: int, dtype: object = np.float32) -> float:
    """The absolute error two orders of a sum of `terms` terms may differ by: terms x eps x the
    largest |want| (the bound of recursive summation, with the result's scale for the terms')."""
    return terms * float(np.finfo(dtype).eps) * max(1.0, float(np.max(np.abs(want))))


def assert_sums_close(got: np.ndarray, want: np.ndarray, terms: int, rtol: float = 1e-5, **kwargs) -> None:
    """got == want, as sums of `terms` float32 terms computed in any order may be (see sum_tolerance)."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=sum_tolerance(want, terms), **kwargs)
