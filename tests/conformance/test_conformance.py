"""Conformance: every registered target against pw.reference, and the reference against numpy.

Each catalogue workload runs under the empty schedule, the default schedule
(`pw.build(wl, target)`: fusion, grouping, tiling, a task grid; also with
fusion off and for one worker), a hand schedule, a fused schedule
(compute_at everywhere, vector partial reductions), category fusion
(`fuse_by_category()`) on top of the empty, the hand and a random schedule,
seeded random legal schedules, and seeded points of the AutoScheduler's
search space on every compiled target of this machine.
The numpy target ignores loop steps, so it runs the default and the
category-fused schedule only.
`make fuzz` runs the same comparison over thousands of random schedules.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.autoschedule.space import Space
from ptowsp.backends.base import backend
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.random_schedule import random_schedule
from tests.conformance.catalogue import CASES, fused_schedule, hand_schedule, random_inputs

# more in `make fuzz` (thousands of random schedules): here, what the suite's time allows (the second CPU
# level's pass, Makefile, runs 2)
RANDOM_SCHEDULES = int(os.environ.get("PTOWSP_RANDOM_SCHEDULES", "3"))
SPACE_POINTS = 1
COMPILED = [t for t in pw.targets() if t != "numpy"]


def assert_close(got: dict, expected: dict, wl: pw.Workload, rtol: float, context: str = "") -> None:
    assert got.keys() == expected.keys()
    for name, value in got.items():
        assert value.dtype == np.dtype(wl.tensor(name).dtype) and value.shape == wl.tensor(name).shape
        finite = np.abs(expected[name].astype(np.float64))
        finite = finite[np.isfinite(finite)]  # (an infinity would make any value close)
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(value, expected[name], rtol=rtol, atol=rtol * scale, err_msg=f"{name} {context}")


def schedules_for(wl: pw.Workload, target: str) -> list[pw.Schedule]:
    layouts = target != "cuda"  # random layouts of intermediates and constants; cuda refuses them
    prefetches = target == "cpu"  # random prefetch_tensor steps: a cpu cache hint, which the others refuse
    # the aicore target lowers as the cpu does; what is its own (the device clock) needs fewer of them
    count = RANDOM_SCHEDULES // 2 if target == "aicore" else RANDOM_SCHEDULES
    randoms = [random_schedule(wl, seed, layouts=layouts, prefetches=prefetches) for seed in range(count)]
    by_category = [wl.schedule().fuse_by_category(), hand_schedule(wl).fuse_by_category(),
                   random_schedule(wl, RANDOM_SCHEDULES).fuse_by_category()]
    width = backend(target).vector_bytes
    defaults = [default_schedule(wl, vector_bytes=width, workers=w, fuse=f) for w, f in ((1, True), (2, False))]
    space, rng = Space(wl, vector_bytes=width, workers=2), random.Random(0)
    tuned = [space.schedule(space.sample(rng)) for _ in range(SPACE_POINTS)]
    return [wl.schedule(), *defaults, hand_schedule(wl), fused_schedule(wl), *by_category, *randoms, *tuned]


def test_catalogue_size():
    assert len(CASES) >= 30
    assert len(CASES) * (9 + RANDOM_SCHEDULES) * max(1, len(COMPILED)) >= 300


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_the_numpy_formula(case):
    wl = case.make()
    inputs = random_inputs(wl)
    before = {k: v.copy() for k, v in inputs.items()}
    with np.errstate(all="ignore"):
        expected = case.expected({k: v.astype(np.float64) if v.dtype.kind == "f" or v.dtype.name == "bfloat16" else v
                                  for k, v in inputs.items()})
    assert_close(pw.reference(wl, **inputs), expected, wl, case.rtol)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numpy_target(case):
    wl = case.make()
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    assert_close(pw.build(wl, target="numpy").run(**inputs), expected, wl, 0)
    assert_close(pw.build(wl.schedule().fuse_by_category(), target="numpy").run(**inputs), expected, wl, 0)


@pytest.mark.parametrize("target", COMPILED)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compiled_targets_match_the_reference(case, target):
    wl = case.make()
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    rtol = max(case.rtol, 1e-5)
    default = pw.build(wl, target=target)  # the default schedule for this target and machine
    assert_close(default.run(**inputs), expected, wl, rtol, context=f"on {target} under\n{default.schedule}")
    for schedule in schedules_for(wl, target):
        got = pw.build(schedule, target=target).run(**inputs)
        assert_close(got, expected, wl, rtol, context=f"on {target} under\n{schedule}")
