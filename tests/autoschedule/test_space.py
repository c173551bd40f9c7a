"""The search space: derived from the workload, every point legal, narrowed or extended by the user."""

from __future__ import annotations

import random

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.autoschedule.space import Space
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.tiles import VECTOR_TILE, WIDE_VECTOR_TILE
from ptowsp.workloads import zoo
from tests.conformance.catalogue import random_inputs

WORKLOADS = {
    "matmul": lambda: zoo.matmul(64, 48, 64),
    "softmax": lambda: zoo.softmax(32, 64),
    "layernorm": lambda: zoo.layernorm(16, 64),
    "mlp": lambda: zoo.mlp(16, 32, 64, 32),
    "attention": lambda: zoo.attention(1, 2, 16, 16),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_sampled_point_builds_and_matches_the_reference(name):
    wl = WORKLOADS[name]()
    space = Space(wl, vector_bytes=32, workers=2)
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    rng = random.Random(0)
    for point in [space.default(), *(space.sample(rng) for _ in range(6))]:
        out = pw.build(space.schedule(point), "cpu", workers=2).run(**inputs)
        for key, want in expected.items():
            np.testing.assert_allclose(out[key], want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {point}")


def test_the_default_point_is_the_default_schedule_and_knobs_come_from_structure():
    wl = zoo.matmul(256, 256, 256)
    space = Space(wl, vector_bytes=32, workers=2)
    assert space.schedule(space.default()) == default_schedule(wl, vector_bytes=32, workers=2)
    assert {"C.tile_rows", "C.tile_vectors", "C.k_block", "C.pack_panel", "C.tasks", "fuse", "dispatch",
            "prefetch"} <= set(space.knobs)
    assert all(256 % (v * 8) == 0 for v in space.knobs["C.tile_vectors"].choices)
    softmax = Space(zoo.softmax(64, 256), vector_bytes=32, workers=2)
    assert {"Y_max.at", "Y_max.partials", "Y.vectors"} <= set(softmax.knobs)  # placement, reduction, vector
    assert "Y_max.tile_rows" not in softmax.knobs


def test_mutation_changes_one_knob_or_a_few_and_sampling_is_seeded():
    space = Space(zoo.matmul(128, 128, 128), vector_bytes=32, workers=2)
    point = space.default()
    rng = random.Random(1)
    changed = [sum(point[k] != n[k] for k in point) for n in (space.mutate(point, rng) for _ in range(200))]
    assert min(changed) == 1 and 60 < changed.count(1) < 140 and max(changed) >= 3
    only = space.mutate(point, rng, among={"C.k_block"})
    assert {k for k in point if point[k] != only[k]} == {"C.k_block"}
    assert space.sample(random.Random(7)) == space.sample(random.Random(7))


def test_the_user_narrows_and_extends_the_space():
    wl = zoo.matmul(128, 128, 128)
    space = Space(wl, vector_bytes=32, workers=2, overrides={"C.k_block": [32, 64], "*.tasks": [3, 5]})
    assert space.knobs["C.k_block"].choices == (32, 64)
    assert space.knobs["C.tasks"].choices == (3, 5)
    s = space.schedule({**space.default(), "C.k_block": 32})
    assert "k.outer" in s.loops("C") and s.nest("C").loop("k.inner").extent == 32
    with pytest.raises(pw.ScheduleError, match="no knob matches 'C.nope'"):
        Space(wl, vector_bytes=32, workers=2, overrides={"C.nope": [1]})
    with pytest.raises(pw.ScheduleError, match="'dispatch' cannot take 'fifo'.*one of"):
        Space(wl, vector_bytes=32, workers=2, overrides={"dispatch": ["fifo"]})
    with pytest.raises(pw.ScheduleError, match="'C.tile_rows' cannot take -1"):
        Space(wl, vector_bytes=32, workers=2, overrides={"C.tile_rows": [-1]})


@pytest.mark.parametrize("blocks", [1, 2, 4])
def test_a_blocked_convolution_s_register_tile_can_hold_several_channel_blocks(blocks):
    """`tile_blocks`: each broadcast input feeds that many vectors of output channels (oneDNN's several
    channel blocks per register tile); every choice computes the convolution."""
    cpu = pw.backends.backend("cpu")
    wl = cpu.default_workload(zoo.conv2d(1, 8, 6, 6, 64, 3, 1, 1))
    space = Space(wl, vector_bytes=cpu.vector_bytes, workers=2)
    knob, rows = space.knobs["Y_blocked.tile_blocks"], space.knobs["Y_blocked.tile_rows"].default
    assert knob.choices == (1, 2, 4)
    cap = WIDE_VECTOR_TILE if cpu.vector_bytes >= 64 else VECTOR_TILE  # accumulators the registers hold
    assert knob.default == max(b for b in knob.choices if b * rows <= cap)  # as many blocks as fit beside the rows
    s = space.schedule({"Y_blocked.tile_blocks": blocks})
    loops = s.loops("Y_blocked")
    if blocks > 1:  # the blocks' loop is inside the reductions, unrolled beside the rows (either inside)
        nest = s.nest("Y_blocked").loops
        assert "o_block.inner" in loops[-3:-1]
        assert nest[-3].annotation == "unrolled" and nest[-2].annotation == "unrolled"
        assert all(nest[k].reduce for k in range(len(nest) - 6, len(nest) - 3))
    inputs = random_inputs(wl)
    got = pw.build(s, "cpu", workers=2).run(**inputs)["Y"]
    np.testing.assert_allclose(got, pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)
