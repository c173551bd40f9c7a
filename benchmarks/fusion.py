"""Fusion and the default schedule: unfused vs fused on the cpu target with 2 workers.

Three schedules per workload, all from schedules/passes/default.py so the
loops are alike: unfused (every task stored, each with its register tile or
vector loop and its own task grid), category fusion on top of that
(`fuse_by_category()`), and the default schedule `pw.build(wl)` runs
(fusion plus grouping: intermediates computed inside the task that reads
them).  Per workload: task instances per run, intermediate bytes (unfused
without sharing, then the memory plan's arena of each), and the median run
time of each, side by side in alternating blocks (timing.side_by_side).
Every result is checked against pw.reference first.  Target (issue 5):
fused >= 1.3x faster on each workload, with lower peak intermediate memory.

    .venv/bin/python benchmarks/fusion.py [--repeat 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import side_by_side

import ptowsp as pw
from ptowsp.backends.cpu.isa import target_cpu
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import zoo
from ptowsp.workloads.zoo import layers


def matmul_layernorm(rows: int = 512, inner: int = 256, cols: int = 512) -> pw.Workload:
    wl = pw.Workload("matmul_layernorm")
    x, w = wl.input("X", (rows, inner)), wl.input("W", (inner, cols))
    gamma, beta = wl.input("gamma", (cols,)), wl.input("beta", (cols,))
    wl.output(layers.layernorm_rows(wl, "Y", layers.matmul(wl, "H", x, w), gamma, beta, 1e-5))
    return wl


WORKLOADS = {
    "mlp 128x256x512x256": lambda: zoo.mlp(),
    "attention 2x4x64x32": lambda: zoo.attention(),
    "layernorm after matmul 512x256x512": matmul_layernorm,
    "transformer block 64x128": lambda: zoo.transformer_block(),
}


def schedules(wl: pw.Workload) -> dict[str, pw.Schedule]:
    """Unfused (every task stored, each with the default loops and grid), category fusion on top
    of that, and the full default schedule (fusion plus grouping: what `pw.build(wl)` runs)."""
    return {"unfused": default_schedule(wl, vector_bytes=target_cpu().vector_bytes, workers=2, fuse=False),
            "category": default_schedule(wl, vector_bytes=target_cpu().vector_bytes, workers=2, fuse=False).fuse_by_category(),
            "default": default_schedule(wl, vector_bytes=target_cpu().vector_bytes, workers=2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'workload':36} {'tasks':>10} {'intermediates MiB':>23} {'unfused':>9} {'category':>9} {'default':>9} "
          f"{'speed-up':>9}")
    for name, make in WORKLOADS.items():
        wl = make()
        rng = np.random.default_rng(0)
        inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
        expected = pw.reference(wl, **inputs)
        progs = [pw.build(s, "cpu", workers=2) for s in schedules(wl).values()]
        for prog in progs:
            for out, value in prog.run(**inputs).items():
                scale = max(1.0, float(np.max(np.abs(expected[out]))))
                if not np.allclose(value, expected[out], rtol=1e-4, atol=1e-4 * scale):
                    raise SystemExit(f"{name}: WRONG RESULT for {out}")
        times = side_by_side([lambda p=p, i=inputs: p.run(**i) for p in progs], args.repeat)
        tasks = "/".join(str(len(p.trace.events)) for p in progs)
        plans = [p.memory_plan for p in progs]
        memory = f"{plans[0].unshared_bytes / 2**20:.2f} | " + "/".join(f"{m.arena_bytes / 2**20:.2f}" for m in plans)
        print(f"{name:36} {tasks:>10} {memory:>23} " + " ".join(f"{t * 1e3:7.3f}ms" for t in times)
              + f" {times[0] / times[2]:8.2f}x")
    print("columns: unfused / category fusion only / default schedule (fusion + grouping, what pw.build(wl) runs)")
    print("intermediates: unfused without sharing | planned arena of each; speed-up = unfused / default; "
          "target: >= 1.3x, less intermediate memory")


if __name__ == "__main__":
    main()
