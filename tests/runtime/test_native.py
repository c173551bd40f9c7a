"""The native scheduler loop (runtime/native.py) on synthetic tables of compiled thunks: order, trace, stops."""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute
from ptowsp.runtime.native import NativeRun, NativeTasks, supported

pytestmark = pytest.mark.skipif(supported() is not None, reason=str(supported()))

# a thunk that sleeps args[1] microseconds, then stamps out[args[0]] with the next tick of a shared counter
# (pointers[0]: the counter, pointers[1]: out)
_STAMP = """
declare i32 @usleep(i32)
define void @stamp(ptr %pointers, ptr %args) {
  %cp = load ptr, ptr %pointers
  %op = getelementptr i64, ptr %pointers, i64 1
  %o = load ptr, ptr %op
  %i = load i64, ptr %args
  %sp = getelementptr i64, ptr %args, i64 1
  %us = load i64, ptr %sp
  %us32 = trunc i64 %us to i32
  call i32 @usleep(i32 %us32)
  %k = atomicrmw add ptr %cp, i64 1 seq_cst
  %slot = getelementptr i64, ptr %o, i64 %i
  store i64 %k, ptr %slot
  ret void
}
"""


@functools.cache
def _stamp() -> tuple[object, int]:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_STAMP)
    module.triple = llvm.get_process_triple()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine(jit=True))
    engine.finalize_object()
    return engine, engine.get_function_address("stamp")


class Stamps:
    """A launcher whose every instance is the stamp thunk: Python's `compute` is only counted."""

    load = store = None

    def __init__(self, table: TaskTable, sleep_us: int = 0):
        n = len(table)
        self.counter = np.zeros(1, np.int64)
        self.out = np.full(n, -1, np.int64)
        words = np.array([[i, sleep_us] for i in range(n)], np.int64).ravel()
        tasks = NativeTasks(np.full(n, _stamp()[1], np.int64), np.arange(n, dtype=np.int64) * 2, words, 2)
        addresses = np.array([self.counter.ctypes.data, self.out.ctypes.data], np.int64)
        self.native = (tasks, lambda table, filled: table.__setitem__(slice(None), addresses))  # a native.Fill
        self.in_python = 0

    def compute(self, i: int) -> None:  # the Python executor's path: stamp from Python
        self.in_python += 1
        self.out[i] = self.counter[0]
        self.counter[0] += 1


def layered(seed: int, layers: int = 5, width: int = 12, core: str | None = None) -> TaskTable:
    """Layers of tiles, each tile reading one to three tiles of the layer before."""
    rng = random.Random(seed)
    instances = []
    for layer in range(layers):
        for t in range(width):
            reads = ()
            if layer:
                lo = rng.randrange(width)
                reads = ((f"L{layer - 1}", ((lo, min(width, lo + rng.randint(1, 3))),)),)
            instances.append(Instance(f"L{layer}", (t,), reads, ((f"L{layer}", ((t, t + 1),)),), core, ("t",)))
    return TaskTable(instances)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_instance_runs_once_after_its_producers(workers, seed):
    table = layered(seed)
    launch = Stamps(table)
    trace = execute(table, launch, Options(workers=(None,) * workers))
    assert launch.in_python == 0  # the native loop ran every instance
    assert sorted(launch.out) == list(range(len(table)))
    for i, preds in enumerate(table.predecessors):
        for p in preds:
            assert launch.out[p] < launch.out[i], (p, i)
    assert len(trace.events) == len(table)


def test_the_trace_holds_every_task_and_idle_span_in_the_run():
    table = layered(3)
    launch = Stamps(table, sleep_us=200)
    trace = execute(table, launch, Options(workers=(None, None)))
    assert sorted((e.name, e.coords) for e in trace.events) == sorted((i.name, i.coords) for i in table.instances)
    assert all(0 <= e.start <= e.end <= trace.duration for e in trace.events)
    assert all(e.end - e.start >= 150e-6 for e in trace.events)  # each task slept 200 us
    assert {e.worker for e in trace.events} == {0, 1}
    for w in (0, 1):  # a worker's tasks and idle spans never overlap
        spans = sorted([(e.start, e.end) for e in trace.events if e.worker == w] +
                       [(x.start, x.end) for x in trace.waits if x.worker == w])
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    order = {(e.name, e.coords): e for e in trace.events}
    for i, preds in enumerate(table.predecessors):
        for p in preds:
            a, b = table.instances[p], table.instances[i]
            assert order[a.name, a.coords].end <= order[b.name, b.coords].start
    assert sorted(trace.deps) == sorted((p, i) for i, ps in enumerate(table.predecessors) for p in ps)
    assert trace.summary().tasks == len(table)


def chain(length: int) -> TaskTable:
    return TaskTable([Instance("step", (k,), (("s", ((k - 1, k),)),) if k else (), (("s", ((k, k + 1),)),),
                               grid=("k",)) for k in range(length)])


def test_a_timeout_stops_the_native_loop_between_tasks():
    table = chain(200)
    launch = Stamps(table, sleep_us=5000)
    start = time.perf_counter()
    with pytest.raises(pw.RunTimeout, match="did not finish within 0.1 s"):
        execute(table, launch, Options(workers=(None, None), timeout=0.1))
    assert time.perf_counter() - start < 1.0
    time.sleep(0.05)
    assert 5 <= launch.counter[0] < 60  # stopped after the task running at the deadline


@pytest.fixture
def ctrl_c():
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_stops_the_native_loop(ctrl_c):
    table = chain(200)
    launch = Stamps(table, sleep_us=5000)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        execute(table, launch, Options(workers=(None, None)))
    assert time.perf_counter() - start < 1.0
    done = launch.counter[0]
    time.sleep(0.05)
    assert launch.counter[0] == done < 200  # nothing runs on after the run returned


@pytest.mark.parametrize("options", [dict(policy="round_robin"), dict(prefetch=1), dict(window=8),
                                     dict(workers=("a", "b"))])
def test_what_the_loop_does_not_implement_runs_in_python(options):
    table = layered(4, core="a")  # bound to core class "a": only worker "a" may run it
    launch = Stamps(table)
    options.setdefault("workers", ("a", None))
    execute(table, launch, Options(**options))
    assert launch.in_python == len(table)
    for i, preds in enumerate(table.predecessors):
        for p in preds:
            assert launch.out[p] < launch.out[i]


def test_a_cpu_build_runs_natively_and_matches_the_python_executor(monkeypatch):
    calls = []
    work, lead = NativeRun.work, NativeRun.lead
    monkeypatch.setattr(NativeRun, "work", lambda self, *a: calls.append(a) or work(self, *a))
    monkeypatch.setattr(NativeRun, "lead", lambda self, *a: calls.append(a) or lead(self, *a))
    wl = pw.zoo.transformer_block(16, 32, 2, 64)
    inputs = pw.workloads.random_inputs(wl)
    native = pw.build(wl, "cpu", workers=2)
    python = pw.build(wl, "cpu", workers=2, debug=True)  # debug checks run in Python, so the run does
    got = native.run(**inputs)
    assert calls  # the build's run went through the native loop
    calls.clear()
    want = python.run(**inputs)
    assert not calls
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert len(native.trace.events) == len(python.trace.events)
    assert native.trace.statistics["window"]["waits"] == 0


def test_a_one_instance_run_on_two_workers_traces_its_one_task():
    table = chain(1)  # runs on the caller alone (Scheduler.active), whatever the workers
    launch = Stamps(table)
    trace = execute(table, launch, Options(workers=(None, None)))
    assert launch.in_python == 0
    assert [(e.name, e.worker) for e in trace.events] == [("step", 0)]
    assert trace.summary().tasks == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pinning needs a thread allowed on two CPUs")
def test_the_lead_pins_the_caller_to_its_first_cpu_and_gives_the_affinity_back():
    before = os.sched_getaffinity(0)
    table = layered(5, layers=2, width=4)
    launch = Stamps(table, sleep_us=3000)
    tasks, fill = launch.native
    run = NativeRun(table, tasks, fill, 1)
    caller, seen, done = threading.get_native_id(), [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(frozenset(os.sched_getaffinity(caller)))
            time.sleep(5e-4)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        while run.lead(0):
            pass
    finally:
        done.set()
        watcher.join()
    run.release()
    assert sorted(launch.out) == list(range(len(table)))  # every task ran once
    assert frozenset({min(before)}) in seen  # pinned while it ran
    assert os.sched_getaffinity(0) == before  # and free again after
