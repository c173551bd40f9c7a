"""The CPU the cpu target compiles for (backends/cpu/isa.py): named levels, the code they give, the
cache keyed on them, and a level the host lacks compiled and read but never run."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu import isa
from ptowsp.backends.cpu.isa import HostCannotRun, target_cpu
from ptowsp.workloads import zoo

pytestmark = pytest.mark.skipif(not target_cpu("host").cpu or "cpu" not in pw.targets(), reason="needs the cpu target")
x86 = pytest.mark.skipif(target_cpu("host").vector_bytes < 32, reason="the named levels are x86-64 with AVX2 or more")


@x86
@pytest.mark.parametrize("level, width, wide, narrow", [("x86-64-v3", 32, "ymm", "zmm"), ("x86-64-v4", 64, "zmm", None)])
def test_a_named_level_decides_the_vectors_the_tiles_and_the_code(monkeypatch, level, width, wide, narrow):
    monkeypatch.setenv(isa.ENVIRONMENT, level)
    assert pw.backends.backend("cpu").vector_bytes == width
    prog = pw.build(zoo.matmul(64, 64, 64), "cpu", workers=1)
    rows = 8 if width == 64 else 4  # the register tile: 16 accumulators in 32 registers, 8 in 16
    assert prog.schedule.steps[0].factors == {"i": rows, "j": 2 * width // 4}
    asm = prog.source("C", "asm")
    assert re.search(rf"\b{wide}\d", asm) and (narrow is None or not re.search(rf"\b{narrow}\d", asm))


@x86
def test_the_kernel_cache_keys_on_the_level(monkeypatch):
    from ptowsp.backends.cpu.jit import cache_key

    assert len({cache_key("same", target_cpu(level)) for level in ("host", "x86-64-v3", "x86-64-v4")}) == 3
    s = zoo.matmul(24, 24, 24).schedule().split("C", "j", 8).reorder("C", "i", "j.outer", "k", "j.inner").vectorize("C", "j.inner")
    built = {}
    for level in ("x86-64-v3", "x86-64-v4", "x86-64-v3"):
        monkeypatch.setenv(isa.ENVIRONMENT, level)
        built.setdefault(level, []).append(pw.build(s, "cpu")._executable)
    assert [e.from_cache for e in built["x86-64-v3"]] == [False, True]  # the same level: from the cache
    assert not built["x86-64-v4"][0].from_cache  # another level: compiled anew, not v3's code


@x86
def test_a_level_the_host_lacks_is_built_and_read_but_not_run(monkeypatch):
    monkeypatch.setenv(isa.ENVIRONMENT, "x86-64-v4")
    avx2_host = dict.fromkeys(isa.LEVELS["x86-64-v3"][1], True)
    monkeypatch.setattr(isa, "host_features", lambda: avx2_host)
    wl = zoo.matmul(32, 32, 32)
    prog = pw.build(wl, "cpu")
    assert "zmm" in prog.source("C", "asm")
    a = np.ones((32, 32), np.float32)
    with pytest.raises(HostCannotRun, match=r"x86-64-v4 .*needs avx512f.*PTOWSP_CPU=host"):
        prog.run(A=a, B=a)
    with pytest.raises(HostCannotRun):
        pw.build(wl, "aicore").run(A=a, B=a)  # the aicore target's numbers come from the same host code


def test_an_unknown_level_is_a_build_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv(isa.ENVIRONMENT, "pentium4")
    assert "cpu" not in pw.targets()
    with pytest.raises(pw.BuildError, match=r"PTOWSP_CPU='pentium4' names no CPU.*host, x86-64-v3, x86-64-v4"):
        pw.build(zoo.matmul(8, 8, 8), "cpu")


@x86
def test_make_test_s_second_pass_takes_the_level_the_host_is_not(monkeypatch):
    from tests.isa_levels import other_level

    avx512 = dict.fromkeys(isa.LEVELS["x86-64-v4"][1], True)
    avx2 = dict.fromkeys(isa.LEVELS["x86-64-v3"][1], True)
    for host, other in ((avx512, "x86-64-v3"), (avx2, "x86-64-v4")):
        monkeypatch.setattr(isa, "host_features", lambda host=host: host)
        assert other_level(host_width=64 if host is avx512 else 32) == other
