"""The CSP runtime: per-task overhead beside dask and a thread pool, and parallel speed-up on 2 cores.

Part 1 runs a graph of 100 chains x 100 empty tasks (10,000 tasks) on 2
workers: ptowsp's executor (dependencies from the task table's regions,
analysed once per table as a build does, and again per run for comparison;
Python tasks, then compiled no-op kernels on the native loop, as a cpu
build's tasks run),
`dask.threaded.get` with 2 workers (when dask is importable: it is not a
ptowsp dependency; `pip install dask` to compare), and
`concurrent.futures.ThreadPoolExecutor(2)` where each task's completion
submits its successor.  Then the cost of one `pw.csp` channel hop on the
real clock: a ping-pong and a four-stage relay, rendezvous and buffered.

Part 2 runs matmul, softmax, layernorm and an elementwise chain with tiled
schedules on 1 and 2 workers, beside numpy with 2 BLAS threads.  Medians of
`--repeat` runs in alternating blocks (timing.side_by_side); every result is
checked against numpy first.  Targets (issue 4): overhead <= 25 us per task
and <= 0.4x dask's; 2 workers >= 1.7x 1 worker; matmul >= 50% of numpy's
GFLOP/s, softmax >= 5x, layernorm >= 10x, elementwise >= 5x faster than numpy.

    .venv/bin/python benchmarks/runtime.py [--repeat 5]
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "2"  # before numpy loads: numpy's matmul on both cores
os.environ["OMP_NUM_THREADS"] = "2"
# OpenBLAS threads spin ~0.1 s after each call by default, taking the cores from whatever runs next
# (our workers, in the alternating blocks); this makes them sleep at once.  numpy's own time is unchanged.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from cpu_kernels import exp_chain_case, layernorm_case, matmul_case, softmax_case  # noqa: E402
from timing import median_seconds, side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.runtime import Instance, Options, TaskTable, execute  # noqa: E402

CHAINS, LENGTH, WORKERS = 100, 100, 2


def chain_instances() -> list[Instance]:
    """Step k of chain c writes element k of tensor c and reads element k-1: 100 independent chains."""
    return [Instance("step", (c, k), ((f"chain{c}", ((k - 1, k),)),) if k else (), ((f"chain{c}", ((k, k + 1),)),),
                     grid=("c", "k")) for k in range(LENGTH) for c in range(CHAINS)]


class Empty:
    load = store = None

    @staticmethod
    def compute(i: int) -> None:
        return None


def ptowsp_cached(table: TaskTable) -> None:
    execute(table, Empty, Options(workers=(None,) * WORKERS, policy="work_stealing"))


def noop_kernels(count: int) -> tuple[object, object]:
    """A launcher whose every instance is a compiled kernel that does nothing, as the native loop
    runs them (runtime/native.py), and the engine that keeps its code alive."""
    import llvmlite.binding as llvm

    from ptowsp.runtime.native import NativeTasks

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly("define void @noop(ptr %pointers, ptr %arguments) {\n  ret void\n}")
    module.triple = llvm.get_process_triple()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine(jit=True))
    engine.finalize_object()
    tasks = NativeTasks(np.full(count, engine.get_function_address("noop"), np.int64), np.zeros(count, np.int64),
                        np.zeros(1, np.int64))

    class Noops(Empty):
        native = (tasks, np.zeros(1, np.int64))

    return Noops, engine


def ptowsp_fresh(instances: list[Instance]) -> None:
    execute(TaskTable(instances), Empty, Options(workers=(None,) * WORKERS, policy="work_stealing"))


def dask_graph() -> dict:
    def noop(*_):
        return None

    graph = {}
    for c in range(CHAINS):
        for k in range(LENGTH):
            graph[(f"chain{c}", k)] = (noop, (f"chain{c}", k - 1)) if k else (noop,)
    return graph


def thread_pool_chains(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    done = threading.Event()
    remaining = [CHAINS * LENGTH]
    lock = threading.Lock()

    def step(c: int, k: int) -> None:
        return None

    def submit(c: int, k: int) -> None:
        pool.submit(step, c, k).add_done_callback(lambda _f: finished(c, k))

    def finished(c: int, k: int) -> None:
        with lock:
            remaining[0] -= 1
            if not remaining[0]:
                done.set()
        if k + 1 < LENGTH:
            submit(c, k + 1)

    for c in range(CHAINS):
        submit(c, 0)
    done.wait()


def csp_hops(count: int, capacity: int, stages: int) -> float:
    """Seconds per channel hop of a pw.csp pipeline on the real clock: a source, `stages - 1` relays
    and a sink, `count` values each; with stages=1, a ping-pong (two hops per round trip)."""
    csp = pw.csp
    if stages == 1:
        ping, pong = csp.Channel(capacity, "ping"), csp.Channel(capacity, "pong")

        async def player() -> None:
            for k in range(count):
                await ping.send(k)
                await pong.receive()
            ping.close()

        async def echo() -> None:
            async for k in ping:
                await pong.send(k)

        start = time.perf_counter()
        csp.run([player, echo])
        return (time.perf_counter() - start) / (2 * count)
    channels = [csp.Channel(capacity, f"c{k}") for k in range(stages)]

    async def source() -> None:
        for k in range(count):
            await channels[0].send(k)
        channels[0].close()

    async def relay(into: pw.csp.Channel, out: pw.csp.Channel) -> None:
        async for k in into:
            await out.send(k)
        out.close()

    async def sink() -> None:
        async for _ in channels[-1]:
            pass

    procs = [source] + [csp.process(relay, channels[k], channels[k + 1]) for k in range(stages - 1)] + [sink]
    start = time.perf_counter()
    csp.run(procs)
    return (time.perf_counter() - start) / (count * stages)


def hop_table(repeat: int) -> None:
    print(f"\npw.csp channel hops on the real clock, median of {repeat} runs of 10,000 values")
    print(f"{'pipeline':44} {'us/hop':>8}")
    for name, capacity, stages in [("ping-pong, rendezvous (capacity 0)", 0, 1), ("ping-pong, capacity 1", 1, 1),
                                   ("4 hops in a row, rendezvous", 0, 4), ("4 hops in a row, capacity 16", 16, 4)]:
        hops = sorted(csp_hops(10_000, capacity, stages) for _ in range(repeat))
        print(f"{name:44} {hops[len(hops) // 2] * 1e6:8.2f}")
    print("target: <= 10 us per hop (it was 118-179 us when a hop crossed trio's thread boundary)")


def overhead_table(repeat: int) -> None:
    tasks = CHAINS * LENGTH
    instances = chain_instances()
    table = TaskTable(instances)
    table.predecessors  # noqa: B018 - analysed once, as a build does
    noops, engine = noop_kernels(tasks)
    native = Options(workers=(None,) * WORKERS, window=tasks)
    rows = [("ptowsp executor (table analysed once)", lambda: ptowsp_cached(table)),
            ("ptowsp executor (+ dependency analysis)", lambda: ptowsp_fresh(instances)),
            ("ptowsp native loop (compiled no-op kernels)", lambda: execute(table, noops, native))]
    try:
        import dask.threaded

        graph, keys = dask_graph(), [(f"chain{c}", LENGTH - 1) for c in range(CHAINS)]
        rows.append(("dask.threaded.get, 2 workers", lambda: dask.threaded.get(graph, keys, num_workers=WORKERS)))
    except ImportError:
        print("dask is not installed: its row is left out (pip install dask to compare)")
    pool = concurrent.futures.ThreadPoolExecutor(WORKERS)
    rows.append(("ThreadPoolExecutor(2), chained submits", lambda: thread_pool_chains(pool)))
    results = {name: median_seconds(fn, repeat) / tasks for name, fn in rows}
    pool.shutdown()
    dask_cost = next((v for k, v in results.items() if k.startswith("dask")), None)
    print(f"\n{CHAINS} chains x {LENGTH} empty tasks on {WORKERS} workers, median of {repeat}")
    print(f"{'runtime':44} {'us/task':>8} {'vs dask':>8}")
    for name, seconds in results.items():
        ratio = f"{seconds / dask_cost:7.2f}x" if dask_cost else "       -"
        print(f"{name:44} {seconds * 1e6:8.1f} {ratio}")
    print("target: ptowsp <= 25 us per task and <= 0.4x dask")


def speedup_table(repeat: int, blocks: int) -> None:
    wl, s, mm, flops = matmul_case(1024, blocks)
    cases = [("matmul 1024^3 f32", (wl, s.parallel("C", "i.outer.outer"), mm, flops), ">= 50% GFLOP/s"),
             ("softmax 4096x1024", softmax_case(4096, 1024, blocks), ">= 5x"),
             ("layernorm 4096x1024", layernorm_case(4096, 1024, blocks), ">= 10x")]
    wl, s, fn, _ = exp_chain_case(16 * 2**20)
    cases.append(("exp(x*a+b)*c 16M", (wl, s.split("y", "i.outer", 2**20 // blocks)
                                       .parallel("y", "i.outer.outer"), fn, None), ">= 5x"))
    print(f"\nparallel speed-up, median of {repeat} per block, 3 alternating blocks; numpy with 2 BLAS threads")
    print(f"{'kernel':22} {'numpy':>9} {'1 worker':>9} {'2 workers':>9} {'2w/1w':>6} {'vs numpy':>9}  target")
    for name, (wl, schedule, numpy_fn, flops), target in cases:
        rng = np.random.default_rng(0)
        inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
        one, two = (pw.build(schedule, target="cpu", workers=n) for n in (1, 2))
        expected = numpy_fn(inputs)
        scale = max(1.0, float(np.max(np.abs(expected))))
        for prog in (one, two):
            if not np.allclose(prog.run(**inputs)[wl.outputs[0]], expected, rtol=1e-3, atol=1e-3 * scale):
                raise SystemExit(f"{name}: WRONG RESULT on {prog}")
        theirs, t1, t2 = side_by_side([lambda: numpy_fn(inputs), lambda: one.run(**inputs),  # noqa: B023
                                       lambda: two.run(**inputs)], repeat)  # noqa: B023
        versus = f"{flops / t2 / 1e9:.0f}/{flops / theirs / 1e9:.0f} GF" if flops else f"{theirs / t2:.2f}x"
        print(f"{name:22} {theirs * 1e3:7.2f}ms {t1 * 1e3:7.2f}ms {t2 * 1e3:7.2f}ms {t1 / t2:5.2f}x {versus:>9}  "
              f"{target}, 2w/1w >= 1.7x  ({len(two._executable.table)} tasks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=16, help="row blocks (tasks) per kernel in part 2")
    args = parser.parse_args()
    speedup_table(args.repeat, args.blocks)
    overhead_table(args.repeat)
    hop_table(args.repeat)


if __name__ == "__main__":
    main()
