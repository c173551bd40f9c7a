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
