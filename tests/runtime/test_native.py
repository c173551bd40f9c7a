"""The native scheduler loop (runtime/native.py) on synthetic tables of compiled thunks: order, trace, stops.

The thunks control the interleavings the tests check instead of sleeping and hoping: a task can wait
until a number of tasks have started (two tasks that meet run at once, so on two workers), until the
run is stopped (its buffer's stop flag), and can send the process SIGINT itself.  Every such wait
gives up after WAIT_NS, so a broken loop fails a test instead of hanging it.
"""

from __future__ import annotations

import functools
import os
import random
import signal
from dataclasses import dataclass

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute, watchdog
from ptowsp.runtime.executor import SLICE_NS, WATCH_NS
from ptowsp.runtime.native import NativeRun, NativeTasks, supported
from ptowsp.runtime.native_ir import CPU_WORDS, EXITED, NOW_IR, SLOTS, STOP

pytestmark = pytest.mark.skipif(supported() is not None, reason=str(supported()))

WAIT_LIMIT = 10.0  # seconds a test's wait for an interleaving lasts at most: then the runtime is broken
WAIT_NS = int(WAIT_LIMIT * 1e9)

# The stamp thunk.  Pointer table: the counter, out, the run's buffer (its state slots), the count of
# tasks started, each task's CPU mask.  Arguments: the instance i, then what it does before it
# stamps (a `Step`): meet, interrupt, until_stop, sleep_us.  It records its thread's CPU mask, then
# stamps out[i] with the next tick of the counter.
_STAMP = f"""
declare i32 @usleep(i32)
declare i32 @getpid()
declare i32 @kill(i32, i32)
declare i32 @sched_getaffinity(i32, i64, ptr)
{NOW_IR}

; until *%word >= %least or *%either >= 1, looking every 20 us, for at most WAIT_NS
define internal void @wait_for(ptr %word, i64 %least, ptr %either) {{
entry:
  %t0 = call i64 @now()
  %deadline = add i64 %t0, {WAIT_NS}
  br label %look
look:
  %v = load atomic i64, ptr %word seq_cst, align 8
  %enough = icmp sge i64 %v, %least
  %e = load atomic i64, ptr %either seq_cst, align 8
  %other = icmp sge i64 %e, 1
  %done = or i1 %enough, %other
  br i1 %done, label %out, label %late
late:
  %t = call i64 @now()
  %over = icmp sgt i64 %t, %deadline
  br i1 %over, label %out, label %nap
nap:
  call i32 @usleep(i32 20)
  br label %look
out:
  ret void
}}

define internal i64 @arg(ptr %args, i64 %k) {{
  %p = getelementptr i64, ptr %args, i64 %k
  %v = load i64, ptr %p
  ret i64 %v
}}

define internal ptr @pointer(ptr %pointers, i64 %k) {{
  %p = getelementptr ptr, ptr %pointers, i64 %k
  %v = load ptr, ptr %p
  ret ptr %v
}}

define void @stamp(ptr %pointers, ptr %args) {{
entry:
  %counter = call ptr @pointer(ptr %pointers, i64 0)
  %out = call ptr @pointer(ptr %pointers, i64 1)
  %state = call ptr @pointer(ptr %pointers, i64 2)
  %started = call ptr @pointer(ptr %pointers, i64 3)
  %masks = call ptr @pointer(ptr %pointers, i64 4)
  %i = call i64 @arg(ptr %args, i64 0)
  %meet = call i64 @arg(ptr %args, i64 1)
  %interrupt = call i64 @arg(ptr %args, i64 2)
  %until_stop = call i64 @arg(ptr %args, i64 3)
  %us = call i64 @arg(ptr %args, i64 4)
  atomicrmw add ptr %started, i64 1 seq_cst
  %at = mul i64 %i, {CPU_WORDS}
  %mask = getelementptr i64, ptr %masks, i64 %at
  call i32 @sched_getaffinity(i32 0, i64 {8 * CPU_WORDS}, ptr %mask)
  %meets = icmp sgt i64 %meet, 0
  br i1 %meets, label %meeting, label %signal
meeting:  ; until %meet tasks have started, or a helper has left the loop (it came after a stop)
  %exited = getelementptr i64, ptr %state, i64 {EXITED}
  call void @wait_for(ptr %started, i64 %meet, ptr %exited)
  br label %signal
signal:
  %interrupts = icmp ne i64 %interrupt, 0
  br i1 %interrupts, label %kill, label %gate
kill:
  %pid = call i32 @getpid()
  call i32 @kill(i32 %pid, i32 {int(signal.SIGINT)})
  br label %gate
gate:
  %gated = icmp ne i64 %until_stop, 0
  br i1 %gated, label %stopping, label %work
stopping:
  %stop = getelementptr i64, ptr %state, i64 {STOP}
  call void @wait_for(ptr %stop, i64 1, ptr %stop)
  br label %work
work:
  %us32 = trunc i64 %us to i32
  call i32 @usleep(i32 %us32)
  %k = atomicrmw add ptr %counter, i64 1 seq_cst
  %slot = getelementptr i64, ptr %out, i64 %i
  store i64 %k, ptr %slot
  ret void
}}
"""


@functools.cache
def _stamp() -> tuple[object, int]:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_STAMP)
    module.triple = llvm.get_process_triple()
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine(jit=True))
    engine.finalize_object()
    return engine, engine.get_function_address("stamp")


@dataclass(frozen=True)
class Step:
    """What a task's stamp thunk does before it stamps, in this order."""

    meet: int = 0  # wait until this many tasks have started (0: don't), or a helper has left the loop
    interrupt: bool = False  # send this process SIGINT, as Ctrl-C does
    until_stop: bool = False  # wait until the run is stopped
    sleep_us: int = 0


class Stamps:
    """A launcher whose every instance is the stamp thunk: Python's `compute` is only counted.  Each
    instance does `steps[i]`, by default `Step(meet, sleep_us=sleep_us)`."""

    load = store = None

    def __init__(self, table: TaskTable, sleep_us: int = 0, meet: int = 0, steps: dict[int, Step] | None = None):
        n = len(table)
        self.counter = np.zeros(1, np.int64)
        self.out = np.full(n, -1, np.int64)
        self.started = np.zeros(1, np.int64)
        self.masks = np.zeros((n, CPU_WORDS), np.int64)
        self.state = np.zeros(SLOTS, np.int64)  # the last native run's state slots (a view into its buffer)
        default, steps = Step(meet, sleep_us=sleep_us), steps or {}
        words = np.array([[i, step.meet, step.interrupt, step.until_stop, step.sleep_us]
                          for i, step in ((i, steps.get(i, default)) for i in range(n))], np.int64).ravel()
        tasks = NativeTasks(np.full(n, _stamp()[1], np.int64), np.arange(n, dtype=np.int64) * 5, words, 5)
        self.native = (tasks, self.fill)
        self.in_python = 0

    def fill(self, pointers: np.ndarray, filled: dict) -> None:
        """A native.Fill: the pointer table is the tail of the run's buffer, whose head is the state."""
        buffer = pointers.base
        assert buffer is not None and buffer.ctypes.data + buffer.nbytes == pointers.ctypes.data + pointers.nbytes
        self.state = buffer[:SLOTS]
        pointers[:] = [self.counter.ctypes.data, self.out.ctypes.data, buffer.ctypes.data, self.started.ctypes.data,
                       self.masks.ctypes.data]

    def cpus(self, i: int) -> set[int]:
        """The CPUs instance i's thread was allowed on while it ran (natively)."""
        return set(np.flatnonzero(np.unpackbits(self.masks[i].view(np.uint8), bitorder="little")).tolist())

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
    launch = Stamps(table, sleep_us=200, meet=2)  # the first task waits for a second: both workers run tasks
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


def chains(length: int, names: str = "ab") -> TaskTable:
    """A chain per letter, a then b: their first tasks, ready at the start, are dealt to worker 0 and
    worker 1."""
    return TaskTable([Instance(c, (k,), ((c, ((k - 1, k),)),) if k else (), ((c, ((k, k + 1),)),), grid=("k",))
                      for c in names for k in range(length)])


@pytest.fixture
def patient_watchdog(monkeypatch):
    """A stopped run gets WAIT_LIMIT seconds to unwind before its thread is abandoned (watchdog.GRACE),
    so whether its workers leave the loop within the usual grace on a busy machine cannot flip a verdict."""
    monkeypatch.setattr(watchdog, "GRACE", WAIT_LIMIT)


def test_a_timeout_stops_the_native_loop_between_tasks(patient_watchdog):
    """Each chain's first task runs until the run is stopped, and worker 0's first waits for the helper
    to start the other (or to come and leave, if it came after the stop): the run can only end by its
    timeout, and the helper is certainly in it."""
    table = chains(100)
    launch = Stamps(table, steps={0: Step(meet=2, until_stop=True), 100: Step(until_stop=True)})
    with pytest.raises(pw.RunTimeout, match=r"did not finish within 0.1 s \([12] of 200 task instances done\)"):
        execute(table, launch, Options(workers=(None, None), timeout=0.1))
    assert launch.state[EXITED] == 1  # the helper left the loop before the run returned: nothing runs on
    assert launch.out[0] >= 0 and launch.counter[0] <= 2  # the tasks running at the deadline, none after


@pytest.fixture
def ctrl_c():
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_stops_the_native_loop(ctrl_c):
    """Worker 0's first task waits for the helper to start the other chain, sends SIGINT (what Ctrl-C
    does), and runs past the end of the caller's time slice in the loop (SLICE_NS, or WATCH_NS with
    the signal's word set), so the caller is certainly back in Python after it, where
    KeyboardInterrupt stops the run.  Every other task runs
    until the run is stopped."""
    table = chains(100)
    steps = {i: Step(until_stop=True) for i in range(len(table))}
    steps[0] = Step(meet=2, interrupt=True, sleep_us=SLICE_NS // 1000 + 5000)
    launch = Stamps(table, steps=steps)
    with pytest.raises(KeyboardInterrupt):
        execute(table, launch, Options(workers=(None, None)))
    assert launch.state[EXITED] == 1  # the helper left the loop before the run returned: nothing runs on
    assert launch.counter[0] == 2 and launch.out[0] >= 0 and launch.out[100] >= 0  # the chains' first tasks only


def _counting_calls(monkeypatch) -> list[int]:
    """Counts the caller's calls into the loop (each a return to Python after the first)."""
    calls = [0]
    work = NativeRun.work

    def counted(run, w, deadline_ns=0):
        calls[0] += 1
        return work(run, w, deadline_ns)

    monkeypatch.setattr(NativeRun, "work", counted)
    return calls


def test_a_long_run_comes_back_to_python_once_then_only_for_a_signal(monkeypatch):
    """After its first slice a run watches a word signals write (stops.signal_word) instead of coming
    back to Python every SLICE_NS: a return costs 40-60 us of cold Python after kernels that
    streamed memory.  Four tasks each longer than a slice: one return, not four."""
    calls = _counting_calls(monkeypatch)
    table = chains(4, "a")
    launch = Stamps(table, sleep_us=SLICE_NS // 1000 + 10_000)
    execute(table, launch, Options(workers=(None,)))
    assert calls == [2] and list(launch.out) == list(range(4))


def test_a_signal_whose_handler_returns_lets_the_run_go_on(monkeypatch):
    """SIGINT, once the word is watched, under a handler that only counts: the caller comes back to
    Python, the handler runs there (during the run, not after it), and the caller goes back into the
    loop to finish the table."""
    calls = _counting_calls(monkeypatch)
    seen = []
    inherited = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(calls[0]))
    try:
        table = chains(3, "a")
        launch = Stamps(table, steps={0: Step(sleep_us=SLICE_NS // 1000 + 10_000),
                                      1: Step(interrupt=True, sleep_us=3 * WATCH_NS // 1000)})
        execute(table, launch, Options(workers=(None,)))
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert seen == [2] and calls == [3] and list(launch.out) == list(range(3))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("window", [1, 8])
def test_the_loop_admits_instances_in_table_order_within_the_window(workers, window):
    """At most `window` instances admitted and not retired: instance i starts only after i - window + 1
    instances have ended (ViT-B/16's 1,082 instances had left the native loop for Python's, 6 us a task)."""
    table = layered(0, layers=6)
    launch = Stamps(table, sleep_us=30)
    trace = execute(table, launch, Options(workers=(None,) * workers, window=window))
    assert launch.in_python == 0 and sorted(launch.out) == list(range(len(table)))
    ends = sorted(e.end for e in trace.events)
    for e in trace.events:
        assert sum(end <= e.start for end in ends) >= e.id - window + 1, e.id
    for i, preds in enumerate(table.predecessors):
        for p in preds:
            assert launch.out[p] < launch.out[i], (p, i)
    assert trace.statistics["window"]["peak"] == window


@pytest.mark.parametrize("options", [dict(policy="round_robin"), dict(prefetch=1), dict(workers=("a", "b"))])
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
    launch = Stamps(table)
    tasks, fill = launch.native
    run = NativeRun(table, tasks, fill, 1, len(table))
    while run.lead(0):
        pass
    run.release()
    assert sorted(launch.out) == list(range(len(table)))  # every task ran once
    assert all(launch.cpus(i) == {min(before)} for i in range(len(table)))  # pinned while each task ran
    assert os.sched_getaffinity(0) == before  # and free again after
