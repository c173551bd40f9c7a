"""The device model against published Ascend figures: one table of figure, source, published, model, ratio.

Every model figure is read from a run on the aicore target (its trace), not computed beside it:

- the PTO ISA's A3 GEMM: 6144^3 float16 -> float32, 24 cube cores, a [128, 256, 64] base tile
  (128x256 outputs, four 64-deep k steps per L1 load, so 256-deep blocks), L1 double-buffered
  (`prefetch(1)`), one task per cube core walking its 48 tiles as the kernel's 24 blocks do;
  published: 1.506 ms, 308 TFLOP/s, 86.7% cube utilisation;
- one GM->UB transfer of each size on its own, from the trace's load stage, against the published
  saturating curve 247 GiB/s x size / (size + 30.6 KB);
- the AICPU's work per task (orchestrator busy time over tasks) against the PTO runtime's host
  orchestration, 1.22-1.26 us per task warm (the model's figure: an input);
- the a5 preset's core counts, buffers and schedulers, and the same GEMM on it (no published figure).

The GEMM computes its real numbers on the host (about 10 s each).

    .venv/bin/python benchmarks/aicore_validation.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import ptowsp as pw
from ptowsp.backends.aicore.model import GIB, KIB
from ptowsp.workloads import random_inputs, zoo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.backends.test_device_figures import load_seconds  # noqa: E402 - the same measurement the test checks

GEMM = 6144
BASE_TILE = (128, 256, 64)  # the PTO ISA A3 GEMM's [m, n, k] base tile
K_STEPS_PER_LOAD = 4


def gemm_schedule(wl: pw.Workload, device: pw.DeviceModel) -> pw.Schedule:
    """The PTO ISA kernel's schedule: base tiles, k steps per L1 load, ping-pong L1, a block per cube core."""
    m, n, k = BASE_TILE
    tiles = (GEMM // m) * (GEMM // n)
    tile = "i.outer.j.outer.fused"
    return (wl.schedule().tile("C", i=m, j=n).split("C", "k", k * K_STEPS_PER_LOAD).split("C", "k.inner", k)
            .fuse("C", "i.outer", "j.outer").split("C", tile, -(-tiles // device.cube_cores))
            .reorder("C", f"{tile}.outer", f"{tile}.inner", "k.outer", "k.inner.outer", "i.inner", "k.inner.inner",
                     "j.inner")
            .parallel("C", f"{tile}.outer").prefetch(1))


def run_gemm(device: pw.DeviceModel) -> pw.Summary:
    wl = zoo.matmul(GEMM, GEMM, GEMM, "float16", accumulate="float32")
    prog = pw.build(gemm_schedule(wl, device), target="aicore", device=device)
    inputs = random_inputs(wl)
    out = prog.run(**inputs)["C"]
    rows = slice(0, 64)  # the numbers are real: a strip of them against numpy
    want = inputs["A"][rows].astype(np.float32) @ inputs["B"].astype(np.float32)
    np.testing.assert_allclose(out[rows], want, rtol=1e-2, atol=1e-2 * float(np.abs(want).max()))
    return prog.trace.summary()


def row(figure: str, source: str, published: float | None, model: float, unit: str, kind: str) -> None:
    """`kind`: "predicted" (the model's result from other figures) or "input" (a figure the model takes)."""
    ratio = f"{model / published:.3f}" if published else "-"
    shown = "-" if published is None else f"{published:,.4g} {unit}".strip()
    print(f"| {figure} | {source} | {shown} | {f'{model:,.4g} {unit}'.strip()} | {ratio} | {kind} |", flush=True)


def main() -> None:
    start = time.perf_counter()
    a3, a5 = pw.DeviceModel.preset("910b"), pw.DeviceModel.preset("a5")
    print("| figure | source | published | ptowsp's model | model / published | the model's figure is |")
    print("| --- | --- | --- | --- | --- | --- |")
    gemm = run_gemm(a3)
    flops = 2 * GEMM ** 3
    pto = "PTO ISA, A3 GEMM 6144^3 fp16, [128, 256, 64]"
    row("A3 GEMM time", pto, 1.506, gemm.makespan * 1e3, "ms", "predicted")
    row("A3 GEMM rate", pto, 308, flops / gemm.makespan / 1e12, "TFLOP/s", "predicted")
    row("A3 GEMM cube utilisation", pto, 86.7, gemm.classes["cube"] * 100, "%", "predicted")
    curve = "PTO ISA cost model, GM->UB"
    for kib in (1, 4, 16, 30.6, 64, 128):
        nbytes = int(kib * KIB) // 4 * 4
        published = 247 * nbytes / (nbytes + 30.6 * KIB)
        row(f"GM->UB, one {kib:g} KB transfer", curve, published, nbytes / load_seconds(nbytes, a3) / GIB, "GiB/s",
            "input (peak and startup)")
    orchestrator = gemm.control["orchestrator"] * gemm.makespan / gemm.tasks
    row("AICPU orchestration per task", "PTO runtime, warm, 3,875 tasks", 1.22, orchestrator * 1e6, "us", "input")
    for figure, published, model in (("a5 cube cores (AIC)", 18, a5.cube_cores), ("a5 vector cores (AIV)", 36,
                                                                                     a5.vector_cores),
                                     ("a5 UB", 256, a5.ub_bytes / KIB), ("a5 L0C", 256, a5.l0c_bytes / KIB),
                                     ("a5 scheduler threads", 4, a5.schedulers)):
        row(figure, "PTO runtime / PTO ISA, a5", published, model, "KB" if "L0C" in figure or "UB" in figure else "",
            "input")
    on_a5 = run_gemm(a5)
    row("a5 GEMM time, same schedule", "(no published figure)", None, on_a5.makespan * 1e3, "ms", "predicted")
    row("a5 GEMM cube utilisation", "(no published figure)", None, on_a5.classes["cube"] * 100, "%", "predicted")
    print(f"\nhost seconds: {time.perf_counter() - start:.0f}")


if __name__ == "__main__":
    main()
