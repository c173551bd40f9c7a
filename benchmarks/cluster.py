"""Tuning on a cluster (issue 33): trials per minute of a 64-trial search of matmul 1024^3 with the
local runner and with dask LocalClusters on this machine, and the per-trial costs that the scaling
estimate of docs/autoschedule.md ("Tuning on a cluster") is made from.

Rows (each search from a cold kernel cache of its own, seed 0, batch 8, programs on 2 threads):

- local: `AutoScheduler.search` with a `Runner` (one measuring process);
- cluster, 1 worker: the same search with a `DaskRunner` on LocalCluster(n_workers=1): what the
  cluster's path costs at the local runner's parallelism;
- cluster, 2 workers: LocalCluster(n_workers=2, threads_per_worker=1): two trials at a time on
  this machine's 2 cores.  Their timings share the cores, so the row is about throughput, not about
  the times it finds (two machines would not share).

Columns: measurements (trials plus the finalists' re-measurements), wall time, trials per minute
(64 trials over the whole search's wall time), the client's time per measurement (wall time not
spent waiting for the runner: cost model, annealing, features, the log, one batch at a time), the
workers' time per measurement (set-up, build, check, timing), and retries.

Then the per-trial costs: build (`pw.build` of 8 random candidates, cold cache), dispatch (a
trial's round trip through the scheduler minus its time on the worker, for a tiny workload whose
timing is a constant, one at a time), and the bytes a trial and a workload send.

    .venv/bin/python benchmarks/cluster.py [--trials 64] [--seed 0] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from contextlib import contextmanager

import cloudpickle
from distributed import Client, LocalCluster

import ptowsp as pw
from ptowsp.autoschedule.dask_runner import DaskRunner
from ptowsp.autoschedule.measure import Runner
from ptowsp.autoschedule.space import Space
from ptowsp.backends import backend
from ptowsp.workloads import zoo

THREADS = 2  # each measured program's worker threads (this machine's cores)
BATCH = 8


@contextmanager
def cold_cache():
    """A kernel cache of its own (the measuring processes inherit the variable when they start)."""
    previous = os.environ.get("PTOWSP_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ptowsp-cluster-bench-") as where:
        os.environ["PTOWSP_CACHE_DIR"] = where
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("PTOWSP_CACHE_DIR")
            else:
                os.environ["PTOWSP_CACHE_DIR"] = previous


def search(wl, runner, trials: int, seed: int):
    return pw.AutoScheduler.search(wl, "cpu", num_trials=trials, seed=seed, runner=runner, batch=BATCH,
                                   workers=THREADS, progress=False)


def row(name: str, res, trials: int, worker_seconds: float, retried: int | str) -> dict:
    measured = len(res.history)
    client = res.wall_seconds - res.measure_seconds
    return {"runner": name, "measured": measured, "wall s": f"{res.wall_seconds:.1f}",
            "trials/min": f"{trials * 60 / res.wall_seconds:.1f}",
            "client ms/meas.": f"{client / measured * 1e3:.0f}",
            "worker s/meas.": f"{worker_seconds / measured:.2f}",
            "retries": retried, "best ms": f"{res.best_seconds * 1e3:.2f}"}


def constant(built, inputs, repeat, min_time, budget) -> float:
    """The dispatch probe's timing: none (the trial still builds and checks its tiny program)."""
    return 1e-3


def dispatch(client) -> tuple[float, float]:
    """Median round trip and median worker time of one tiny trial at a time, in seconds."""
    wl = zoo.matmul(8, 8, 8)
    schedule = wl.schedule()
    with DaskRunner(client, workers=1, evaluate=constant) as runner:
        runner.measure(schedule)  # the worker's Runner starts and sets the workload up
        trips, on_worker = [], []
        for _ in range(30):
            start = time.perf_counter()
            m = runner.measure(schedule)
            trips.append(time.perf_counter() - start)
            on_worker.append(m.elapsed)
    return statistics.median(trips), statistics.median(on_worker)


def build_seconds(wl, seed: int, count: int = 8) -> float:
    """Median `pw.build` time of random candidates of the search's space, each with a cold cache."""
    space = Space(wl, vector_bytes=backend("cpu").vector_bytes, workers=THREADS)
    rng = random.Random(seed)
    times = []
    for _ in range(count):
        schedule, _ = space.reads(space.sample(rng))
        with cold_cache():
            start = time.perf_counter()
            pw.build(schedule, "cpu", workers=THREADS)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(rows: list[dict]) -> str:
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(f"{c:>{widths[c]}}" for c in columns)]
    lines += ["  ".join(f"{r[c]!s:>{widths[c]}}" for c in columns) for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", default="1,2", help="LocalCluster sizes to run, comma-separated")
    args = parser.parse_args()
    wl = backend("cpu").default_workload(zoo.matmul(1024, 1024, 1024))
    rows = []
    with cold_cache(), Runner(wl, "cpu", workers=THREADS) as runner:
        res = search(wl, runner, args.trials, args.seed)
        rows.append(row("local Runner", res, args.trials, res.measure_seconds, "-"))  # it waits for each trial
        print(table(rows), flush=True)
    probe = None
    for n in (int(x) for x in args.workers.split(",")):
        with cold_cache(), LocalCluster(n_workers=n, processes=True, threads_per_worker=1,
                                        dashboard_address=None) as cluster, Client(cluster) as client:
            with DaskRunner(client, workers=THREADS) as runner:
                res = search(wl, runner, args.trials, args.seed)
                stats = runner.statistics()
            rows.append(row(f"LocalCluster, {n} worker{'s' * (n > 1)}", res, args.trials, stats.worker_seconds,
                            stats.retried))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            if probe is None:
                probe = dispatch(client)
    print()
    print(table(rows))
    build = build_seconds(wl, args.seed)
    print(f"\nper trial: build {build * 1e3:.0f} ms (median of 8 random candidates, cold cache)")
    if probe is not None:
        trip, worker = probe
        print(f"dispatch: round trip {trip * 1e3:.1f} ms of which {worker * 1e3:.1f} ms on the worker (a tiny "
              f"trial, cached build): {(trip - worker) * 1e3:.1f} ms client -> scheduler -> worker -> client")
    print(f"bytes: the workload's pickle {len(cloudpickle.dumps(wl))} (once per worker), the best schedule's "
          f"JSON {len(res.schedule.to_json())} (a trial sends one, with the runner's set-up: a few hundred)")


if __name__ == "__main__":
    main()
