"""Random legal schedules: reproducible, replayable, and every nest still covers its domain."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.schedules.loopnest import SERIAL, FuseRelation
from ptowsp.schedules.random_schedule import random_schedule
from ptowsp.workloads import zoo

WORKLOADS = [
    zoo.matmul(17, 31, 13), zoo.softmax(7, 33), zoo.layernorm(5, 24), zoo.conv2d(1, 3, 7, 6, 2, 3, 2, 1),
    zoo.attention(1, 2, 9, 4), zoo.elementwise_chain((12, 5), 5), zoo.transformer_block(8, 16, 2, 24),
]


def covered_extent(nest, axis: str) -> int:
    """Points the nest's loops give the original axis (splits may round up, fuses multiply)."""
    extents = {lp.name: lp.extent for lp in nest.loops}

    def extent_of(name: str) -> int:
        if name in extents:
            return extents[name]
        for rel in nest.relations:
            if isinstance(rel, FuseRelation) and name in (rel.outer, rel.inner):
                fused = extent_of(rel.fused)
                return rel.inner_extent if name == rel.inner else math.ceil(fused / rel.inner_extent)
            if not isinstance(rel, FuseRelation) and rel.parent == name:
                return extent_of(rel.outer) * extent_of(rel.inner)
        raise AssertionError(f"{name} is neither a loop nor derived")

    return extent_of(axis)


@settings(max_examples=60, derandomize=True)
@given(st.sampled_from(range(len(WORKLOADS))), st.integers(0, 10**6))
def test_random_schedules_are_legal_replayable_and_cover_the_domain(index, seed):
    wl = WORKLOADS[index]
    s = random_schedule(wl, seed)
    assert random_schedule(wl, seed) == s  # seeded: the same schedule every time
    again = pw.Schedule.from_json(wl, s.to_json())
    assert again == s
    for task in wl.tasks:
        if wl.category(task) is pw.Category.OPAQUE or task in s.inlined:
            continue
        nest = s.nest(task)
        assert again.nest(task) == nest
        nest.checked()  # invariants hold
        t = wl.task(task)
        for axis, extent in zip(t.loop_names, t.tensor.shape, strict=True):
            assert covered_extent(nest, axis) >= extent
        vectorized = [lp for lp in nest.loops if lp.annotation == "vectorized"]
        assert not vectorized or nest.loops[-1] is vectorized[0]
        annotations = [lp.annotation for lp in nest.loops]
        parallel = [p for p, a in enumerate(annotations) if a == "parallel"]
        assert parallel == list(range(len(parallel)))
        assert all(a in (SERIAL, "vectorized", "unrolled", "parallel") for a in annotations)


@pytest.mark.parametrize("wl", WORKLOADS[:3], ids=lambda w: w.name)
def test_random_schedules_actually_schedule(wl):
    counts = [len(random_schedule(wl, seed).steps) for seed in range(20)]
    assert sum(counts) > 20 and len(set(counts)) > 2
