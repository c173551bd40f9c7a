"""Category fusion: unfused vs fuse_by_category() on the cpu target with 2 workers.

Per workload: task instances per run, bytes of intermediate tensors stored
(each intermediate in its own buffer: memory planning, which would share
buffers by liveness, is not built yet), and the median run time of both,
side by side in alternating blocks (timing.side_by_side).  Both schedules
give every task a parallel grid with `parallelize(8)`; the fused one then
fuses by category (an epilogue takes its anchor's grid).  Every result is
checked against pw.reference first.  Target (issue 5): fused >= 1.3x faster
on each workload, with lower peak intermediate memory.

    .venv/bin/python benchmarks/fusion.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from timing import side_by_side

import ptowsp as pw
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


def intermediate_bytes(prog: pw.Built) -> int:
    wl = prog.workload
    stored = [t.name for name in prog.program.order for t in wl.task(name).outputs]
    return sum(math.prod(wl.tensor(n).shape) * np.dtype(wl.tensor(n).dtype).itemsize
               for n in stored if n not in wl.outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'workload':36} {'tasks':>11} {'intermediates':>17} {'unfused':>9} {'fused':>9} {'speed-up':>8}")
    for name, make in WORKLOADS.items():
        wl = make()
        rng = np.random.default_rng(0)
        inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
        expected = pw.reference(wl, **inputs)
        progs = [pw.build(wl.schedule().parallelize(8), "cpu", workers=2),
                 pw.build(wl.schedule().parallelize(8).fuse_by_category(), "cpu", workers=2)]
        for prog in progs:
            for out, value in prog.run(**inputs).items():
                scale = max(1.0, float(np.max(np.abs(expected[out]))))
                if not np.allclose(value, expected[out], rtol=1e-4, atol=1e-4 * scale):
                    raise SystemExit(f"{name}: WRONG RESULT for {out}")
        unfused, fused = side_by_side([lambda p=p, i=inputs: p.run(**i) for p in progs], args.repeat)
        tasks = "/".join(str(len(p.trace.events)) for p in progs)
        memory = "/".join(f"{intermediate_bytes(p) / 2**20:.2f}" for p in progs)
        print(f"{name:36} {tasks:>11} {memory + ' MiB':>17} {unfused * 1e3:7.2f}ms {fused * 1e3:7.2f}ms "
              f"{unfused / fused:7.2f}x")
    print("tasks and intermediates: unfused/fused; target: fused >= 1.3x faster, less intermediate memory")


if __name__ == "__main__":
    main()
