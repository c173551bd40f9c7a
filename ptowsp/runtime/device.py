"""Run a task table on the device clock: AICPU and AICore roles as trio virtual threads (DESIGN.md section 5).

Under trio's `MockClock(autojump_threshold=0)` time passes only while a
virtual thread sleeps, and jumps straight to the next wake-up, so host speed
never shows in the result: every duration comes from the backend's
`DeviceCosts`.  Kernels still compute their real numbers on the host.

- The **orchestrator** (one AICPU thread) generates the instances in table
  order into the task window, `orchestrate_seconds` each, and waits while the
  window is full.
- **Scheduler** s (the other AICPU threads) serves cores s, s + S, ...: it
  takes its cores' completion notices (resolving dependency tokens, which
  makes successors ready) and fills their slots, `schedule_seconds` of work
  per task; a dispatched task reaches its core `dispatch_seconds` later.
- A **core** holds `slots` tasks (running + pending; with `prefetch(n)`,
  1 + n).  A task streams in blocks (`costs.blocks`): each block is loaded,
  then computed; a tile's output is stored after its last block
  (`costs.stores`).  A load keeps the core's DMA engine busy for its bytes
  and lands `ready` seconds after it was issued (`costs.load`), so the
  engine may issue the next block while one is in flight.  With prefetch 0
  one virtual thread runs the stages in sequence.  With prefetch n the core
  is three virtual threads, load, compute and store (the MTE2,
  cube-or-vector and MTE3 units), exchanging tokens: load takes a `free`
  credit per block (1 + n buffers: the one computing and n loaded ahead)
  and passes the block on; compute waits for it to land and hands the
  credit back when it is done with it; store follows compute.  So loads run
  up to n blocks ahead, across task boundaries.
- After its last store a core sends a completion notice, which reaches its
  scheduler `completion_seconds` later; only then does the scheduler count
  the slot free.

`timeout` bounds a run twice: in device seconds (the model's own deadline)
and in host seconds, so a kernel or opaque task stuck on the host still
ends the run on time (watchdog.py).

A kernel computes its numbers when its first block's compute begins: every
producer has stored by then.  Virtual threads woken at the same instant must
run in a fixed order for the trace to repeat.  trio breaks ties between equal
deadlines by object addresses (which differ from process to process), so
every timed wait goes through one `_Timeline` that wakes them in the order
they asked; trio then runs a batch in an order it draws at random, and
`csp.deterministic_order()` fixes that draw.  So the same program gives the
same trace on any machine, whatever ran before it in the process.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import trio
import trio.testing
from trio.lowlevel import ParkingLot

from ptowsp.errors import RunTimeout
from ptowsp.runtime.csp import deterministic_order
from ptowsp.runtime.dispatch import placer
from ptowsp.runtime.executor import Launcher, Options, Scheduler
from ptowsp.runtime.stops import describe, raise_failure
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Edges, Event, Trace, Wait
from ptowsp.runtime.watchdog import TrioStop, bounded

STALL_SECONDS = 3600.0  # device seconds without finishing: a stall in the model, reported, never a hang


class DeviceCosts(Protocol):
    """What a device target tells the runtime: AICPU costs, core slots and each instance's stage times."""

    schedulers: int
    orchestrate_seconds: float
    schedule_seconds: float
    dispatch_seconds: float
    completion_seconds: float
    slots: int  # tasks a core holds without prefetch (running + pending)

    def blocks(self, i: int) -> int:
        """How many load/compute steps instance i streams in."""

    def load(self, i: int, block: int, now: float) -> tuple[float, float]:
        """(busy, ready): seconds the core's DMA engine is busy bringing in one block of instance i,
        issued at device time `now`, and seconds until the block is in the core's buffers."""

    def compute(self, i: int, block: int) -> float: ...

    def stores(self, i: int, block: int) -> bool:
        """Whether instance i stores a tile of its output after computing `block`."""

    def store(self, i: int, block: int, now: float) -> float: ...


class _Timeline:
    """Timed waits woken in the order they were asked: one driver sleeps until the earliest."""

    def __init__(self) -> None:
        self.due: list[tuple[float, int, trio.Event]] = []
        self.order = itertools.count()
        self.changed = ParkingLot()

    async def until(self, when: float) -> None:
        if when <= trio.current_time():
            return
        event = trio.Event()
        heapq.heappush(self.due, (when, next(self.order), event))
        self.changed.unpark_all()
        await event.wait()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await trio.lowlevel.checkpoint()
        else:
            await self.until(trio.current_time() + seconds)

    async def drive(self) -> None:
        while True:
            with trio.move_on_at(self.due[0][0] if self.due else float("inf")):
                await self.changed.park()  # a new, earlier wake-up may have arrived
            while self.due and self.due[0][0] <= trio.current_time():
                heapq.heappop(self.due)[2].set()


class _Nudge:
    """Stands in for a worker's condition variable: a ready task wakes every scheduler."""

    def __init__(self, lots: list[ParkingLot]):
        self.lots = lots

    def notify(self) -> None:
        for lot in self.lots:
            lot.unpark_all()


@dataclass
class _Core:
    index: int
    lot: ParkingLot = field(default_factory=ParkingLot)
    inbox: deque = field(default_factory=deque)  # (instance, arrival time) not yet taken by the load stage
    held: int = 0  # tasks the AICPU counts on this core: dispatched, completion not yet noticed


class _Recorder:
    """Stage intervals per instance and busy stretches per AICPU thread, turned into the Trace."""

    def __init__(self) -> None:
        self.stages: dict[tuple[int, str | None], list] = {}  # (instance, stage) -> [core, start, end, active]
        self.aicpu: dict[int, list[list[float]]] = {}  # row -> merged busy intervals

    def stage(self, i: int, stage: str | None, core: int, start: float, end: float) -> None:
        span = self.stages.get((i, stage))
        if span is None:
            self.stages[(i, stage)] = [core, start, end, end - start]
        else:
            span[2] = end
            span[3] += end - start

    def busy(self, row: int, start: float, end: float) -> None:
        spans = self.aicpu.setdefault(row, [])
        if spans and spans[-1][1] >= start:
            spans[-1][1] = end
        else:
            spans.append([start, end])


def execute_device(table: TaskTable, launcher: Launcher, options: Options, costs: DeviceCosts) -> Trace:
    """Run every instance of `table` once on the device clock; the Trace is in device seconds."""
    cores = [_Core(k) for k in range(len(options.workers))]
    lots = [ParkingLot() for _ in range(costs.schedulers)]
    nudge = _Nudge(lots)
    sched = Scheduler(table, options, placer(options.policy), trio.current_time, wakeup=lambda: nudge)
    for w in sched.workers:
        w.idle = True  # every placement nudges the schedulers
    record, window_lot, clock = _Recorder(), ParkingLot(), _Timeline()
    window_waits: list[tuple[float, float]] = []
    notices: list[deque] = [deque() for _ in range(costs.schedulers)]
    n = len(table.instances)
    slots = max(costs.slots, 1 + options.prefetch)
    orchestrator_row, scheduler_rows = len(cores), len(cores) + 1
    failure: list[tuple[int, BaseException]] = []

    def finished() -> bool:
        return sched.completed == n or bool(failure)

    async def orchestrator() -> None:
        for i in range(n):
            while sched.free == 0:
                start = trio.current_time()
                await window_lot.park()
                window_waits.append((start, trio.current_time()))
            start = trio.current_time()
            await clock.sleep(costs.orchestrate_seconds)
            record.busy(orchestrator_row, start, trio.current_time())
            sched.admit(i)

    async def scheduler(s: int) -> None:
        mine = cores[s::costs.schedulers]
        turn = 0
        while not finished():
            while notices[s]:
                i, core = notices[s].popleft()
                core.held -= 1
                sched.complete(i, sched.workers[core.index])
                window_lot.unpark_all()
            picked = None
            for k in range(len(mine)):
                core = mine[(turn + k) % len(mine)]
                if core.held < slots:
                    i = sched.take(sched.workers[core.index])
                    if i is not None:
                        picked, turn = (core, i), (turn + k + 1) % len(mine)
                        break
            if picked is None:
                if not finished() and not notices[s]:
                    await lots[s].park()
                continue
            core, i = picked
            core.held += 1
            start = trio.current_time()
            await clock.sleep(costs.schedule_seconds)
            record.busy(scheduler_rows + s, start, trio.current_time())
            core.inbox.append((i, trio.current_time() + costs.dispatch_seconds))
            core.lot.unpark_all()
        for core in mine:
            core.lot.unpark_all()

    async def arrival(core: _Core) -> int | None:
        """The next task dispatched to `core`, once it has arrived; None when the run is over."""
        while not core.inbox:
            if finished():
                return None
            await core.lot.park()
        i, at = core.inbox.popleft()
        await until(at)
        return i

    until = clock.until

    async def timed(i: int, stage: str | None, core: _Core, seconds: float) -> None:
        start = trio.current_time()
        await clock.sleep(seconds)
        record.stage(i, stage, core.index, start, trio.current_time())

    async def compute(i: int, block: int, core: _Core) -> None:
        if block == 0:
            running[:] = [(i, core.index)]
            try:
                launcher.compute(i)
            except BaseException as e:  # noqa: BLE001 - task code failed: stop the run, report it
                failure.append((i, e))
                raise _Failed from None
            finally:
                running.clear()
        await timed(i, None, core, costs.compute(i, block))

    async def load(i: int, block: int, core: _Core) -> float:
        """Issue one block's load; returns when the DMA engine is free again, with the block's arrival time."""
        start = trio.current_time()
        busy, ready = costs.load(i, block, start)
        record.stage(i, "load", core.index, start, start + ready)
        await clock.sleep(busy)
        return start + ready

    async def store(i: int, block: int, core: _Core, nursery: trio.Nursery) -> None:
        await timed(i, "store", core, costs.store(i, block, trio.current_time()))
        if block == costs.blocks(i) - 1:
            nursery.start_soon(notice, i, core)

    async def notice(i: int, core: _Core) -> None:
        await clock.sleep(costs.completion_seconds)
        s = core.index % costs.schedulers
        notices[s].append((i, core))
        lots[s].unpark_all()

    async def serial_core(core: _Core, nursery: trio.Nursery) -> None:
        while (i := await arrival(core)) is not None:
            for block in range(costs.blocks(i)):
                await until(await load(i, block, core))
                await compute(i, block, core)
                if costs.stores(i, block):
                    await store(i, block, core, nursery)

    async def pipelined_core(core: _Core, nursery: trio.Nursery) -> None:
        free = trio.Semaphore(1 + options.prefetch)
        to_compute, from_load = trio.open_memory_channel(float("inf"))
        to_store, from_compute = trio.open_memory_channel(float("inf"))

        async def load_stage() -> None:
            async with to_compute:
                while (i := await arrival(core)) is not None:
                    blocks = costs.blocks(i)
                    for block in range(blocks):
                        await free.acquire()  # WAR: a prefetch buffer must be free
                        await to_compute.send((i, block, await load(i, block, core)))

        async def compute_stage() -> None:
            async with to_store:
                async for i, block, landed in from_load:
                    await until(landed)  # RAW: compute may use the block once it has landed
                    await compute(i, block, core)
                    free.release()
                    if costs.stores(i, block):
                        await to_store.send((i, block))

        async def store_stage() -> None:
            async for i, block in from_compute:
                await store(i, block, core, nursery)

        async with trio.open_nursery() as stages:
            stages.start_soon(load_stage)
            stages.start_soon(compute_stage)
            stages.start_soon(store_stage)

    async def main() -> None:
        with trio.move_on_after(options.timeout or STALL_SECONDS) as deadline:
            stopper.enter(deadline)
            async with trio.open_nursery() as timing:
                timing.start_soon(clock.drive)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(orchestrator)
                    for s in range(costs.schedulers):
                        nursery.start_soon(scheduler, s)
                    run_core = pipelined_core if options.prefetch else serial_core
                    for core in cores:
                        nursery.start_soon(run_core, core, nursery)
                timing.cancel_scope.cancel()
        if deadline.cancelled_caught:
            done = f"{sched.completed} of {n} task instances done, device clock at {trio.current_time():g} s"
            if stopper.reason is not None:  # the watchdog's stop: host time ran out
                raise RunTimeout(f"{stopper.reason} of host time ({done})")
            raise RunTimeout(f"the device run did not finish within {options.timeout or STALL_SECONDS:g} device "
                             f"seconds ({done})")
        trace.duration = trio.current_time()

    def run() -> Trace:
        try:
            with deterministic_order():
                trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        except BaseExceptionGroup as group:
            if not failure:
                raise
            del group
        if failure:
            raise_failure(table, failure[0])
        _fill_trace(trace, table, options, record, sched, window_waits, costs.schedulers)
        return trace

    def stuck() -> list[str]:
        return [f"{describe(table.instances[i])} on core {k}" for i, k in list(running)]

    trace = Trace(title=options.title, clock="device")
    running: list[tuple[int, int]] = []  # (instance, core) whose task code runs on the host now
    stopper = TrioStop()
    # timeout bounds device seconds (main's deadline) and, against task code stuck in the host, wall seconds
    return bounded(run, options.timeout, stopper.stop, stuck, "the device run")


class _Failed(Exception):
    """Unwinds a core's virtual threads after task code raised (the failure is recorded)."""


def _fill_trace(trace: Trace, table: TaskTable, options: Options, record: _Recorder, sched: Scheduler,
                window_waits: list[tuple[float, float]], schedulers: int) -> None:
    instances, cores = table.instances, len(options.workers)
    trace.workers = [(f"{core or 'core'}{k}", core) for k, core in enumerate(options.workers)]
    trace.workers += [("orchestrator", "aicpu")] + [(f"scheduler{s}", "aicpu") for s in range(schedulers)]
    trace.lanes = cores
    for (i, stage), (core, start, end, active) in sorted(record.stages.items(), key=lambda kv: kv[1][1]):
        inst = instances[i]
        name, ident = (inst.label, i) if stage is None else (f"{inst.label} {stage}", -1)
        trace.events.append(Event(name, inst.coords, core, options.workers[core], start, end,
                                  inst.bytes, inst.flops, ident, active))
    for row, spans in sorted(record.aicpu.items()):
        name = "orchestrate" if row == cores else "schedule"
        trace.events.extend(Event(name, (), row, "aicpu", start, end) for start, end in spans)
    trace.waits.extend(Wait(cores, "window", "task window", s, e) for s, e in window_waits)
    trace.deps = Edges(sched.preds, list(sched.done))
    trace.statistics["window"] = {"capacity": sched.window, "peak": sched.peak, "waits": len(window_waits)}


