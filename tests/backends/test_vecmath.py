"""Vector polynomial math on the cpu target: accurate to a few float32 ulp, no libm calls per lane."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ptowsp as pw

pytestmark = pytest.mark.skipif("cpu" not in pw.targets(), reason="the cpu target is unavailable here")

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-8, 0.3, -0.3, 0.5, -0.5, 1.0, 10.0, -10.0, 88.0, 88.8, -87.0, -90.0,
           1e30, -1e30, math.inf, -math.inf, math.nan]
FUNCTIONS = {
    "exp": (pw.exp, np.exp, (-100, 100)),
    "log": (pw.log, np.log, (1e-30, 1e30)),
    "tanh": (pw.tanh, np.tanh, (-12, 12)),
    "sigmoid": (pw.sigmoid, lambda x: 1 / (1 + np.exp(-x.astype(np.float64))), (-50, 50)),
    "erf": (pw.erf, np.vectorize(math.erf), (-6, 6)),
}


def samples(lo: float, hi: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    if lo > 0:  # log: spread over magnitudes
        body = np.exp(rng.uniform(math.log(lo), math.log(hi), 4000))
    else:
        body = np.concatenate([rng.uniform(lo, hi, 3000), rng.uniform(-1, 1, 1000)])
    return np.concatenate([body, SPECIAL, [-1.0, -5.0]]).astype(np.float32)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vectorized_math_matches_numpy(name):
    fn, reference, (lo, hi) = FUNCTIONS[name]
    x = samples(lo, hi)
    n = x.size + (-x.size) % 16
    x = np.resize(x, n)
    wl = pw.Workload(name)
    t = wl.input("x", (n,))
    wl.output(wl.compute("y", (n,), lambda i: fn(t[i])))
    prog = pw.build(wl.schedule().split("y", "i", 16).vectorize("y", "i.inner"), target="cpu")
    text = prog._executable.module_text  # generated afresh: each test's workload is new to the cache
    assert "<16 x float>" in text and "@expf" not in text and "@erff" not in text and "@llvm.exp." not in text
    with np.errstate(all="ignore"):
        expected = np.asarray(reference(x.astype(np.float64)), dtype=np.float64).astype(np.float32)
    got = prog(x=x)["y"]
    tiny = np.abs(expected) < 1e-37  # float32 subnormal results may flush to zero
    np.testing.assert_allclose(got[~tiny], expected[~tiny], rtol=4e-6, atol=1e-7, equal_nan=True)
    assert np.all(np.abs(got[tiny]) < 1e-37)


def test_exp_is_within_one_ulp_and_exact_at_the_range_ends():
    """exp: at most 1 float32 ulp off over its normal range (0.89 over every float32); inf from the first
    input whose result overflows; 0 where the result would be subnormal; NaN stays NaN."""
    high, below_high = np.float32(88.72283935546875), np.float32(88.72283172607422)  # log(FLT_MAX) between
    low = np.float32(-87.33654022216797)  # the smallest input with a normal result
    ends = [high, below_high, low, np.nextafter(low, np.float32(-100)), 0.0, -0.0, math.nan]
    rng = np.random.default_rng(2)
    x = np.concatenate([np.array(ends, np.float32), rng.uniform(low, below_high, (1 << 20) + 9).astype(np.float32)])
    wl = pw.Workload("exp_ulp")
    t = wl.input("x", (x.size,))
    wl.output(wl.compute("y", (x.size,), lambda i: pw.exp(t[i])))
    got = pw.build(wl.schedule().split("y", "i", 16).vectorize("y", "i.inner"), target="cpu")(x=x)["y"]
    assert got[0] == np.inf and np.isfinite(got[1]) and got[2] >= np.finfo(np.float32).tiny and got[3] == 0.0
    assert got[4] == got[5] == 1.0 and np.isnan(got[6])
    exact = np.exp(x[1:6].astype(np.float64)), np.exp(x[7:].astype(np.float64))
    for g, e in zip((got[1:6], got[7:]), exact, strict=True):
        normal = e >= np.finfo(np.float32).tiny
        ulp = np.spacing(e[normal].astype(np.float32)).astype(np.float64)
        assert np.max(np.abs(g[normal] - e[normal]) / ulp) <= 1.0
