"""Program features for the cost model: fixed length, deterministic, and moved by what schedules change."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from ptowsp.autoschedule.features import FEATURE_DOCS, FEATURE_NAMES, program_features
from ptowsp.autoschedule.space import Space
from ptowsp.lower import lower_program
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import zoo

SMALL = {
    "matmul": lambda: zoo.matmul(32, 48, 16),
    "softmax": lambda: zoo.softmax(16, 32),
    "layernorm": lambda: zoo.layernorm(16, 32),
    "mlp": lambda: zoo.mlp(8, 16, 32, 16),
    "attention": lambda: zoo.attention(1, 2, 16, 8),
}


def features(wl, schedule, **kw) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, program_features(lower_program(wl, schedule), **kw), strict=True))


def tiled(wl, tile: int = 64):
    return (wl.schedule().tile("C", i=tile, j=tile).split("C", "k", tile)
            .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"))


def test_names_are_unique_and_documented():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) == len(FEATURE_DOCS)
    assert 30 <= len(FEATURE_NAMES) <= 60


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("which", ["default", "empty"])
def test_fixed_length_finite_and_deterministic(name, which):
    wl = SMALL[name]()
    s = default_schedule(wl, vector_bytes=32, workers=2) if which == "default" else wl.schedule()
    a = program_features(lower_program(wl, s))
    b = program_features(lower_program(wl, s))
    assert a.shape == (len(FEATURE_NAMES),) and a.dtype == np.float64
    assert np.isfinite(a).all()
    assert a.tobytes() == b.tobytes()  # bit-identical, not merely close


def test_same_vector_in_another_process():
    """No dependence on string hashing: a record written by one process matches a fresh one's features."""
    code = ("from ptowsp.autoschedule.features import program_features; from ptowsp.lower import lower_program; "
            "from ptowsp.schedules.passes.default import default_schedule; from ptowsp.workloads import zoo; "
            "wl = zoo.mlp(8, 16, 32, 16); "
            "print(program_features(lower_program(wl, default_schedule(wl))).tobytes().hex())")
    wl = zoo.mlp(8, 16, 32, 16)
    here = program_features(lower_program(wl, default_schedule(wl))).tobytes().hex()
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert there.stdout.strip() == here


def test_flops_agree_with_the_task_table():
    wl = zoo.matmul(64, 64, 64)
    s = wl.schedule().split("C", "i", 8).parallel("C", "i.outer")
    prog = lower_program(wl, s)
    f = dict(zip(FEATURE_NAMES, program_features(prog), strict=True))
    assert f["log2_flops_per_instance"] == pytest.approx(math.log2(1 + prog.access["C"].at()[1]))
    assert f["log2_total_flops"] == pytest.approx(math.log2(1 + 8 * prog.access["C"].at()[1]))


def j_inside_k(wl):
    """i, j.outer, k, j.inner: a row of 8 accumulators moves along k."""
    return wl.schedule().split("C", "j", 8).reorder("C", "i", "j.outer", "k", "j.inner")


def test_vectorizing_the_innermost_loop_sets_the_vector_width():
    wl = zoo.matmul(64, 64, 64)
    plain = features(wl, j_inside_k(wl))
    vector = features(wl, j_inside_k(wl).vectorize("C", "j.inner"), vector_bytes=32)
    assert plain["vector_lanes"] == 0 and plain["vector_frac"] == 0
    assert vector["vector_lanes"] == 8 and vector["vector_frac"] == 1
    assert vector["vector_regs"] == 1  # 8 float32 lanes fill one 32-byte register


def test_a_parallel_grid_sets_the_instance_count():
    wl = zoo.matmul(64, 64, 64)
    alone = features(wl, wl.schedule(), workers=2)
    grid = features(wl, wl.schedule().split("C", "i", 8).parallel("C", "i.outer"), workers=2)
    assert alone["log2_instances"] == 0 and grid["log2_instances"] == 3
    assert alone["grid_idle_frac"] == 0.5 and grid["grid_idle_frac"] == 0  # one instance leaves a worker idle
    assert alone["serial_work_frac"] == 1 and grid["serial_work_frac"] == 0
    assert grid["log2_flops_per_instance"] == pytest.approx(alone["log2_flops_per_instance"] - 3, abs=1e-3)


def test_tiling_cuts_the_estimated_memory_traffic():
    """Naive i, j, k reads B down a column in the inner loop; 64x64 tiles keep their panels in cache."""
    wl = zoo.matmul(512, 512, 512)
    naive, tile = features(wl, wl.schedule()), features(wl, tiled(wl))
    assert naive["strided_frac"] > 0 and tile["strided_frac"] == 0
    assert tile["log2_bytes_l2"] < naive["log2_bytes_l2"] - 3
    assert tile["log2_bytes_l3"] < naive["log2_bytes_l3"] - 3
    # 3 MiB of matrices fit L3: both read each element from memory once
    assert tile["log2_bytes_dram"] == pytest.approx(naive["log2_bytes_dram"], abs=0.05)
    assert naive["log2_bytes_dram"] == pytest.approx(math.log2(1 + 3 * 512 * 512 * 4), abs=0.01)
    big = zoo.matmul(2048, 2048, 2048)  # 48 MiB: beyond L3, so the order decides the memory traffic
    assert features(big, tiled(big))["log2_bytes_dram"] < features(big, big.schedule())["log2_bytes_dram"] - 3


def test_a_carried_accumulation_and_its_chains():
    wl = zoo.matmul(64, 64, 64)
    naive = features(wl, wl.schedule())  # C[i, j] += ... over k innermost: one serial chain
    lanes = features(wl, j_inside_k(wl).vectorize("C", "j.inner"))
    assert naive["carried_frac"] > 0.9 and naive["log2_chains"] == 0
    assert lanes["carried_frac"] > 0.9 and lanes["log2_chains"] == 3  # 8 independent lanes


def test_computing_softmax_per_row_reads_memory_once():
    """Four stored kernels pass X twice and the exponentials three times; compute_at keeps a row in cache."""
    wl = zoo.softmax(4096, 1024)
    fused = wl.schedule()
    for producer in ("Y_sum", "Y_exp", "Y_max"):
        fused.compute_at(producer, "Y", "i")
    apart, together = features(wl, wl.schedule()), features(wl, fused)
    assert apart["n_kernels"] == 4 and together["n_kernels"] == 1
    assert together["log2_total_bytes_dram"] == pytest.approx(math.log2(1 + 2 * 4096 * 1024 * 4), abs=0.01)
    assert apart["log2_total_bytes_dram"] > together["log2_total_bytes_dram"] + 1
    assert together["transcendental_frac"] > 0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_lowering_and_walks_cached_per_task_give_the_features_of_a_fresh_lowering(name):
    """A search lowers each task once per lower.task_key and walks each kernel once: every point's kernels
    and features must be those of lowering it afresh, and most tasks must come from the cache."""
    wl = SMALL[name]()
    space = Space(wl, vector_bytes=32, workers=2)
    rng = random.Random(0)
    kernels, scans, lowered = {}, {}, 0
    point = space.default()
    for _ in range(12):
        point = space.mutate(point, rng) if rng.random() < 0.7 else space.sample(rng)
        schedule = space.schedule(point)
        fresh, cached = lower_program(wl, schedule), lower_program(wl, schedule, kernels=kernels)
        assert cached.kernels == fresh.kernels
        assert program_features(cached, scans=scans).tobytes() == program_features(fresh).tobytes()
        lowered += len(fresh.kernels)
    assert len(kernels) < lowered or len(wl.tasks) == 1  # one task: every new point changes it
