"""A few dozen pairs of the tensorize fuzz (tests/conformance/tensorize_fuzz.py) in every test run;
`make fuzz` runs thousands."""

from __future__ import annotations

import random

import numpy as np
import pytest

import ptowsp as pw
from tests.conformance.tensorize_fuzz import draw


@pytest.mark.parametrize("seed", range(4))
def test_random_tensorized_schedules_match_numpy(seed):
    rng = random.Random(seed)
    for _ in range(10):
        wl, s, inputs, expected, intrinsic = draw(rng)
        got = pw.build(s, target="cpu").run(**inputs)[wl.outputs[0]]
        if intrinsic == "gemm_i8":
            np.testing.assert_array_equal(got, expected, err_msg=str(s))
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=str(s))
