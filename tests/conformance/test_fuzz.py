"""The fuzz's verdict on one run (tests/conformance/fuzz.py): tiles the device cannot take (a buffer
overflow, too many blocks) are the target's typed refusal, counted apart from failures; a match is
no problem."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from tests.backends.test_aicore import matmul_tiled
from tests.conformance.fuzz import REFUSED, problem


@pytest.fixture(scope="module")
def overflowing():
    """A legal schedule whose 128 x 512 fp16 blocks (128 KiB) overflow the aicore's L0A."""
    wl, s = matmul_tiled(n=512, tile=128, k_block=512)
    inputs = pw.workloads.random_inputs(wl)
    return s, inputs, pw.reference(wl, **inputs)


def test_a_device_buffer_overflow_is_a_refusal_not_a_failure(overflowing):
    s, inputs, expected = overflowing
    assert problem(s, "aicore", inputs, expected, 1e-2) is REFUSED


def test_the_same_schedule_matches_on_cpu_and_a_wrong_reference_is_a_mismatch(overflowing):
    s, inputs, expected = overflowing
    assert problem(s, "cpu", inputs, expected, 1e-2) is None
    wrong = {name: -value for name, value in expected.items()}
    assert problem(s, "cpu", inputs, wrong, 1e-2).startswith("mismatch in")


def test_tiles_too_small_for_the_device_are_a_refusal_too():
    wl = pw.workloads.zoo.matmul(256, 256, 256, "float16")
    s = (wl.schedule().tile("C", i=2, j=2).split("C", "k", 2)
         .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"))
    inputs = pw.workloads.random_inputs(wl)
    assert problem(s, "aicore", inputs, pw.reference(wl, **inputs), 1e-2) is REFUSED


def test_an_output_that_is_empty_or_holds_inf_is_compared_not_a_crash():
    wl = pw.Workload("edges")
    x = wl.input("X", (4,))
    wl.output(wl.compute("Y", (4,), lambda i: x[i] / 0.0))  # inf where x > 0, -inf below, nan at 0
    wl.output(wl.compute("E", (0,), lambda i: x[i] * 2.0))
    inputs = {"X": np.array([1.0, -2.0, 3.0, 0.5], np.float32)}
    expected = pw.reference(wl, **inputs)
    assert expected["E"].size == 0 and np.isinf(expected["Y"]).all()
    assert problem(wl.schedule(), "cpu", inputs, expected, 1e-5) is None
    flipped = {**expected, "Y": -expected["Y"]}
    assert problem(wl.schedule(), "cpu", inputs, flipped, 1e-5).startswith("mismatch in Y")
