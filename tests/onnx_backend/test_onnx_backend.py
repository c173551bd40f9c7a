"""The ONNX standard's backend suite (suite.py) against its reviewed expectation file, expected.toml:
a case passes on every target it runs on unless the file lists it, with the reason; a listed case
that passes fails too (so the file stays true), and a wrong result or a raw exception is never
expected.  `make test` runs the reference on every case but the light models and a sample on the
compiled targets; `make conformance-onnx` runs them all (suite.py: FULL)."""

from __future__ import annotations

import pytest

from tests.onnx_backend.suite import TARGETS, cases, judge, load_expected, suite_cases

EXPECTED = load_expected()


@pytest.mark.parametrize("name", suite_cases())
def test_case(name):
    for target, o in judge(name).items():
        listed = EXPECTED[target].get(name)
        assert o.kind not in ("wrong", "crashed"), f"{target}: {o.kind}: {o.detail}"
        if listed:
            assert o.kind != "pass", (f"{name} passes on {target} but expected.toml lists it ({listed!r}): "
                                      "take it out")
        else:
            assert o.kind == "pass", f"{target}: {o.kind}: {o.detail}"


def test_the_expectation_file_names_real_cases_with_reasons():
    known = cases()
    for target in TARGETS:
        for name, why in EXPECTED[target].items():
            assert name in known, f"expected.toml [{target}] lists {name!r}, which the suite does not have"
            assert why.strip(), f"expected.toml [{target}]: {name} has no reason"
