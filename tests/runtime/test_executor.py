"""The real-clock executor on synthetic task tables: dependencies, policies, prefetch, window, faults."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute
from ptowsp.runtime.engines import RealEngine, current


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
    table = TaskTable(tiles("T", 8))

    def slow_first(inst):
        time.sleep(0.3 if inst.coords == (0,) else 0.01)

    rr = by_task(run(table, Launch(table, action=slow_first), policy="round_robin"))
    assert [rr["T", (t,)].worker for t in range(8)] == [0, 1] * 4
    assert rr["T", (4,)].start >= rr["T", (0,)].end  # queued behind the slow task on worker 0



def test_work_stealing_spreads_what_one_worker_made_ready():
    # P's eight consumers all become ready on the worker that ran P; the idle one steals
    table = TaskTable([Instance("P", (), (), (("P", ((0, 8),)),))] + tiles("C", 8, reads="P"))
    launch = Launch(table, {"C": 0.02})
    events = by_task(run(table, launch, policy="work_stealing"))
    maker = events["P", ()].worker
    thief = [t for t in range(8) if events["C", (t,)].worker != maker]
    assert len(thief) >= 2
    assert launch.peak == 2  # consumers ran on both workers at once (a wall-clock bound broke in a VM stall)


def test_an_idle_worker_takes_a_busy_worker_s_pending_task():
    """Eight equal tiles on two workers run four and four: the last tile does not wait in the pending
    slot of a worker that took it a moment before the other one came back for work."""
    for _ in range(3):
        table = TaskTable([Instance("P", (), (), (("P", ((0, 8),)),))] + tiles("C", 8, reads="P"))
        events = by_task(run(table, Launch(table, {"C": 0.01}), policy="work_stealing"))
        ran = [events["C", (t,)].worker for t in range(8)]
        assert sorted(ran.count(w) for w in (0, 1)) == [4, 4], ran


def test_affinity_keys_on_grid_coordinates():
    table = TaskTable([Instance("T", (i, j), (), (("T", ((i, i + 1), (j, j + 1))),), grid=("i", "j"))
                       for i in range(4) for j in range(4)])
    events = by_task(run(table, policy=pw.dispatch.affinity("i")))
    for (_, (i, _j)), e in events.items():
        assert e.worker == i % 2


def test_locality_keeps_a_chain_on_the_worker_that_ran_its_producers():
    chains = []
    for c in range(2):
        chains += [Instance(f"c{c}", (k,), ((f"c{c}", ((k - 1, k),)),) if k else (), ((f"c{c}", ((k, k + 1),)),))
                   for k in range(10)]
    table = TaskTable(chains)
    launch = Launch(table, {"c0": 0.005, "c1": 0.005})
    events = by_task(run(table, launch, policy="locality"))
    for c in range(2):
        assert len({events[f"c{c}", (k,)].worker for k in range(10)}) == 1


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
    trace = run(table, Launch(table, {"T": 0.001}), window=4)
    window = trace.statistics["window"]
    assert window["capacity"] == 4 and window["peak"] == 4
    assert window["waits"] > 0  # the orchestrator blocked on a full window
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

    trace = run(table, Launch(table, {"T": 0.0002}, action=where), window=64)
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
    trace = run(table, Launch(table, {"A": 0.01, "B": 0.01, "C": 0.01}))
    causes = trace.statistics["idle"]
    assert set(causes) == {"dependencies", "dispatch", "starvation"}
    busy = sum(e.end - e.start for e in trace.events)
    assert sum(causes.values()) == pytest.approx(2 * trace.duration - busy, rel=1e-6)
    assert causes["dependencies"] > 0.02  # the other worker waited through about two of the three tasks
    assert "dependencies" in str(trace.summary())


def test_a_failing_task_raises_task_error_and_stops_every_thread():
    table = TaskTable(tiles("T", 200))

    started = []

    def fail_once(inst):  # the fourth task to start fails, whichever order the policy runs them in
        started.append(inst.coords)
        if len(started) == 4:
            raise ZeroDivisionError("division by zero in a tile")

    launch = Launch(table, {"T": 0.05}, action=fail_once)
    start = time.perf_counter()
    with pytest.raises(pw.TaskError, match=r"task 'T' at grid coordinates \(\d+,\) failed: ZeroDivisionError") as info:
        run(table, launch)
    assert f"coordinates {started[3]} failed" in str(info.value)
    assert time.perf_counter() - start < 1.0
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert launch.in_flight == 0  # no worker still running a task


def test_timeout_cancels_the_run():
    table = TaskTable(tiles("T", 100))
    launch = Launch(table, {"T": 0.05})
    start = time.perf_counter()
    with pytest.raises(pw.RunTimeout, match="within 0.2 s"):
        run(table, launch, timeout=0.2)
    assert time.perf_counter() - start < 1.0 and launch.in_flight == 0


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler, whatever this process inherited: a shell starts background
    jobs with SIGINT ignored, and Python then installs no handler (Ctrl-C would do nothing)."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def _signal_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does


def _lose_ctrl_c():
    """A KeyboardInterrupt lost on the way (raised inside a finalizer, say): the run must stop anyway."""
    try:
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass


@pytest.mark.parametrize("interrupt", [_signal_ctrl_c, _lose_ctrl_c], ids=["signal", "lost"])
def test_ctrl_c_cancels_cleanly(ctrl_c, interrupt):
    table = TaskTable(tiles("T", 100))
    started = []

    def on_start(inst):
        started.append(inst.coords)
        if len(started) == 3:
            interrupt()

    launch = Launch(table, {"T": 0.05}, action=on_start)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run(table, launch)
    assert time.perf_counter() - start < 1.0 and launch.in_flight == 0


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
    trace = run(table, Launch(table, {"P": 0.001, "C": 0.001}))
    summary = trace.summary()
    assert summary.tasks == 100 and set(summary.busy) == {"worker0", "worker1"}
    assert 0.002 <= summary.critical_path <= summary.makespan
    assert 0 < summary.busy["worker0"] <= 1 and summary.overhead >= 0
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
