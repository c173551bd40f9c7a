"""The scheduler and worker loop compiled to native code, for tables whose every task is a compiled kernel.

Why: the Python executor's scheduler code costs 5-10 us per task, and the
GIL serialises it across workers: a kernel that returns waits for the other
worker's Python (docs/performance.md).  When every instance of a table is a
compiled kernel with a uniform entry point (a *thunk*: `void thunk(i64*
pointers, i64* arguments)`, emitted by the backend beside each kernel), the
same work-stealing scheduler runs as a loop in native code: the worker
processes of executor.py each call it once, through ctypes, with the GIL
released for the whole run.

The loop is the Python scheduler's `work_stealing` policy on lock-protected
arrays (the table's instances are each made ready once, so a queue is an
array with a head and a tail that never wraps):

- every worker has a ready queue: it takes its newest task (depth first)
  and an idle worker steals the oldest task of another's;
- completing a task decrements its successors' dependency counts
  (atomically); a successor made ready goes to the completing worker's
  queue (it reads what that worker just wrote);
- an idle worker spins (`pause`) for 0.2 ms, then yields its core for up to
  2 ms, then polls every 0.1 ms (oversubscribed machines get their cores
  back; OpenMP's active wait, bounded);
- each worker records its tasks' start and end and its idle spans
  (CLOCK_MONOTONIC, the clock of `time.perf_counter` on Linux) into arrays
  the executor turns into the Trace;
- a stop flag (Ctrl-C, a timeout) is checked between tasks, and a call
  given a deadline returns at the first task boundary past it, so the
  caller's thread gets back to Python to see Ctrl-C.

The loop is compiled once per process (llvmlite), on first use.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import time

import numpy as np

from ptowsp.runtime.table import TaskTable

# the state array: one int64 per slot, addresses of the arrays below as integers
# (EXITED: helper threads that have left the loop, counted by crew.py)
N, WORKERS, COMPLETED, STOP, THUNKS, OFFSETS, ARGUMENTS, POINTERS, SUCC_START, SUCC, REMAINING, \
    QUEUES, META, RECORDS, WAITS, EXITED = range(16)
SLOTS = 16
# per worker, one cache line of int64 in META: queue head, queue tail, queue lock, records, idle spans,
# the start of the idle span in progress (-1: none)
HEAD, TAIL, LOCK, RECORDED, WAITED, IDLE_SINCE = range(6)
LINE = 8
SPIN_NS, YIELD_NS, POLL_NS = 200_000, 2_000_000, 100_000
CLOCK_MONOTONIC = 1  # Linux's id


@functools.cache
def supported() -> str | None:
    """Why this host cannot run the native loop, or None."""
    if not sys.platform.startswith("linux"):
        return f"the native loop reads CLOCK_MONOTONIC through Linux's clock id, this host is {sys.platform}"
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "the native loop stores addresses in 64-bit slots"
    return None


# `@now()`: CLOCK_MONOTONIC in nanoseconds, the clock of time.perf_counter on Linux
NOW_IR = """
declare i32 @clock_gettime(i32, ptr)

define internal i64 @now() {
  %ts = alloca {i64, i64}
  call i32 @clock_gettime(i32 CLOCK, ptr %ts)
  %s = load i64, ptr %ts
  %p = getelementptr {i64, i64}, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %p
  %a = mul i64 %s, 1000000000
  %t = add i64 %a, %ns
  ret i64 %t
}
""".replace("CLOCK", str(CLOCK_MONOTONIC))


def _loop_ir(x86: bool) -> str:
    pause = "call void @llvm.x86.sse2.pause()" if x86 else ""
    declare_pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    return f"""
declare i32 @sched_yield()
declare i32 @nanosleep(ptr, ptr)
{declare_pause}

{NOW_IR}
define internal ptr @slot(ptr %state, i64 %k) {{
  %p = getelementptr i64, ptr %state, i64 %k
  %v = load ptr, ptr %p
  ret ptr %v
}}

define internal ptr @meta(ptr %state, i64 %w, i64 %field) {{
  %m = call ptr @slot(ptr %state, i64 {META})
  %a = mul i64 %w, {LINE}
  %b = add i64 %a, %field
  %p = getelementptr i64, ptr %m, i64 %b
  ret ptr %p
}}

define internal void @lock(ptr %l) {{
entry:
  br label %try
try:
  %old = atomicrmw xchg ptr %l, i64 1 acquire
  %free = icmp eq i64 %old, 0
  br i1 %free, label %done, label %spin
spin:
  {pause}
  %v = load atomic i64, ptr %l monotonic, align 8
  %z = icmp eq i64 %v, 0
  br i1 %z, label %try, label %spin
done:
  ret void
}}

define internal void @unlock(ptr %l) {{
  store atomic i64 0, ptr %l release, align 8
  ret void
}}

; the queue entry k of worker w
define internal ptr @entry(ptr %state, i64 %w, i64 %k) {{
  %n = load i64, ptr %state
  %q = call ptr @slot(ptr %state, i64 {QUEUES})
  %a = mul i64 %w, %n
  %b = add i64 %a, %k
  %p = getelementptr i64, ptr %q, i64 %b
  ret ptr %p
}}

define internal void @push(ptr %state, i64 %w, i64 %i) {{
  %l = call ptr @meta(ptr %state, i64 %w, i64 {LOCK})
  %tp = call ptr @meta(ptr %state, i64 %w, i64 {TAIL})
  call void @lock(ptr %l)
  %t = load i64, ptr %tp
  %e = call ptr @entry(ptr %state, i64 %w, i64 %t)
  store i64 %i, ptr %e
  %t1 = add i64 %t, 1
  store atomic i64 %t1, ptr %tp monotonic, align 8
  call void @unlock(ptr %l)
  ret void
}}

; the newest task of w's own queue, or -1
define internal i64 @pop(ptr %state, i64 %w) {{
entry:
  %l = call ptr @meta(ptr %state, i64 %w, i64 {LOCK})
  %hp = call ptr @meta(ptr %state, i64 %w, i64 {HEAD})
  %tp = call ptr @meta(ptr %state, i64 %w, i64 {TAIL})
  call void @lock(ptr %l)
  %h = load i64, ptr %hp
  %t = load i64, ptr %tp
  %some = icmp sgt i64 %t, %h
  br i1 %some, label %take, label %none
take:
  %t1 = sub i64 %t, 1
  %e = call ptr @entry(ptr %state, i64 %w, i64 %t1)
  %i = load i64, ptr %e
  store atomic i64 %t1, ptr %tp monotonic, align 8
  call void @unlock(ptr %l)
  ret i64 %i
none:
  call void @unlock(ptr %l)
  ret i64 -1
}}

; the oldest task of v's queue, or -1 (an empty queue is seen without its lock)
define internal i64 @steal(ptr %state, i64 %v) {{
entry:
  %l = call ptr @meta(ptr %state, i64 %v, i64 {LOCK})
  %hp = call ptr @meta(ptr %state, i64 %v, i64 {HEAD})
  %tp = call ptr @meta(ptr %state, i64 %v, i64 {TAIL})
  %h0 = load atomic i64, ptr %hp monotonic, align 8
  %t0 = load atomic i64, ptr %tp monotonic, align 8
  %maybe = icmp sgt i64 %t0, %h0
  br i1 %maybe, label %locked, label %empty
locked:
  call void @lock(ptr %l)
  %h = load i64, ptr %hp
  %t = load i64, ptr %tp
  %some = icmp sgt i64 %t, %h
  br i1 %some, label %take, label %none
take:
  %e = call ptr @entry(ptr %state, i64 %v, i64 %h)
  %i = load i64, ptr %e
  %h1 = add i64 %h, 1
  store atomic i64 %h1, ptr %hp monotonic, align 8
  call void @unlock(ptr %l)
  ret i64 %i
none:
  call void @unlock(ptr %l)
  br label %empty
empty:
  ret i64 -1
}}

; close w's idle span, if one is open, at time %t
define internal void @end_idle(ptr %state, i64 %w, i64 %t) {{
entry:
  %sp = call ptr @meta(ptr %state, i64 %w, i64 {IDLE_SINCE})
  %since = load i64, ptr %sp
  %open = icmp sge i64 %since, 0
  br i1 %open, label %close, label %done
close:
  %cp = call ptr @meta(ptr %state, i64 %w, i64 {WAITED})
  %c = load i64, ptr %cp
  %n = load i64, ptr %state
  %waits = call ptr @slot(ptr %state, i64 {WAITS})
  %n1 = add i64 %n, 1
  %row = mul i64 %w, %n1
  %k = add i64 %row, %c
  %at = mul i64 %k, 2
  %p0 = getelementptr i64, ptr %waits, i64 %at
  store i64 %since, ptr %p0
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %t, ptr %p1
  %c1 = add i64 %c, 1
  store i64 %c1, ptr %cp
  store i64 -1, ptr %sp
  br label %done
done:
  ret void
}}

; idle for one turn: spin, yield or sleep by how long the idle span has lasted
define internal void @idle(ptr %state, i64 %w, i64 %t) {{
entry:
  %sp = call ptr @meta(ptr %state, i64 %w, i64 {IDLE_SINCE})
  %since = load i64, ptr %sp
  %open = icmp sge i64 %since, 0
  br i1 %open, label %measure, label %start
start:
  store i64 %t, ptr %sp
  br label %spin
measure:
  %d = sub i64 %t, %since
  %short = icmp slt i64 %d, {SPIN_NS}
  br i1 %short, label %spin, label %longer
spin:
  {pause}
  ret void
longer:
  %medium = icmp slt i64 %d, {YIELD_NS}
  br i1 %medium, label %yield, label %sleep
yield:
  call i32 @sched_yield()
  ret void
sleep:
  %ts = alloca {{i64, i64}}
  store i64 0, ptr %ts
  %p = getelementptr {{i64, i64}}, ptr %ts, i32 0, i32 1
  store i64 {POLL_NS}, ptr %p
  call i32 @nanosleep(ptr %ts, ptr null)
  ret void
}}

; run tasks until the table is done or stopped (0), or until a task ends past %deadline (1; 0: none)
define i64 @ptowsp_native_worker(ptr %state, i64 %w, i64 %deadline) {{
entry:
  %n = load i64, ptr %state
  %wp = getelementptr i64, ptr %state, i64 {WORKERS}
  %workers = load i64, ptr %wp
  %completed = getelementptr i64, ptr %state, i64 {COMPLETED}
  %stopp = getelementptr i64, ptr %state, i64 {STOP}
  %thunks = call ptr @slot(ptr %state, i64 {THUNKS})
  %offsets = call ptr @slot(ptr %state, i64 {OFFSETS})
  %arguments = call ptr @slot(ptr %state, i64 {ARGUMENTS})
  %pointers = call ptr @slot(ptr %state, i64 {POINTERS})
  %sstart = call ptr @slot(ptr %state, i64 {SUCC_START})
  %succ = call ptr @slot(ptr %state, i64 {SUCC})
  %remaining = call ptr @slot(ptr %state, i64 {REMAINING})
  %records = call ptr @slot(ptr %state, i64 {RECORDS})
  %recp = call ptr @meta(ptr %state, i64 %w, i64 {RECORDED})
  %hasdeadline = icmp ne i64 %deadline, 0
  %task = alloca i64
  %k = alloca i64
  %turn = alloca i64
  store i64 0, ptr %turn
  br label %loop

loop:
  %stop = load atomic i64, ptr %stopp monotonic, align 8
  %stopped = icmp ne i64 %stop, 0
  br i1 %stopped, label %over, label %own
own:
  %mine = call i64 @pop(ptr %state, i64 %w)
  store i64 %mine, ptr %task
  %got = icmp sge i64 %mine, 0
  br i1 %got, label %run, label %steal0
steal0:
  store i64 1, ptr %k
  br label %steal
steal:
  %kk = load i64, ptr %k
  %more = icmp slt i64 %kk, %workers
  br i1 %more, label %try, label %idle
try:
  %wk = add i64 %w, %kk
  %v = urem i64 %wk, %workers
  %stolen = call i64 @steal(ptr %state, i64 %v)
  store i64 %stolen, ptr %task
  %kk1 = add i64 %kk, 1
  store i64 %kk1, ptr %k
  %gots = icmp sge i64 %stolen, 0
  br i1 %gots, label %run, label %steal

idle:
  %c = load atomic i64, ptr %completed acquire, align 8
  %alldone = icmp eq i64 %c, %n
  br i1 %alldone, label %over, label %wait
wait:
  %tw = call i64 @now()
  call void @idle(ptr %state, i64 %w, i64 %tw)
  %late = icmp sgt i64 %tw, %deadline
  %leave = and i1 %hasdeadline, %late
  br i1 %leave, label %slice, label %loop

run:
  %i = load i64, ptr %task
  %t0 = call i64 @now()
  call void @end_idle(ptr %state, i64 %w, i64 %t0)
  %fnp = getelementptr i64, ptr %thunks, i64 %i
  %fn = load ptr, ptr %fnp
  %offp = getelementptr i64, ptr %offsets, i64 %i
  %off = load i64, ptr %offp
  %args = getelementptr i64, ptr %arguments, i64 %off
  call void %fn(ptr %pointers, ptr %args)
  %t1 = call i64 @now()
  %r = load i64, ptr %recp
  %row = mul i64 %w, %n
  %rk = add i64 %row, %r
  %at = mul i64 %rk, 3
  %q0 = getelementptr i64, ptr %records, i64 %at
  store i64 %i, ptr %q0
  %q1 = getelementptr i64, ptr %q0, i64 1
  store i64 %t0, ptr %q1
  %q2 = getelementptr i64, ptr %q0, i64 2
  store i64 %t1, ptr %q2
  %r1 = add i64 %r, 1
  store i64 %r1, ptr %recp
  %lop = getelementptr i64, ptr %sstart, i64 %i
  %lo = load i64, ptr %lop
  %i1 = add i64 %i, 1
  %hip = getelementptr i64, ptr %sstart, i64 %i1
  %hi = load i64, ptr %hip
  store i64 %lo, ptr %k
  br label %succs
succs:
  %j = load i64, ptr %k
  %left = icmp slt i64 %j, %hi
  br i1 %left, label %succ1, label %retired
succ1:
  %sp = getelementptr i64, ptr %succ, i64 %j
  %s = load i64, ptr %sp
  %cp = getelementptr i64, ptr %remaining, i64 %s
  %old = atomicrmw sub ptr %cp, i64 1 acq_rel
  %j1 = add i64 %j, 1
  store i64 %j1, ptr %k
  %ready = icmp eq i64 %old, 1
  br i1 %ready, label %place, label %succs
place:
  call void @push(ptr %state, i64 %w, i64 %s)
  br label %succs
retired:
  atomicrmw add ptr %completed, i64 1 release
  %past = icmp sgt i64 %t1, %deadline
  %yieldnow = and i1 %hasdeadline, %past
  br i1 %yieldnow, label %slice, label %loop

slice:
  ret i64 1
over:
  %te = call i64 @now()
  call void @end_idle(ptr %state, i64 %w, i64 %te)
  ret i64 0
}}
"""


class _Loop:
    """The compiled loop, and the engine that keeps its code alive."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm  # imported on first use: `import ptowsp` compiles nothing

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        module = llvm.parse_assembly(_loop_ir(x86=triple.startswith(("x86_64", "i686", "i386"))))
        module.triple = triple
        module.verify()
        target = llvm.Target.from_triple(triple).create_target_machine(opt=2, jit=True)
        self.engine = llvm.create_mcjit_compiler(module, target)
        self.engine.finalize_object()
        self.address = self.engine.get_function_address("ptowsp_native_worker")
        self.worker = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(self.address)


@functools.cache
def _loop() -> _Loop:
    return _Loop()


def worker_address() -> int:
    """The address of the compiled `ptowsp_native_worker(state, w, deadline_ns)`, for crew.py's threads."""
    return _loop().address


class NativeTasks:
    """What a backend gives for a native run of one table: per instance the address of its kernel's
    thunk and where its arguments start in `arguments` (a thunk reads its pointer arguments as
    indices into the run's `pointers`, its integers as they are).  It keeps a finished run's buffer
    for the next run, so a run allocates nothing."""

    def __init__(self, thunks: np.ndarray, offsets: np.ndarray, arguments: np.ndarray):
        self.thunks, self.offsets, self.arguments = thunks, offsets, arguments
        self._kept: dict[int, _Buffer] = {}  # per worker count

    def acquire(self, table: TaskTable, workers: int) -> _Buffer:
        """A buffer set for a run's start: the kept one, unless a run holds it (then a new one)."""
        buffer = self._kept.pop(workers, None) or _Buffer(table, self, workers)  # pop: atomic under the GIL
        buffer.reset()
        return buffer

    def release(self, buffer: _Buffer) -> None:
        self._kept[buffer.workers] = buffer


_META_AT = -(-SLOTS // LINE) * LINE  # the workers' lines start on a cache line of their own


class _Buffer:
    """The int64 buffer the loop reads and writes: the state slots, a line per worker, the
    dependency counts, the queues, the task records and the idle spans; and its head as every run
    starts (every address set but the run's pointer table; the queues hold the instances ready at
    the start, dealt round robin as the Python scheduler deals them)."""

    def __init__(self, table: TaskTable, tasks: NativeTasks, workers: int):
        n = len(table)
        starts, successors, counts = table.successor_arrays
        remaining_at = _META_AT + workers * LINE
        queues_at = remaining_at + n
        self.records_at = queues_at + workers * n
        self.waits_at = self.records_at + workers * n * 3
        self.array = np.zeros(self.waits_at + workers * (n + 1) * 2, np.int64)
        base = self.array.ctypes.data
        head = self.head = np.zeros(queues_at + workers * n, np.int64)
        head[:SLOTS] = [n, workers, 0, 0, tasks.thunks.ctypes.data, tasks.offsets.ctypes.data,
                        tasks.arguments.ctypes.data, 0, starts.ctypes.data, successors.ctypes.data,
                        base + 8 * remaining_at, base + 8 * queues_at, base + 8 * _META_AT,
                        base + 8 * self.records_at, base + 8 * self.waits_at, 0]
        meta = head[_META_AT:remaining_at].reshape(workers, LINE)
        meta[:, IDLE_SINCE] = -1
        head[remaining_at:queues_at] = counts
        ready = np.flatnonzero(counts == 0)
        for w in range(workers):
            mine = ready[w::workers]
            head[queues_at + w * n:queues_at + w * n + len(mine)] = mine
            meta[w, TAIL] = len(mine)
        self.state = self.array[:SLOTS]
        self.meta = self.array[_META_AT:remaining_at].reshape(workers, LINE)
        self.n, self.workers, self.address = n, workers, base
        self._keep = (tasks.thunks, tasks.offsets, tasks.arguments, starts, successors)  # what the loop reads

    def reset(self) -> None:
        self.array[:len(self.head)] = self.head


class NativeRun:
    """One run of a table on the native loop."""

    def __init__(self, table: TaskTable, tasks: NativeTasks, pointers: np.ndarray, workers: int):
        self.tasks, self.pointers = tasks, pointers  # the loop reads them: alive for the run
        self.buffer = buffer = tasks.acquire(table, workers)
        buffer.state[POINTERS] = pointers.ctypes.data
        self.workers = workers
        self._worker = _loop().worker

    def work(self, w: int, deadline_ns: int = 0) -> bool:
        """Worker w runs tasks (GIL released) until the table is done or stopped (False), or until
        a task ends past `deadline_ns` on the monotonic clock (True: call again)."""
        return bool(self._worker(self.buffer.address, w, deadline_ns))

    def stop(self) -> None:
        """Workers stop at their next task boundary."""
        self.buffer.state[STOP] = 1

    def wait_exited(self, helpers: int) -> None:
        """Until `helpers` threads (crew.py's, which count themselves out) have left the loop: they
        see the table done or stopped within a task, so this spins, then sleeps in short naps."""
        state, spun = self.buffer.state, 0
        while state[EXITED] < helpers:
            spun += 1
            if spun > 1000:
                time.sleep(1e-5)

    def release(self) -> None:
        """The run is over (no worker is in the loop): its buffer serves the next run."""
        self.tasks.release(self.buffer)

    @property
    def completed(self) -> int:
        return int(self.buffer.state[COMPLETED])

    def runs(self, w: int) -> np.ndarray:
        """Worker w's tasks: rows of (instance, start ns, end ns), copied out of the run's buffer."""
        b = self.buffer
        at = b.records_at + w * b.n * 3
        return b.array[at:at + int(b.meta[w, RECORDED]) * 3].reshape(-1, 3).copy()

    def idle(self, w: int) -> np.ndarray:
        """Worker w's idle spans: rows of (start ns, end ns), copied out of the run's buffer."""
        b = self.buffer
        at = b.waits_at + w * (b.n + 1) * 2
        return b.array[at:at + int(b.meta[w, WAITED]) * 2].reshape(-1, 2).copy()
