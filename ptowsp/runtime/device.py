"""Run a task table on the device clock: AICPU and AICore roles as pw.csp processes (DESIGN.md section 5).

On the device engine (engines.py) time passes only while a process sleeps,
and jumps straight to the next wake-up, so host speed never shows in the
result: every duration comes from the backend's `DeviceCosts`.  Kernels
still compute their real numbers on the host.  The processes talk over
pw.csp channels and token queues only.

- The **orchestrator** (one AICPU thread) generates the instances in table
  order into the task window, `orchestrate_seconds` each (plus
  `record_seconds` when the run is being captured), and waits while the
  window is full.  A replayed run (`Options.orchestration`) launches the
  recorded table once, `replay_seconds`, and its instances enter the window
  as it frees.
- **Scheduler** s (the other AICPU threads) serves cores s, s + S, ...: it
  takes its cores' completion notices (resolving dependency tokens, which
  makes successors ready) and fills their slots, `schedule_seconds` of work
  per task; a dispatched task reaches its core `dispatch_seconds` later.
- A **core** holds `slots` tasks (running + pending; with `prefetch(n)`,
  1 + n); its compute unit takes `switch_seconds` to start each one.  A task streams in blocks (`costs.blocks`): each block is loaded,
  then computed; a tile's output is stored after its last block
  (`costs.stores`).  A load keeps the core's DMA engine busy for its bytes
  and lands `ready` seconds after it was issued (`costs.load`), so the
  engine may issue the next block while one is in flight.  With prefetch 0
  one process runs the stages in sequence.  With prefetch n the core
  is three processes, load, compute and store (the MTE2,
  cube-or-vector and MTE3 units), exchanging tokens: load takes a `free`
  credit per block (1 + n buffers: the one computing and n loaded ahead)
  and passes the block on; compute waits for it to land and hands the
  credit back when it is done with it; store follows compute.  So loads run
  up to n blocks ahead, across task boundaries.
- After its last store a core sends a completion notice; the core's signal
  process delivers it to its scheduler `completion_seconds` later; only then
  does the scheduler count the slot free.

`timeout` bounds a run twice: in device seconds (the model's own deadline)
and in host seconds, so a kernel or opaque task stuck on the host still
ends the run on time (watchdog.py).

A kernel computes its numbers when its first block's compute begins: every
producer has stored by then.  The device engine runs processes woken at the
same instant in the order they asked, so the same program gives the same
trace on any machine, whatever ran before it in the process.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from ptowsp.errors import RunTimeout
from ptowsp.runtime.csp import Channel, DepQueue, Process, now, sleep, sleep_until
from ptowsp.runtime.engines import DeviceEngine
from ptowsp.runtime.doorbell import Doorbell
from ptowsp.runtime.dispatch import TaskTimes, placer
from ptowsp.runtime.scheduler import Launcher, Options, Scheduler
from ptowsp.runtime.idle import Readiness
from ptowsp.runtime.stops import describe, raise_failure
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Edges, Event, Trace, Wait
from ptowsp.runtime.watchdog import bounded

STALL_SECONDS = 3600.0  # device seconds without finishing: a stall in the model, reported, never a hang


class DeviceCosts(Protocol):
    """What a device target tells the runtime: AICPU costs, core slots and each instance's stage times."""

    schedulers: int
    orchestrate_seconds: float  # generating one instance
    record_seconds: float  # recording one instance as it is generated (a capture)
    replay_seconds: float  # launching a recorded table (a replay: no instance is generated)
    schedule_seconds: float
    dispatch_seconds: float
    completion_seconds: float
    switch_seconds: float  # a core's time from taking a task it holds to starting it
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


class _Bells:
    """Stands in for a worker's condition variable: a ready task rings every scheduler."""

    def __init__(self, bells: list[Doorbell]):
        self.bells = bells

    def notify(self) -> None:
        for bell in self.bells:
            bell.ring()

    close = notify  # a scheduler looks again and sees the end


@dataclass
class _Core:
    index: int
    inbox: Channel  # (instance, arrival time), from the core's scheduler
    notices: Channel  # (instance, when its last store ended), to the completion-signal process
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


class _CountingScheduler(Scheduler):
    """The scheduler's state, also counting the ready tasks queued per core class (for runtime/idle.py)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ready: Counter = Counter()

    def place(self, i: int, maker: int | None) -> None:
        skipped = self.skipped
        super().place(i, maker)
        if self.skipped == skipped:  # it joined a ready queue (a skipped one retires, placing its successors)
            self.ready[self.instances[i].core] += 1

    def take(self, w, idle: bool = True) -> int | None:
        i = super().take(w, idle)
        if i is not None:
            self.ready[self.instances[i].core] -= 1
        return i


def _modelled_times(table: TaskTable, costs: DeviceCosts) -> TaskTimes:
    """Each kernel's mean compute time on the device model: what heft places by on this clock."""
    totals: dict[str, list[float]] = {}
    for i, inst in enumerate(table.instances):
        seconds = costs.switch_seconds + sum(costs.compute(i, b) for b in range(costs.blocks(i)))
        totals.setdefault(inst.label, []).append(seconds)
    times = TaskTimes()
    times.seconds = {(label, None): sum(spans) / len(spans) for label, spans in totals.items()}
    return times


def execute_device(table: TaskTable, launcher: Launcher, options: Options, costs: DeviceCosts) -> Trace:
    """Run every instance of `table` once on the device clock; the Trace is in device seconds."""
    cores = [_Core(k, Channel(math.inf, f"inbox{k}"), Channel(math.inf, f"completions{k}"))
             for k in range(len(options.workers))]
    bells = [Doorbell(f"scheduler{s}") for s in range(costs.schedulers)]
    heft = getattr(options.policy, "policy", options.policy) == "heft"
    times = _modelled_times(table, costs) if heft else None
    sched = _CountingScheduler(table, options, placer(options.policy, times, options.workers), now,
                               wakeup=lambda index: _Bells(bells))
    for w in sched.workers:
        w.idle = True  # every placement rings the schedulers (and the last completion, all of them)
    record, window_bell = _Recorder(), Doorbell("task window")
    window_waits: list[tuple[float, float]] = []
    notices: list[deque] = [deque() for _ in range(costs.schedulers)]
    n = len(table.instances)
    slots = max(costs.slots, 1 + options.prefetch)
    orchestrator_row, scheduler_rows = len(cores), len(cores) + 1
    failure: list[tuple[int, BaseException]] = []

    def finished() -> bool:
        return sched.completed == n or bool(failure)

    readiness = Readiness(sorted({inst.core for inst in table.instances}, key=str))
    generating = [n > 0]  # the orchestrator is still generating instances (not waiting on the window)

    def sample() -> None:
        readiness.sample(now(), generating[0], sched.ready)

    replaying, masked = options.orchestration == "replay", table.skipped
    per_instance = costs.orchestrate_seconds + (costs.record_seconds if options.orchestration == "record" else 0.0)

    async def orchestrator() -> None:
        sample()  # the state from time 0: nothing ready yet
        if replaying and n:  # the recorded table is launched once; its instances enter as the window lets them
            start = now()
            await sleep(costs.replay_seconds)
            record.busy(orchestrator_row, start, now())
        for i in range(n):
            while sched.free == 0:
                start = now()
                generating[0] = False
                sample()
                await window_bell.wait()
                generating[0] = True
                window_waits.append((start, now()))
            if not replaying and not (masked is not None and masked[i]):  # one left out before the run: not generated
                start = now()
                await sleep(per_instance)
                record.busy(orchestrator_row, start, now())
            sched.admit(i)
            sample()
        generating[0] = False
        sample()

    idle = Counter(options.workers)  # cores holding no task, per core class

    def hold(core: _Core, change: int) -> None:
        """Count a task more (+1) or less (-1) on core; the last idle core of a class becoming busy
        lets every scheduler fill pending slots again."""
        kind, before = options.workers[core.index], core.held
        core.held += change
        if before == 0 and core.held:
            idle[kind] -= 1
            if not idle[kind]:
                for bell in bells:
                    bell.ring()
        elif before and not core.held:
            idle[kind] += 1

    async def scheduler(s: int) -> None:
        mine = cores[s::costs.schedulers]
        turn = 0
        while not finished():
            while notices[s]:
                i, core = notices[s].popleft()
                hold(core, -1)
                sched.retire(i, core.index)
                window_bell.ring()
                sample()
            picked = None
            for k in range(len(mine)):
                core = mine[(turn + k) % len(mine)]
                # an idle core takes (or steals) a task; a busy one fills a pending slot from its own queue,
                # and only while no core of its class is idle (which would start that task sooner)
                if core.held == 0 or (core.held < slots and not idle[options.workers[core.index]]):
                    i = sched.take(sched.workers[core.index], idle=core.held == 0)
                    if i is not None:
                        picked, turn = (core, i), (turn + k + 1) % len(mine)
                        break
            if picked is None:
                if not finished() and not notices[s]:
                    await bells[s].wait()
                continue
            core, i = picked
            sample()
            hold(core, +1)
            start = now()
            await sleep(costs.schedule_seconds)
            record.busy(scheduler_rows + s, start, now())
            await core.inbox.send((i, now() + costs.dispatch_seconds))
        for core in mine:
            core.inbox.close()

    async def arrivals(core: _Core) -> AsyncIterator[int]:
        """The tasks dispatched to `core`, each once it has arrived; ends with the run."""
        async for i, at in core.inbox:
            await sleep_until(at)
            yield i

    async def timed(i: int, stage: str | None, core: _Core, seconds: float) -> None:
        start = now()
        await sleep(seconds)
        record.stage(i, stage, core.index, start, now())

    async def compute(i: int, block: int, core: _Core) -> None:
        if block == 0:
            await sleep(costs.switch_seconds)  # the compute unit switches to the task (its loads may be in)
            running[:] = [(i, core.index)]
            try:
                launcher.compute(i)
            except BaseException as e:  # noqa: BLE001 - task code failed: stop the run, report it
                failure.append((i, e))
                raise _Failed from None
            finally:
                running.clear()
        await timed(i, None, core, costs.compute(i, block))

    def issue(i: int, block: int, core: _Core) -> tuple[float, float]:
        """Issue one block's load now: (when the DMA engine is free again, when the block has arrived)."""
        start = now()
        busy, ready = costs.load(i, block, start)
        record.stage(i, "load", core.index, start, start + ready)
        return start + busy, start + ready

    async def load(i: int, block: int, core: _Core) -> float:
        """Issue one block's load; returns when the DMA engine is free again, with the block's arrival time."""
        free, arrived = issue(i, block, core)
        await sleep_until(free)
        return arrived

    async def store(i: int, block: int, core: _Core) -> None:
        await timed(i, "store", core, costs.store(i, block, now()))
        if block == costs.blocks(i) - 1:
            await core.notices.send((i, now()))

    async def completion_signal(core: _Core) -> None:
        """The core's completion notices, each reaching its scheduler `completion_seconds` after it was sent."""
        s = core.index % costs.schedulers
        async for i, sent in core.notices:
            await sleep_until(sent + costs.completion_seconds)
            notices[s].append((i, core))
            bells[s].ring()

    async def serial_core(core: _Core) -> None:
        try:
            async for i in arrivals(core):
                for block in range(costs.blocks(i)):
                    # nothing else on this core moves until the block is in: one wait, not the DMA's then the data's
                    await sleep_until(issue(i, block, core)[1])
                    await compute(i, block, core)
                    if costs.stores(i, block):
                        await store(i, block, core)
        finally:
            core.notices.close()

    def pipelined_core(core: _Core) -> list[Process]:
        """Load, compute and store (the MTE2, cube-or-vector and MTE3 units) exchanging tokens."""
        free = DepQueue(f"free@core{core.index}", credits=1 + options.prefetch)
        loaded = Channel(math.inf, f"loaded@core{core.index}")
        computed = Channel(math.inf, f"computed@core{core.index}")

        async def load_stage() -> None:
            with loaded:
                async for i in arrivals(core):
                    for block in range(costs.blocks(i)):
                        await free.pop_dep()  # WAR: a prefetch buffer must be free
                        await loaded.send((i, block, await load(i, block, core)))

        async def compute_stage() -> None:
            with computed:
                async for i, block, landed in loaded:
                    await sleep_until(landed)  # RAW: compute may use the block once it has landed
                    await compute(i, block, core)
                    free.push_dep()
                    if costs.stores(i, block):
                        await computed.send((i, block))

        async def store_stage() -> None:
            with core.notices:
                async for i, block in computed:
                    await store(i, block, core)

        return [Process(load_stage, name=f"load{core.index}"), Process(compute_stage, name=f"compute{core.index}"),
                Process(store_stage, name=f"store{core.index}")]

    processes = [Process(orchestrator, name="orchestrator")]
    processes += [Process(scheduler, (s,), name=f"scheduler{s}") for s in range(costs.schedulers)]
    for core in cores:
        processes.append(Process(completion_signal, (core,), name=f"signal{core.index}"))
        processes += pipelined_core(core) if options.prefetch else [Process(serial_core, (core,),
                                                                            name=f"core{core.index}")]
    engine = DeviceEngine()
    limit = options.timeout or STALL_SECONDS

    def run() -> Trace:
        engine.run([(p.name, p.role, p.fn(*p.args), None) for p in processes], limit)
        if failure:
            raise_failure(table, failure[0])
        if engine.failure is not None:
            done = f"{sched.completed} of {n} task instances done, device clock at {engine.now():g} s"
            if engine.timed_out:
                raise RunTimeout(f"the device run did not finish within {limit:g} device seconds ({done})")
            if isinstance(engine.failure, RunTimeout):  # the watchdog's stop: host time ran out
                raise RunTimeout(f"{engine.failure} of host time ({done})")
            raise engine.failure
        trace.duration = engine.now()
        _fill_trace(trace, table, options, record, sched, window_waits, costs.schedulers)
        trace.statistics["idle"] = readiness.causes(trace.events, options.workers, trace.duration)
        return trace

    def stuck() -> list[str]:
        return [f"{describe(table.instances[i])} on core {k}" for i, k in list(running)]

    trace = Trace(title=options.title, clock="device")
    running: list[tuple[int, int]] = []  # (instance, core) whose task code runs on the host now
    # timeout bounds device seconds (the engine's limit) and, against task code stuck in the host, wall seconds
    return bounded(run, options.timeout, engine.stop, stuck, "the device run")


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


