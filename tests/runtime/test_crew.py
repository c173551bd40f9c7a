"""Pool threads that wait for native runs in native code (runtime/crew.py): offers, sleep, withdrawal, standing.

Where a test needs the helper to take part in a run, the run's first task waits for a second to start
(`Stamps(meet=2)`): the two run at once, so the helper certainly ran one.  Waits for a thread's state
poll it for at most WAIT_LIMIT seconds: a broken crew fails a test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest

from ptowsp.runtime import Options, execute
from ptowsp.runtime.crew import LEFT, OFFER, SLEEPING, Seat, supported
from ptowsp.runtime.crew import NAP_NS
from ptowsp.runtime.service import pool

from tests.runtime.test_native import WAIT_LIMIT, Stamps, layered

pytestmark = pytest.mark.skipif(supported() is not None, reason=str(supported()))


def _run(seed: int, workers: int = 2) -> Stamps:
    table = layered(seed)
    launch = Stamps(table, sleep_us=50)
    trace = execute(table, launch, Options(workers=(None,) * workers))
    assert sorted(launch.out) == list(range(len(table)))
    for i, preds in enumerate(table.predecessors):
        assert all(launch.out[p] < launch.out[i] for p in preds)
    assert len(trace.events) == len(table)
    return launch


def test_a_helper_sits_in_native_code_between_runs_and_runs_its_worker():
    for seed in range(5):
        _run(seed)
    with pool().threads(1) as (thread,):
        assert thread.seat.sitting  # still seated after the runs: the next run's offer reaches it there
    trace_workers = {e.worker for e in execute(layered(0), Stamps(layered(0), meet=2),
                                               Options(workers=(None, None))).events}
    assert trace_workers == {0, 1}  # the helper took tasks


def test_a_sleeping_helper_is_woken_by_the_next_offer():
    _run(0)
    with pool().threads(1) as (thread,):
        box = thread.seat.box
        deadline = time.monotonic() + WAIT_LIMIT  # NAPPING_NS after its last run it sleeps on its futex
        while not box[SLEEPING] and time.monotonic() < deadline:
            time.sleep(NAP_NS * 1e-9)
        assert box[SLEEPING] == 1
    launch = Stamps(layered(1), meet=2)
    trace = execute(layered(1), launch, Options(workers=(None, None)))
    assert {e.worker for e in trace.events} == {0, 1}  # the offer woke it, and it ran a task


def test_an_offer_nobody_claims_is_withdrawn():
    seat = Seat()
    seat.offer(lambda fn: None, buffer=0, w=1)  # a "thread" that never runs the serve function
    assert seat.box[OFFER] == seat.seq
    assert seat.withdraw() is True
    assert seat.box[OFFER] == 0
    assert seat.withdraw() is False  # nothing left to take back


def test_a_sitting_thread_stands_to_run_python_and_sits_again():
    _run(2)
    ran = threading.Event()
    with pool().threads(1) as (thread,):
        left = int(thread.seat.box[LEFT])
        thread.start(ran.set)  # back to Python first
        assert ran.wait(WAIT_LIMIT)
        assert thread.seat.box[LEFT] == left + 1
        assert not thread.seat.sitting
    _run(3)  # the next native run seats it again
    with pool().threads(1) as (thread,):
        assert thread.seat.sitting

