"""Dispatch policies side by side: heft (StarPU's dmda, with upward-rank priorities) against work_stealing.

1. cpu, real clock: the zoo transformer block (seq 64, d_model 128, 4 heads,
   d_ff 256) with the default schedule on 2 workers; heft's kernel times are
   learned from the warm-up runs.  Medians of `--repeat` runs in alternating
   blocks (timing.side_by_side); outputs checked against pw.reference first.
2. aicore, device clock (deterministic): a heterogeneous graph, the same
   block on 24 cube + 48 vector cores (matmuls on the cubes, softmax and
   layernorm on the vector cores), and four independent 512x512x2048 fp16
   matmuls whose outputs pass a vector epilogue each; heft places by the
   device model's compute estimates.  Also on a small die (2 cube + 2
   vector cores), where placement matters more than on 72 cores.
3. cpu, a synthetic table where the order matters: 40 independent 1 ms
   tasks listed before a chain of 10 x 2 ms tasks (sleeps, outside the
   GIL), on 2 workers, beside round_robin too.

No peers: both sides are ptowsp.

    .venv/bin/python benchmarks/dispatch.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import side_by_side

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute
from ptowsp.runtime.dispatch import TaskTimes
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import random_inputs, zoo

POLICIES = ("work_stealing", "heft")


def check(out: dict, expected: dict) -> None:
    for name, value in out.items():
        np.testing.assert_allclose(value, expected[name], rtol=2e-2, atol=2e-2)


def cpu_table(repeat: int) -> None:
    wl = zoo.transformer_block()
    inputs = random_inputs(wl, seed=0)
    expected = pw.reference(wl, **inputs)
    progs = [pw.build(default_schedule(wl, workers=2).dispatch(p), "cpu", workers=2) for p in POLICIES]
    for prog in progs:
        for _ in range(3):  # warm-up: heft learns its kernels' times here
            check(prog.run(**inputs), expected)
    times = side_by_side([lambda p=p: p.run(**inputs) for p in progs], repeat)
    print(f"\ncpu, transformer block (seq 64, d_model 128), 2 workers, median of {repeat} x 3 blocks")
    print(f"{'policy':16} {'ms':>8} {'vs work_stealing':>17}")
    for policy, seconds in zip(POLICIES, times, strict=True):
        print(f"{policy:16} {seconds * 1e3:8.3f} {times[0] / seconds:16.2f}x")


def hetero_matmuls() -> pw.Workload:
    """Four independent fp16 matmuls (cube), each with a vector epilogue of its own (exp of a row sum)."""
    wl = pw.Workload("four_matmuls")
    for k in range(4):
        a, b = wl.input(f"A{k}", (512, 2048), "float16"), wl.input(f"B{k}", (2048, 512), "float16")
        r = pw.reduce_axis(2048, "r")
        c = wl.compute(f"C{k}", (512, 512), lambda i, j, a=a, b=b, r=r: pw.sum(a[i, r] * b[r, j], r))
        s = pw.reduce_axis(512, "s")
        rows = wl.compute(f"S{k}", (512,), lambda i, c=c, s=s: pw.sum(pw.cast(c[i, s], "float32"), s))
        wl.output(wl.compute(f"E{k}", (512,), lambda i, rows=rows: pw.exp(rows[i] * 1e-4)))
    return wl


def hetero_schedule(wl: pw.Workload, policy: str) -> pw.Schedule:
    s = wl.schedule()
    for k in range(4):
        s = (s.tile(f"C{k}", i=128, j=128).split(f"C{k}", "r", 256)
             .reorder(f"C{k}", "i.outer", "j.outer", "r.outer", "i.inner", "r.inner", "j.inner")
             .parallel(f"C{k}", "i.outer", "j.outer").bind(f"C{k}", core="cube")
             .split(f"S{k}", "i", 64).parallel(f"S{k}", "i.outer"))
    return s.dispatch(policy)


def aicore_table() -> None:
    small = pw.DeviceModel(clusters=2, vector_per_cluster=1)
    block = zoo.transformer_block()
    matmuls = hetero_matmuls()
    aicore_default = pw.build(block, "aicore").schedule
    cases = [("transformer block, 72 cores", block, lambda p: aicore_default.dispatch(p), None),
             ("4 matmuls + epilogues, 72 cores", matmuls, lambda p: hetero_schedule(matmuls, p), None),
             ("4 matmuls + epilogues, 2+2 cores", matmuls, lambda p: hetero_schedule(matmuls, p), small)]
    print("\naicore (device clock, deterministic)")
    print(f"{'graph':34} {'policy':14} {'tasks':>6} {'makespan':>10} {'vs work_stealing':>17} {'cube busy':>10}")
    for name, wl, schedule, device in cases:
        inputs = random_inputs(wl, seed=1)
        expected = pw.reference(wl, **inputs)
        spans = []
        for policy in POLICIES:
            prog = pw.build(schedule(policy), "aicore", device=device)
            check(prog.run(**inputs), expected)
            trace = prog.trace
            spans.append(trace.makespan)
            cube = trace.summary().classes.get("cube", 0.0)
            print(f"{name:34} {policy:14} {len(trace.events):6} {trace.makespan * 1e6:8.1f}us "
                  f"{spans[0] / trace.makespan:16.2f}x {cube:9.1%}")


class Sleeps:
    """Task code that sleeps its instance's seconds (outside the GIL, like a compiled kernel)."""

    load = store = None

    def __init__(self, table: TaskTable, seconds: dict[str, float]):
        self.table, self.seconds = table, seconds

    def compute(self, i: int) -> None:
        time.sleep(self.seconds[self.table.instances[i].name])


def critical_path_table(repeat: int) -> None:
    """40 independent 1 ms tasks and a chain of 10 x 2 ms: 60 ms of work on 2 workers, a 20 ms
    critical path; the best makespan is 30 ms, reached only if the chain starts at once.  The chain
    is listed first, then last: round robin takes the oldest ready task, work stealing the newest."""
    solo = [Instance("solo", (k,), (), (("s", ((k, k + 1),)),), grid=("k",)) for k in range(40)]
    chain = [Instance("link", (k,), (("c", ((k - 1, k),)),) if k else (), (("c", ((k, k + 1),)),), grid=("k",))
             for k in range(10)]
    policies = ("round_robin", "work_stealing", "heft")
    print(f"\ncpu, 40 x 1 ms independent tasks and a chain of 10 x 2 ms, 2 workers, median of {repeat} x 3 blocks "
          "(best possible: 30 ms)")
    print(f"{'chain listed':14} {'policy':16} {'ms':>8} {'vs work_stealing':>17}")
    for where, instances in (("first", chain + solo), ("last", solo + chain)):
        table = TaskTable(instances)
        launch = Sleeps(table, {"solo": 1e-3, "link": 2e-3})
        learned = TaskTimes()
        execute(table, launch, Options(workers=(None, None), policy="heft", task_times=learned))  # heft learns
        runs = [lambda p=p: execute(table, launch, Options(workers=(None, None), policy=p, task_times=learned))
                for p in policies]
        times = side_by_side(runs, repeat)
        for policy, seconds in zip(policies, times, strict=True):
            print(f"{where:14} {policy:16} {seconds * 1e3:8.2f} {times[1] / seconds:16.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    aicore_table()
    cpu_table(args.repeat)
    critical_path_table(max(3, args.repeat // 4))


if __name__ == "__main__":
    main()
