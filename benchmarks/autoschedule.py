"""The AutoScheduler against hand schedules, numpy and random search, on the cpu target with 2 workers.

Per workload (matmul 1024^3, softmax 4096x1024) and seed, `--trials` each:
the search as a user runs it (XGBoost + simulated annealing, the default
schedule its first trial), and model-guided and random search both starting
from the same random batch (`start_from_default=False`: the default schedule
is handed to neither, so their curves compare search alone).  The three
searches of a seed take turns, one trial each, on one measuring process, so
they meet the machine's slow spells alike.
Then the tuned schedules, the hand schedules of benchmarks/cpu_kernels.py
(run in parallel) and the default schedule `pw.build` picks are timed side
by side with numpy (2 OpenBLAS threads) in this process.

Targets (issue 6): tuned (the user's search) >= 90% of the best hand schedule's speed; matmul
>= 60% of numpy's GFLOP/s; model-guided search reaches random search's
best within <= 32 trials on average; overhead outside measurement <= 20%
of tuning wall time.  Tuning curves go to --plots.

    .venv/bin/python benchmarks/autoschedule.py [--trials 64] [--seeds 3] [--first-seed 0] [--plots DIR]
                                                [--logs DIR]
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "2"  # numpy beside our 2 workers (cpu_kernels would set 1)
os.environ["OMP_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from cpu_kernels import matmul_case, softmax_case  # noqa: E402
from timing import side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.autoschedule.measure import Runner, one_by_one  # noqa: E402
from ptowsp.workloads import matches, random_inputs  # noqa: E402

WORKERS = 2
MIN_BLOCK = 0.3  # seconds per timing block, as the tuner's own measurement (measure.MIN_TIME)


def cases():
    wl, hand, numpy_fn, flops = matmul_case(1024)
    yield "matmul 1024^3", wl, hand.parallel("C", "i.outer.outer"), numpy_fn, flops
    wl, hand, numpy_fn, _ = softmax_case(4096, 1024, blocks=8)
    yield "softmax 4096x1024", wl, hand, numpy_fn, None


class TakeTurns:
    """Searches in threads that take turns on one measuring process, one trial each in turn.

    A search runs (its model, annealing and features too) only while it holds the turn, and hands
    the turn on after each measurement; so the searches' trials alternate in time and a slow spell
    of this shared machine, which can last seconds and make everything 1.5-2x slower, falls on all
    of them alike instead of on whichever search ran then.  One process also means a difference
    between processes (where the arrays landed) favours no search.
    """

    def __init__(self, runner: Runner, players: int):
        self.runner = runner
        self.turn, self.playing = 0, list(range(players))
        self.waited = [0.0] * players  # seconds each search spent waiting for the others, once started
        self.cond = threading.Condition()

    def play(self, n: int, search):
        """Run `search(measurer)` as player n; its measurer's measure() takes turns."""
        self._wait(n)  # not counted: the search's own clock has not started
        try:
            return search(_Seat(self, n))
        finally:
            with self.cond:
                self.playing.remove(n)
                self._hand_on(n)

    def measure(self, n: int, schedule):
        m = self.runner.measure(schedule)
        with self.cond:
            self._hand_on(n)
        self.waited[n] += self._wait(n)
        return m

    def _hand_on(self, n: int) -> None:
        if self.playing:
            later = [p for p in self.playing if p > n]
            self.turn = (later or self.playing)[0]
            self.cond.notify_all()

    def _wait(self, n: int) -> float:
        """Block until it is player n's turn; the seconds that took."""
        start = time.perf_counter()
        with self.cond:
            self.cond.wait_for(lambda: self.turn == n)
        return time.perf_counter() - start


@dataclass
class _Seat:
    """What one search sees as its runner."""

    table: TakeTurns
    n: int

    @property
    def workload(self):
        return self.table.runner.workload

    @property
    def target(self):
        return self.table.runner.target

    def measure(self, schedule):
        return self.table.measure(self.n, schedule)

    def measure_batch(self, schedules):
        return one_by_one(self.measure, schedules)  # each trial takes its turn


def _play(table: TakeTurns, n: int, wl, label: str, seed: int, trials: int, log: Path | None, results: dict):
    res = table.play(n, lambda seat: pw.AutoScheduler.search(
        wl, "cpu", num_trials=trials, cost_model="random" if label == "random" else "xgboost", seed=seed,
        workers=WORKERS, progress=False, start_from_default=label == "tuned", log_file=log, runner=seat))
    res.wall_seconds -= table.waited[n]
    results[label] = res


def tune(wl, trials: int, seeds: range, logs: Path | None):
    """Per seed: the search as a user runs it (model-guided, the default schedule its first trial),
    then model-guided and random search both from the same random batch (no default: search alone),
    taking turns trial by trial (TakeTurns).  With `logs`, each search appends to (and resumes from)
    its own log.  A search's wall time leaves out its waits for the others."""
    labels = ("tuned", "xgboost", "random")
    runs: dict[str, list] = {label: [] for label in labels}
    with Runner(wl, "cpu", workers=WORKERS) as runner:
        for seed in seeds:
            table, results = TakeTurns(runner, len(labels)), {}
            threads = [threading.Thread(target=_play, args=(table, n, wl, label, seed, trials, None if logs is None
                                                            else logs / f"{wl.name}-{label}-{seed}.jsonl", results))
                       for n, label in enumerate(labels)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for label in labels:
                if label not in results:
                    raise SystemExit(f"the {label} search of seed {seed} failed (see above)")
                res = results[label]
                runs[label].append(res)
                print(f"  seed {seed} {label:8} best {res.best_seconds * 1e3:8.3f} ms, wall {res.wall_seconds:5.1f} s, "
                      f"overhead {res.overhead:5.1%}", flush=True)
    return runs["tuned"], runs["xgboost"], runs["random"]


def reach_from_default(tuned, random, trials: int) -> int:
    """Trials the tuned search (the default schedule first) took to match a random search given the same
    start: the default's measurement, then random search's first trials - 1 points."""
    bar = min(c for c in (tuned.curve()[0], random.curve()[trials - 2]) if c is not None)
    return tuned.trials_to_reach(bar) or trials + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--plots", default=None, help="directory for the tuning-curve PNGs")
    parser.add_argument("--logs", default=None, help="directory of tuning logs: a rerun resumes from them "
                        "(and re-times the results without tuning again; wall and overhead then cover no tuning)")
    args = parser.parse_args()
    rows = []
    for name, wl, hand, numpy_fn, flops in cases():
        print(f"{name}: tuning, {args.seeds} seeds x {args.trials} trials, model-guided and random", flush=True)
        logs = None if args.logs is None else Path(args.logs)
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        tuned_runs, guided, random = tune(wl, args.trials, seeds, logs)
        if args.plots:
            Path(args.plots).mkdir(parents=True, exist_ok=True)
            path = Path(args.plots) / f"autoschedule_{wl.name}.png"
            defaults = [t.default_seconds for t in tuned_runs if t.default_seconds is not None]
            default = statistics.median(defaults) if defaults else None  # measured by the user-like searches
            guided[0].plot(path, *guided[1:], *random, flops=flops, default=default)
        inputs = random_inputs(wl)
        progs = {"hand": pw.build(hand, "cpu", workers=WORKERS), "default": pw.build(wl, "cpu", workers=WORKERS)}
        progs |= {f"tuned seed {r.seed}": pw.build(r.schedule, "cpu", workers=WORKERS) for r in tuned_runs}
        expected = numpy_fn(inputs)
        for label, prog in progs.items():
            got = prog.run(**inputs)[wl.outputs[0]]
            assert matches(got, expected), label
        fns = [lambda p=p, x=inputs: p.run(**x) for p in progs.values()] + [lambda f=numpy_fn, x=inputs: f(x)]
        times = dict(zip([*progs, "numpy"], side_by_side(fns, args.repeat, rounds=5, min_block=MIN_BLOCK)))
        best_hand = min(times["hand"], times["default"])
        tuned = [times[k] for k in progs if k.startswith("tuned")]
        # random search's best first measurement against the model-guided curve (first measurements too)
        reach = [g.trials_to_reach(r.curve()[-1]) or args.trials + 1 for g, r in zip(guided, random)]
        shipped = [reach_from_default(t, r, args.trials) for t, r in zip(tuned_runs, random)]
        rows.append((name, times, best_hand, tuned, flops, reach, shipped, tuned_runs + guided, random))
    print(f"\ncpu, {WORKERS} workers; numpy with {WORKERS} OpenBLAS threads; medians of 5 alternating blocks, "
          f"each >= {args.repeat} runs and >= {MIN_BLOCK} s")
    print(f"{'workload':18} {'numpy':>9} {'hand':>9} {'default':>9} {'tuned (per seed)':>28} "
          f"{'tuned/best hand':>16} {'vs numpy':>9} {'reach':>12} {'overhead':>9}")
    for name, times, best_hand, tuned, flops, reach, shipped, guided, random in rows:
        per_seed = " ".join(f"{t * 1e3:.2f}" for t in tuned)
        worst = max(tuned)
        rate = (f"{times['numpy'] / worst:8.0%}" if flops else f"{times['numpy'] / worst:7.1f}x")
        overhead = max(r.overhead for r in guided)
        print(f"{name:18} {times['numpy'] * 1e3:7.2f}ms {times['hand'] * 1e3:7.2f}ms {times['default'] * 1e3:7.2f}ms "
              f"{per_seed:>26}ms {best_hand / worst:15.0%} {rate:>9} {statistics.mean(reach):5.1f} {reach} "
              f"{overhead:8.1%}")
        if flops:
            print(f"{'':18} GFLOP/s: numpy {flops / times['numpy'] / 1e9:.0f}, best hand "
                  f"{flops / best_hand / 1e9:.0f}, tuned (worst seed) {flops / worst / 1e9:.0f}")
        print(f"{'':18} both from the default schedule: the tuned search reached the best of the default and random "
              f"search's first {args.trials - 1} trials in {statistics.mean(shipped):.1f} trials {shipped}")
        seeds = len(random)
        print(f"{'':18} in the searches (ms, median of the best one's 3 measurements): tuned "
              + " ".join(f"{g.best_seconds * 1e3:.2f}" for g in guided[:seeds]) + "; model-guided from random "
              + " ".join(f"{g.best_seconds * 1e3:.2f}" for g in guided[seeds:]) + "; random "
              + " ".join(f"{r.best_seconds * 1e3:.2f}" for r in random))
    print("tuned/best hand: the worst seed's speed over the faster of hand and default (target >= 90%); "
          "vs numpy: speed relative to numpy (matmul target >= 60%); reach: trials the model-guided search "
          "took to match random search's 64-trial best, mean and per seed (target <= 32); overhead: share of "
          "tuning wall time outside measurement, worst seed (target <= 20%)")


if __name__ == "__main__":
    main()
