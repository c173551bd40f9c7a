"""The real-clock executor on synthetic task tables: dependencies, policies, prefetch, window, faults.

The tests control the interleavings they check instead of sleeping and hoping: tasks meet at barriers
(two tasks that meet run at once, so on two workers), wait on events other tasks set, or wait until
the run's own state says what they wait for (the other worker parked, the run stopped).  Every such
wait gives up after WAIT_LIMIT seconds, so a broken runtime fails a test instead of hanging it.  A
task that sleeps does so only where the sleep's length is a lower bound the test relies on.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute, watchdog
from ptowsp.runtime.engines import RealEngine, current

WAIT_LIMIT = 10.0  # seconds a test's wait for an interleaving lasts at most: then the runtime is broken


class Launch:
    """Sleeps `seconds[name]` per instance (or calls `action`), counting instances in flight."""

    load = store = None

    def __init__(self, table, seconds=None, action=None):
        self.table, self.seconds, self.action = table, seconds or {}, action
        self.in_flight = self.peak = 0  # instances computing now, and at most at once
        self.lock = threading.Lock()

    def compute(self, i):
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            inst = self.table.instances[i]
            if self.action is not None:
                self.action(inst)
            time.sleep(self.seconds.get(inst.name, 0.0))
        finally:
            with self.lock:
                self.in_flight -= 1


class Pairs:
    """A task action: the tasks `meets` picks meet two by two in the order they start (the first
    `limit` of them; None: all).  The first of a pair waits at a barrier for the second, so the two
    run at once, on different workers; a barrier that waits WAIT_LIMIT seconds breaks, and the task
    fails with BrokenBarrierError (a worker that could not get the task it needed)."""

    def __init__(self, meets=lambda inst: True, limit=None):
        self.meets, self.limit = meets, limit
        self.started = 0
        self.barriers: dict[int, threading.Barrier] = {}
        self.lock = threading.Lock()

    def __call__(self, inst) -> int | None:
        """Meet, if inst is one of the tasks that meet; their number in start order (from 0)."""
        if not self.meets(inst):
            return None
        with self.lock:
            k, self.started = self.started, self.started + 1
            if self.limit is not None and k >= self.limit:
                return k
            barrier = self.barriers.setdefault(k // 2, threading.Barrier(2, timeout=WAIT_LIMIT))
        barrier.wait()
        return k


def until(condition) -> bool:
    """Poll `condition` until it holds (True), or for WAIT_LIMIT seconds (False).  For task code that
    waits for what the run's own state shows, which no event announces."""
    deadline = time.monotonic() + WAIT_LIMIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(1e-4)
    return True


def this_run():
    """The scheduler of the run whose task code calls this: its flags say whether the run was told
    to stop (`stopped`) and whether Ctrl-C came (`interrupted`)."""
    engine, _ = current()
    return engine.sched


def other_worker_parked():
    """For task code: a test that the other worker's process is parked on its doorbell (nothing to
    run).  Its parked stretch, as the trace records it, began before it parked."""
    engine, me = current()
    other = next(p for p in engine.procs if p.name.startswith("worker") and p is not me)
    return lambda: other.waits_on is not None


def tiles(name, count, reads=None, core=None, grid=("t",)):
    """`count` instances of task `name`, tile t writing [t, t+1) of tensor name and reading that of `reads`."""
    return [Instance(name, (t,), ((reads, ((t, t + 1),)),) if reads else (), ((name, ((t, t + 1),)),), core, grid)
            for t in range(count)]


def run(table, launch=None, **options):
    options.setdefault("workers", (None, None))
    return execute(table, launch or Launch(table), Options(**options))


def by_task(trace):
    return {(e.name, e.coords): e for e in trace.events if e.id >= 0}


def test_a_consumer_tile_starts_before_its_producer_operator_finishes():
    table = TaskTable(tiles("P", 4) + tiles("C", 4, reads="P"))
    assert table.predecessors[4:] == ((0,), (1,), (2,), (3,))  # tile t of C needs tile t of P only
    consumer_started = threading.Event()

    def action(inst):  # P's last tile finishes only once C's first has started (or after 10 s: then it fails)
        if inst.name == "C" and inst.coords == (0,):
            consumer_started.set()
        if inst.name == "P" and inst.coords == (3,):
            consumer_started.wait(timeout=10.0)

    trace = run(table, Launch(table, action=action), policy="work_stealing")
    events = by_task(trace)
    producer_done = max(events["P", (t,)].end for t in range(4))
    assert events["C", (0,)].start < producer_done  # tile-level pipelining, no operator barrier
    for t in range(4):
        assert events["C", (t,)].start >= events["P", (t,)].end  # but never before its own producer
    assert sorted(trace.deps) == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_round_robin_deals_tasks_in_turn():
    """Task 0 holds worker 0 until worker 1, done with its own tasks, has parked: round robin gives
    it none of the tasks queued on worker 0."""
    table = TaskTable(tiles("T", 8))

    def hold_first(inst):
        if inst.coords == (0,):
            assert until(other_worker_parked()), "worker 1 never parked"

    rr = by_task(run(table, Launch(table, action=hold_first), policy="round_robin"))
    assert [rr["T", (t,)].worker for t in range(8)] == [0, 1] * 4
    assert max(rr["T", (t,)].end for t in (1, 3, 5, 7)) <= rr["T", (0,)].end  # worker 1 was done meanwhile
    assert rr["T", (4,)].start >= rr["T", (0,)].end  # queued behind the held task on worker 0


def test_work_stealing_spreads_what_one_worker_made_ready():
    # P's eight consumers all become ready on the worker that ran P.  The first two to start meet, so
    # they run at once: the idle worker must have stolen one (else the meeting breaks and the run fails)
    table = TaskTable([Instance("P", (), (), (("P", ((0, 8),)),))] + tiles("C", 8, reads="P"))
    launch = Launch(table, action=Pairs(lambda inst: inst.name == "C", limit=2))
    events = by_task(run(table, launch, policy="work_stealing"))
    maker = events["P", ()].worker
    assert any(events["C", (t,)].worker != maker for t in range(8))
    assert launch.peak == 2  # consumers ran on both workers at once


def test_an_idle_worker_takes_a_busy_worker_s_pending_task():
    """Eight tiles on two workers run four and four: the consumers meet two by two as they start,
    so each pair needs both workers.  After each meeting but the last, the worker that ran P (all
    eight are on its queue) looks for work first: it takes a tile to run and one into its pending
    slot.  So with two tiles left, the other worker finds the queue empty and must take the tile
    in that pending slot, or the last meeting breaks."""
    table = TaskTable([Instance("P", (), (), (("P", ((0, 8),)),))] + tiles("C", 8, reads="P"))
    pairs = Pairs(lambda inst: inst.name == "C")
    maker = []

    def action(inst):
        if inst.name == "P":
            maker.append(threading.current_thread())
            return
        k = pairs(inst)
        if threading.current_thread() is not maker[0] and k < 6:  # until the maker has started the next pair
            assert until(lambda: pairs.started > k // 2 * 2 + 2), "the maker never started another tile"

    events = by_task(run(table, Launch(table, action=action), policy="work_stealing"))
    ran = [events["C", (t,)].worker for t in range(8)]
    assert sorted(ran.count(w) for w in (0, 1)) == [4, 4], ran


def test_affinity_keys_on_grid_coordinates():
    table = TaskTable([Instance("T", (i, j), (), (("T", ((i, i + 1), (j, j + 1))),), grid=("i", "j"))
                       for i in range(4) for j in range(4)])
    events = by_task(run(table, policy=pw.dispatch.affinity("i")))
    for (_, (i, _j)), e in events.items():
        assert e.worker == i % 2


def test_locality_keeps_a_chain_on_the_worker_that_ran_its_producers():
    """The chains' first tasks meet, so each chain starts on a worker of its own, and each stays
    there, although the other worker, idle, could steal."""
    chains = []
    for c in range(2):
        chains += [Instance(f"c{c}", (k,), ((f"c{c}", ((k - 1, k),)),) if k else (), ((f"c{c}", ((k, k + 1),)),))
                   for k in range(10)]
    table = TaskTable(chains)
    events = by_task(run(table, Launch(table, action=Pairs(limit=2)), policy="locality"))
    ran = [{events[f"c{c}", (k,)].worker for k in range(10)} for c in range(2)]
    assert len(ran[0]) == len(ran[1]) == 1 and ran[0] != ran[1]


def test_bound_tasks_run_only_on_workers_of_their_core_class():
    table = TaskTable(tiles("M", 6, core="cube") + tiles("V", 6, reads="M", core="vector"))
    trace = run(table, workers=("cube", "vector"), policy="work_stealing")
    assert trace.workers[:2] == [("worker0", "cube"), ("worker1", "vector")]
    assert {e.worker for e in trace.events if e.name == "M"} == {0}
    assert {e.worker for e in trace.events if e.name == "V"} == {1}
    with pytest.raises(pw.BuildError, match="task 'M' is bound to core class 'cube', but no worker has it"):
        run(table, workers=("vector", "vector"))


@pytest.mark.parametrize("policy", ["work_stealing", "round_robin", "locality", pw.dispatch.affinity("t")])
def test_a_single_instance_runs_on_the_caller_alone(policy):
    """No pool thread is woken for a table of one instance, whatever the policy would have picked."""
    table = TaskTable(tiles("A", 1))
    seen = []
    trace = run(table, Launch(table, action=lambda inst: seen.append(threading.current_thread())), policy=policy)
    assert seen == [threading.current_thread()] and [e.worker for e in trace.events] == [0]


def test_a_single_instance_bound_to_another_core_class_still_runs():
    table = TaskTable(tiles("M", 1, core="cube"))
    trace = run(table, workers=("vector", "cube"))
    assert [(e.name, e.worker) for e in trace.events] == [("M", 1)]


def test_prefetch_tokens_let_loads_run_at_most_n_tasks_ahead():
    table = TaskTable(tiles("T", 20))
    log: dict[str, list] = {}

    class Staged(Launch):
        def _log(self, stage, i):
            log.setdefault(threading.current_thread().name, []).append((stage, i))

        def load(self, i):
            self._log("load", i)

        def compute(self, i):
            self._log("compute", i)

        def store(self, i):
            self._log("store", i)

    trace = run(table, Staged(table), prefetch=3)
    assert sum(len(v) for v in log.values()) == 60
    for entries in log.values():
        loads = computes = 0
        seen = {}
        for stage, i in entries:
            seen.setdefault(i, []).append(stage)
            if stage == "load":
                loads += 1
            elif stage == "compute":
                computes += 1
                assert loads - computes <= 3  # n credits: at most n prefetched beyond the one computing
        assert all(stages == ["load", "compute", "store"] for stages in seen.values())
    queues = {name: q for name, q in trace.statistics.items() if name.startswith(("free", "loaded", "computed"))}
    assert len(queues) == 6  # three queues per worker
    for name, q in queues.items():
        assert q.pushes == q.pops and q.tokens == q.credits == (3 if name.startswith("free") else 0)
        if name.startswith("free"):
            assert q.max_tokens == 3
    assert sum(1 for e in trace.events if e.name == "T load") == 20


def test_the_task_window_bounds_admission():
    table = TaskTable(tiles("T", 60))
    trace = run(table, window=4)
    window = trace.statistics["window"]
    assert window["capacity"] == 4 and window["peak"] == 4
    # the first batch fills the window before the workers start: every later admission waited for it
    assert window["waits"] > 0
    assert any(w.kind == "window" for w in trace.waits)
    assert len(trace.events) == 60


def test_workers_are_csp_processes_each_pinned_to_one_thread():
    """The executor is a run of pw.csp processes on the real engine: task code runs inside worker
    processes, worker 0 on the caller's thread and each other worker on one thread of its own."""
    table = TaskTable(tiles("T", 300))  # more than one admission batch: the orchestrator process admits the rest
    seen = set()

    def where(inst):
        engine, proc = current()
        seen.add((isinstance(engine, RealEngine), proc.name, threading.current_thread()))

    pairs = Pairs(limit=2)  # the first two tasks meet: worker 1 certainly runs task code

    def where_and_meet(inst):
        where(inst)
        pairs(inst)

    trace = run(table, Launch(table, action=where_and_meet), window=64)
    assert {real for real, _, _ in seen} == {True}
    threads = {}
    for _, name, thread in seen:
        threads.setdefault(name, set()).add(thread)
    assert set(threads) == {"worker0", "worker1"}
    assert threads["worker0"] == {threading.current_thread()} and len(threads["worker1"]) == 1
    assert threads["worker1"] != threads["worker0"]
    assert trace.statistics["window"]["waits"] > 0 and len(trace.events) == 300


def test_idle_worker_time_is_charged_to_a_cause_on_the_real_clock():
    """A chain keeps one of two workers parked on its doorbell: that is waiting for dependencies.
    Every idle instant of every worker gets exactly one cause, and the summary prints them."""
    table = TaskTable(tiles("A", 1) + tiles("B", 1, reads="A") + tiles("C", 1, reads="B"))

    def beside_the_parked(inst):  # B and C each run 10 ms while the other worker is certainly parked
        if inst.name != "A":
            assert until(other_worker_parked()), "the other worker never parked"
            time.sleep(0.01)

    trace = run(table, Launch(table, action=beside_the_parked))
    causes = trace.statistics["idle"]
    assert set(causes) == {"dependencies", "dispatch", "starvation"}
    busy = sum(e.end - e.start for e in trace.events)
    assert sum(causes.values()) == pytest.approx(2 * trace.duration - busy, rel=1e-6)
    assert causes["dependencies"] >= 0.02  # the other worker waited through B's and C's 10 ms at least
    assert "dependencies" in str(trace.summary())


class Starts:
    """Numbers the tasks in the order they start (from 1), whichever order the policy runs them in."""

    def __init__(self):
        self.coords: list[tuple[int, ...]] = []
        self.lock = threading.Lock()

    def __call__(self, inst) -> int:
        with self.lock:
            self.coords.append(inst.coords)
            return len(self.coords)


def test_a_failing_task_raises_task_error_and_stops_every_thread():
    table = TaskTable(tiles("T", 200))
    started = Starts()

    def fail_once(inst):  # the fourth task to start fails; a task started after it ends once the run stops
        k, sched = started(inst), this_run()
        if k == 4:
            raise ZeroDivisionError("division by zero in a tile")
        if k > 4:
            until(lambda: sched.stopped)

    launch = Launch(table, action=fail_once)
    with pytest.raises(pw.TaskError, match=r"task 'T' at grid coordinates \(\d+,\) failed: ZeroDivisionError") as info:
        run(table, launch)
    assert f"coordinates {started.coords[3]} failed" in str(info.value)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert launch.in_flight == 0  # no worker still running a task
    assert len(started.coords) <= 5  # the other worker started at most one task more, and no worker went on


@pytest.fixture
def patient_watchdog(monkeypatch):
    """A stopped run gets WAIT_LIMIT seconds to unwind before its thread is abandoned (watchdog.GRACE),
    so whether its tasks end within the usual grace on a busy machine cannot flip a test's verdict."""
    monkeypatch.setattr(watchdog, "GRACE", WAIT_LIMIT)


def test_timeout_cancels_the_run(patient_watchdog):
    """Every task runs until the run is stopped: the run can only end by its timeout."""
    table = TaskTable(tiles("T", 100))
    started = Starts()

    def until_stopped(inst):
        started(inst)
        sched = this_run()
        until(lambda: sched.stopped)

    launch = Launch(table, action=until_stopped)
    with pytest.raises(pw.RunTimeout, match=r"did not finish within 0.1 s \([0-2] of 100 task instances done\)"):
        run(table, launch, timeout=0.1)
    assert launch.in_flight == 0 and len(started.coords) <= 2  # the tasks running at the deadline, no more


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler, whatever this process inherited: a shell starts background
    jobs with SIGINT ignored, and Python then installs no handler (Ctrl-C would do nothing)."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def _signal_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does
    time.sleep(WAIT_LIMIT)  # Python raises KeyboardInterrupt in this (the main) thread by this sleep at the latest


def _lose_ctrl_c():
    """A KeyboardInterrupt lost on the way (raised inside a finalizer, say): the run must stop anyway."""
    try:
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass


@pytest.mark.parametrize("interrupt", [_signal_ctrl_c, _lose_ctrl_c], ids=["signal", "lost"])
def test_ctrl_c_cancels_cleanly(ctrl_c, interrupt):
    """Ctrl-C comes in the caller's thread (worker 0), where Python raises KeyboardInterrupt: the first
    task worker 0 starts after two others have started interrupts.  A task worker 1 starts by then
    runs until the run stops."""
    table = TaskTable(tiles("T", 100))
    started, interrupted = Starts(), []

    def on_start(inst):
        k, sched = started(inst), this_run()
        if k < 3:
            return
        if threading.current_thread() is not threading.main_thread():
            until(lambda: sched.stopped)
        elif not interrupted:
            interrupted.append(k)
            interrupt()

    launch = Launch(table, action=on_start)
    with pytest.raises(KeyboardInterrupt):
        run(table, launch)
    assert interrupted and launch.in_flight == 0
    assert len(started.coords) <= 4  # worker 1 started at most one task from the third on, worker 0 none after


def test_chrome_trace_has_one_event_per_task_and_an_arrow_per_dependency(tmp_path):
    table = TaskTable(tiles("P", 5) + tiles("C", 5, reads="P"))
    trace = run(table)
    doc = json.loads(trace.to_chrome(tmp_path / "trace.json").read_text())
    tasks = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "task"]
    assert sorted((e["name"], tuple(e["args"]["coords"])) for e in tasks) == sorted(
        (inst.name, inst.coords) for inst in table.instances)
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads[0] == "worker0" and threads[1] == "worker1"
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    finishes = [e for e in doc["traceEvents"] if e["ph"] == "f"]
    assert len(starts) == len(finishes) == 5 and {e["id"] for e in starts} == {e["id"] for e in finishes}
    for e in doc["traceEvents"]:
        assert e["ph"] == "M" or (e["ts"] >= 0 and isinstance(e["tid"], int))


def test_summary_and_gantt(tmp_path):
    table = TaskTable(tiles("P", 50) + tiles("C", 50, reads="P"))
    # each task sleeps 1 ms at least, and the first two meet: both workers run task code
    trace = run(table, Launch(table, {"P": 0.001, "C": 0.001}, action=Pairs(limit=2)))
    summary = trace.summary()
    assert summary.tasks == 100 and set(summary.busy) == {"worker0", "worker1"}
    assert 0.002 <= summary.critical_path <= summary.makespan  # a P -> C chain of two 1 ms sleeps, at least
    assert 0 < summary.busy["worker0"] <= 1 and 0 < summary.busy["worker1"] <= 1 and summary.overhead >= 0
    assert "makespan" in str(summary) and "critical path" in str(summary)
    png = trace.plot(tmp_path / "gantt.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dependencies_implied_through_another_instance_are_dropped():
    a = Instance("A", (), (), (("a", ((0, 1),)),))
    b = Instance("B", (), (("a", ((0, 1),)),), (("b", ((0, 1),)),))
    c = Instance("C", (), (("a", ((0, 1),)), ("b", ((0, 1),))), (("c", ((0, 1),)),))  # reads A's too
    table = TaskTable([a, b, c])
    assert table.predecessors == ((), (0,), (1,))  # C's wait on A is implied by its wait on B
    order = []
    launch = Launch(table, action=lambda inst: order.append(inst.name))
    run(table, launch, policy="round_robin")
    assert order == ["A", "B", "C"]
