"""The device model's published figures: presets, the DMA transfer curve, L0 steps (backends/aicore).

The whole-device validation (the PTO ISA's A3 GEMM) is benchmarks/aicore_validation.py: it computes a
6144^3 matmul on the host, too long for the suite."""

import pytest

import ptowsp as pw
from ptowsp.backends.aicore.model import GIB, KIB
from ptowsp.workloads import random_inputs, zoo


def test_the_a5_preset_has_its_published_core_counts_buffers_and_schedulers():
    a5, default = pw.DeviceModel.preset("a5"), pw.DeviceModel()
    assert (a5.cube_cores, a5.vector_cores, a5.schedulers) == (18, 36, 4)
    assert (a5.ub_bytes, a5.l0c_bytes) == (256 * KIB, 256 * KIB)
    assert a5.l1_bytes == default.l1_bytes and a5.clock_hz == default.clock_hz  # no published change
    assert "a5" in a5.sources()["clusters"] and "910B" in a5.sources()["clock_hz"]
    assert pw.DeviceModel.preset("910b") == default
    assert pw.DeviceModel.preset("a5", schedulers=2).schedulers == 2
    with pytest.raises(pw.BuildError, match="unknown pw.DeviceModel preset 'a9'.*a5"):
        pw.DeviceModel.preset("a9")


def load_seconds(nbytes: int, device: pw.DeviceModel) -> float:
    """Device seconds of the one load of a vector task reading `nbytes` of float32 (summed, so that its
    output is one element), read from the trace's load stage."""
    wl = pw.Workload("read")
    x = wl.input("X", (nbytes // 4,))
    r = pw.reduce_axis(nbytes // 4, "r")
    wl.output(wl.compute("S", (1,), lambda i: pw.sum(x[r], axis=r)))
    prog = pw.build(wl.schedule(), target="aicore", device=device)
    prog.run(**random_inputs(wl))
    (load,) = [e for e in prog.trace.events if e.name == "S load"]
    return load.duration


@pytest.mark.parametrize("kib", [1, 8, 30.6, 96])
def test_one_transfer_follows_the_published_saturating_curve(kib):
    """PTO ISA cost model (A2/A3): GM->UB bandwidth = 247 GiB/s x size / (size + 30.6 KB)."""
    nbytes = int(kib * KIB) // 4 * 4
    published = 247 * GIB * nbytes / (nbytes + 30.6 * KIB)
    modelled = nbytes / load_seconds(nbytes, pw.DeviceModel())
    assert modelled == pytest.approx(published, rel=1e-3)


def test_a_cube_block_feeds_l0_in_steps_so_a_deep_block_fits():
    """The PTO ISA's GEMM tile: 128x256 outputs, 256-deep blocks in L1 (double-buffered), fed to L0A/L0B
    64 deep at a time; without the inner split the block itself must fit L0B, and does not."""
    wl = zoo.matmul(256, 512, 512, "float16", accumulate="float32")
    s = (wl.schedule().tile("C", i=128, j=256).split("C", "k", 256)
         .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("C", "i.outer", "j.outer").prefetch(1))
    with pytest.raises(pw.ScheduleError, match=r"128\.0 KiB of L0A/L0B for its largest input block"):
        pw.build(s, target="aicore")
    stepped = (s.split("C", "k.inner", 64)
               .reorder("C", "i.outer", "j.outer", "k.outer", "k.inner.outer", "i.inner", "k.inner.inner", "j.inner"))
    prog = pw.build(stepped, target="aicore")
    inputs = random_inputs(wl)
    out = prog.run(**inputs)["C"]
    want = pw.reference(wl, **inputs)["C"]
    assert abs(out - want).max() <= 1e-3 * abs(want).max()
    with pytest.raises(pw.ScheduleError, match="L1"):  # prefetch 2: three 192 KiB blocks in 512 KiB
        pw.build(stepped.prefetch(2), target="aicore")
