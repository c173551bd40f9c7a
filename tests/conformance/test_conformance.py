"""Conformance: every target against pw.reference, and the reference against numpy formulas.

Only the numpy reference exists today; compiled targets join TARGETS as they
land and run the same catalogue.
"""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from tests.conformance.catalogue import CASES, random_inputs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_the_numpy_formula(case):
    wl = case.make()
    inputs = random_inputs(wl)
    before = {k: v.copy() for k, v in inputs.items()}
    got = pw.reference(wl, **inputs)
    expected = case.expected({k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()})
    assert got.keys() == expected.keys()
    for name, value in got.items():
        assert value.dtype == np.dtype(wl.tensor(name).dtype) and value.shape == wl.tensor(name).shape
        scale = max(1.0, float(np.max(np.abs(expected[name]))))
        np.testing.assert_allclose(value, expected[name], rtol=case.rtol, atol=case.rtol * scale)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
