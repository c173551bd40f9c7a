"""Tuning on a dask cluster (a 2-worker LocalCluster, one per process): the same search as on one
machine, no record lost to a dead worker or a lost try, trials only on workers with the resources
asked, resume from the log, whole-model tuning, and `ptowsp tune --cluster`."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from distributed import Client, LocalCluster

import ptowsp as pw
from ptowsp.autoschedule import dask_runner, records
from ptowsp.autoschedule.dask_runner import CONNECT_GRACE, DaskRunner
from ptowsp.autoschedule.measure import Runner
from ptowsp.autoschedule.space import Space
from ptowsp.cli import main
from ptowsp.workloads import zoo
from tests.autoschedule.faults import (
    crash_on_first_worker,
    freeze_worker_once,
    kill_worker_once,
    made_up_cost,
)


def _matmul():
    return zoo.matmul(32, 32, 64)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c:
        yield c


@pytest.fixture
def client(cluster):
    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=60)  # a worker killed by an earlier test is back
        yield c


def _search(runner, log=None, num_trials=10, seed=3, **options):
    return pw.AutoScheduler.search(_matmul(), "cpu", num_trials=num_trials, seed=seed, runner=runner, batch=4,
                                   workers=2, log_file=log, **options)


@pytest.fixture(scope="module")
def local():
    """The search on one machine, with the made-up (deterministic) cost."""
    with Runner(_matmul(), "cpu", workers=2, evaluate=made_up_cost) as runner:
        return _search(runner)


def test_a_cluster_search_makes_the_choices_of_a_local_one(client, local, tmp_path):
    log = tmp_path / "tune.jsonl"
    with DaskRunner(client, workers=2, evaluate=made_up_cost) as runner:
        res = _search(runner, log)
        stats = runner.statistics()
    assert [r.steps for r in res.history] == [r.steps for r in local.history]
    assert res.schedule == local.schedule and res.best_seconds == local.best_seconds
    assert len(stats.by_worker) == 2 and sum(stats.by_worker.values()) == len(res.history) == stats.trials
    assert stats.retried == 0 and stats.worker_seconds > 0
    logged = records.load(log)  # in the order results arrived; each trial once, numbered in batch order
    assert sorted(r.trial for r in logged) == list(range(len(res.history)))
    assert sorted(logged, key=lambda r: r.trial) == res.history


def test_a_worker_killed_mid_search_loses_no_record(client, local, tmp_path):
    log, marker = tmp_path / "tune.jsonl", tmp_path / "killed"
    evaluate = functools.partial(kill_worker_once, marker=str(marker))
    with DaskRunner(client, workers=2, evaluate=evaluate) as runner:
        res = _search(runner, log)
    assert marker.exists()  # a worker was killed during its trial; the scheduler moved the trial
    assert all(r.seconds is not None for r in res.history)
    assert [r.steps for r in res.history] == [r.steps for r in local.history]
    assert len(records.load(log)) == len(res.history)


def test_a_lost_try_is_tried_once_more_on_another_worker(client, tmp_path):
    wl = _matmul()
    space = Space(wl, vector_bytes=32, workers=2)
    only_prefetch = {name: [k.default] for name, k in space.knobs.items() if name != "prefetch"}
    evaluate = functools.partial(crash_on_first_worker, marker=str(tmp_path / "first"))
    log = tmp_path / "tune.jsonl"
    with DaskRunner(client, workers=2, evaluate=evaluate) as runner:
        res = _search(runner, log, num_trials=3, confirm=0, space={**only_prefetch, "prefetch": [0, 1, 2]})
        stats = runner.statistics()
    errors = {r.knobs["prefetch"]: r.error for r in res.history}
    assert errors[0] is None and errors[2] is None  # prefetch 2 crashed on one worker, measured on the other
    assert errors[1].startswith("crash: the measuring process died (signal SIGSEGV) (on a second worker")
    assert stats.retried == 2 and stats.failed_twice == 1 and stats.attempts == 5
    assert [r.error for r in records.load(log)].count(None) == 2


def test_a_worker_frozen_before_the_search_is_set_aside(monkeypatch, tmp_path):
    """A worker stopped with SIGSTOP holds the workload's scatter to it for ever, and the scheduler would
    wait minutes to drop it: past the scatter's deadline (2 x 1 s + 3 s here; 2 x timeout + 10 s by
    default) the runner asks each worker to answer, sets the silent one aside and sends the workload
    with each try to the others."""
    monkeypatch.setattr(dask_runner, "SCATTER_GRACE", 3.0)
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        frozen, pid = sorted(client.run(os.getpid).items())[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with DaskRunner(client, workers=2, timeout=1.0, evaluate=made_up_cost) as runner:
                res = _search(runner, tmp_path / "tune.jsonl", num_trials=6)
                stats = runner.statistics()
            took = time.monotonic() - start
        finally:
            os.kill(pid, signal.SIGCONT)
    assert len(res.history) >= 6 and all(r.seconds is not None for r in res.history), res.history
    assert stats.by_worker and frozen not in stats.by_worker, stats
    assert took < 45, took  # the scheduler drops a silent worker after 5 minutes (its worker-ttl)


def test_a_worker_frozen_mid_trial_has_its_tries_moved_to_the_others(monkeypatch, local, tmp_path):
    """A worker stopped with SIGSTOP during a trial sends no result and no heartbeat; the scheduler would
    keep its tries for 5 minutes (its worker-ttl).  Once it has missed its heartbeats (4 here, at least
    4 s; 20 and 10 s by default) the runner moves its tries to the other worker: every record is there,
    the same as on one machine."""
    monkeypatch.setattr(dask_runner, "SILENT_BEATS", 4)
    monkeypatch.setattr(dask_runner, "SILENT_FLOOR", 4.0)  # (a loaded CI machine's heartbeats come late)
    monkeypatch.setattr(dask_runner, "CHECK_EVERY", 1.0)
    marker = tmp_path / "frozen"
    evaluate = functools.partial(freeze_worker_once, marker=str(marker))
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)

        def resume():
            if marker.exists():
                os.kill(int(marker.read_text()), signal.SIGCONT)

        start = time.monotonic()
        unfreeze = threading.Timer(90, resume)  # should the runner wait for it: a slow failure, not a hang
        unfreeze.start()
        try:
            with DaskRunner(client, workers=2, evaluate=evaluate) as runner:
                res = _search(runner, tmp_path / "tune.jsonl")
            took = time.monotonic() - start
        finally:
            unfreeze.cancel()
            resume()
    assert marker.exists()  # a worker froze during its trial
    assert [r.steps for r in res.history] == [r.steps for r in local.history]
    assert all(r.seconds is not None for r in res.history)
    assert took < 60, took


def test_a_lost_scheduler_is_a_build_error_saying_the_log_resumes():
    """The cluster closed under a runner: the next batch was a raw KeyError from scheduler_info()."""
    cluster = LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0")
    client = Client(cluster, set_as_default=False)
    with DaskRunner(client, workers=1, wait_for_workers=2, evaluate=made_up_cost) as runner:
        assert runner.measure(_matmul().schedule()).seconds is not None
        cluster.close()
        with pytest.raises(pw.BuildError, match="dask scheduler at .* is gone .* same log_file to resume"):
            runner.measure(_matmul().schedule().parallel("C", "i"))
    client.close()


def test_resources_route_trials_only_to_matching_workers(client):
    tagged = min(client.scheduler_info()["workers"])

    async def tag(dask_worker):
        await dask_worker.set_resources(**{"cpu-avx512": 1})

    client.run(tag, workers=[tagged])
    with DaskRunner(client, {"cpu-avx512": 1}, workers=2, evaluate=made_up_cost) as runner:
        _search(runner, num_trials=6)
        assert set(runner.statistics().by_worker) == {tagged}
    with (DaskRunner(client, {"gpu-h100": 1}, evaluate=made_up_cost, wait_for_workers=0) as runner,
          pytest.raises(pw.BuildError, match=r"no worker .* offers the resources \{'gpu-h100': 1\}.*cpu-avx512")):
        _search(runner)


def test_a_cluster_search_resumes_from_its_log(client, tmp_path):
    log = tmp_path / "tune.jsonl"
    with DaskRunner(client, workers=2, evaluate=made_up_cost) as runner:
        first = _search(runner, log, num_trials=5, seed=0)
        again = _search(runner, log, num_trials=9, seed=1)
    assert again.resumed == len(first.history)
    assert len(again.history) - again.confirmations == 9  # 5 from the log, 4 new
    assert len({records.steps_key(r) for r in again.history}) == 9  # nothing from the log measured again
    assert len(records.load(log)) == len(again.history)
    assert pw.autoschedule.best(log, _matmul(), "cpu") == again.schedule


def test_a_whole_model_is_tuned_across_the_cluster_as_on_one_machine(client):
    model = zoo.transformer_block(seq=16, d_model=32, heads=2, d_ff=64)

    def tune(runner):
        return pw.AutoScheduler.search(model, "cpu", num_trials=18, seed=0, runner=runner, batch=3, confirm=1,
                                       split=True, workers=2)

    with Runner(model, "cpu", workers=2, evaluate=made_up_cost) as runner:
        alone = tune(runner)
    with DaskRunner(client, workers=2, evaluate=made_up_cost) as runner:
        spread = tune(runner)
        assert len(runner.statistics().by_worker) == 2
    assert [t.trials for t in spread.tasks] == [t.trials for t in alone.tasks]  # the same allocation
    assert spread.estimates == alone.estimates and spread.schedule == alone.schedule
    assert spread.best_seconds == alone.best_seconds


SCRIPT = """
import numpy as np
import ptowsp as pw
from ptowsp.workloads import zoo
pw.build(zoo.matmul(32, 32, 64), "cpu").run(A=np.ones((32, 64), np.float32), B=np.ones((64, 32), np.float32))
"""


def test_the_tune_command_measures_on_the_cluster(cluster, tmp_path, capsys):
    script, log = tmp_path / "small.py", tmp_path / "tune.jsonl"
    script.write_text(SCRIPT)
    args = ["tune", str(script), "--trials", "3", "--log", str(log), "--workers", "2", "--cluster",
            cluster.scheduler_address]
    assert main([*args, "--resources", "bogus"]) == 2
    assert "--resources 'bogus'" in capsys.readouterr().err
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"measured on the dask cluster at {cluster.scheduler_address}" in out
    assert len({records.steps_key(r) for r in records.load(log)}) == 3


def test_unreachable_scheduler_and_missing_package_are_build_errors(monkeypatch):
    with pytest.raises(pw.BuildError, match="cannot reach the dask scheduler at 'tcp://127.0.0.1:9'"):
        DaskRunner("tcp://127.0.0.1:9", connect_timeout=0.5)
    with pytest.raises(pw.BuildError, match="a scheduler address"):
        DaskRunner(8786)
    with pytest.raises(pw.InputError, match=r"address 'tcp://127.0.0.1' does not parse \(missing port"):
        DaskRunner("tcp://127.0.0.1", connect_timeout=0.5)
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(pw.BuildError, match=r"pip install 'ptowsp\[distributed\]'"):
        DaskRunner("tcp://127.0.0.1:9")


def test_a_scheduler_that_accepts_but_never_answers_is_a_build_error_in_time():
    """A socket that accepts the connection and says nothing held distributed's handshake for ever."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: held.extend(listener.accept() for _ in range(8)), daemon=True).start()
    start = time.monotonic()
    try:
        with pytest.raises(pw.BuildError, match="nothing answered as a dask scheduler"):
            DaskRunner(f"tcp://127.0.0.1:{listener.getsockname()[1]}", connect_timeout=1)
    finally:
        listener.close()
    assert time.monotonic() - start < 1 + CONNECT_GRACE + 5


def test_importing_ptowsp_does_not_import_distributed():
    code = ("import sys, ptowsp as pw; assert 'distributed' not in sys.modules; "
            "assert pw.autoschedule.DaskRunner; assert 'distributed' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=False).returncode == 0
