"""`make fuzz`: thousands of (workload, random legal schedule) pairs on every compiled target.

    python -m tests.conformance.fuzz --pairs 5000 [--seed 0] [--failures fuzz-failures.jsonl]

Each pair builds a catalogue workload under a seeded random schedule (with random
layouts of intermediates and constants where the target stores them), runs it
and compares it with pw.reference.  Mismatches and crashes are written to the
failures file (the workload name, seed and schedule JSON, enough to replay)
and make the exit status 1.  A legal schedule the device cannot take as given
(aicore's DeviceLimit, a ScheduleError naming the task: tiles that overflow a
core buffer, or so small that an instance streams too many blocks) is the
target's typed refusal, not a finding: it is counted apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import ptowsp as pw
from ptowsp.backends.aicore.cost import DeviceLimit
from ptowsp.backends.cpu.isa import HostCannotRun
from ptowsp.schedules.random_schedule import random_schedule
from tests.conformance.catalogue import CASES, random_inputs

REFUSED = "refused"  # what `problem` says of a schedule the target refuses, typed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failures", default="fuzz-failures.jsonl")
    parser.add_argument("--only", default="", help="the cases whose name contains this text")
    args = parser.parse_args()
    targets = [t for t in pw.targets() if t != "numpy"]
    workloads = [(case, case.make()) for case in CASES if args.only in case.name]
    prepared = {case.name: (inputs := random_inputs(wl), pw.reference(wl, **inputs)) for case, wl in workloads}
    checked = failed = refused = 0
    start = time.perf_counter()
    with open(args.failures, "w") as failures:
        for n in range(args.pairs):
            case, wl = workloads[n % len(workloads)]
            seed = args.seed + n // len(workloads)
            inputs, expected = prepared[case.name]
            for target in targets:
                # cuda refuses layouts; prefetch_tensor is a cpu cache hint, which the others refuse
                schedule = random_schedule(wl, seed, layouts=target != "cuda", prefetches=target == "cpu")
                found = problem(schedule, target, inputs, expected, case.rtol)
                if found is REFUSED:
                    refused += 1
                    continue
                checked += 1
                if found:
                    failed += 1
                    failures.write(json.dumps({"case": case.name, "seed": seed, "target": target,
                                               "problem": found, "schedule": schedule.to_json()}) + "\n")
            if (n + 1) % 500 == 0:
                print(f"  {n + 1} pairs, {failed} failures, {refused} refused, {time.perf_counter() - start:.0f} s",
                      flush=True)
    print(f"fuzz: {checked} (workload, schedule, target) runs over {len(workloads)} workloads, "
          f"{failed} failures, {refused} refused (tiles a device cannot take), "
          f"{time.perf_counter() - start:.0f} s; failures in {args.failures}")
    return 1 if failed else 0


def problem(schedule: pw.Schedule, target: str, inputs: dict, expected: dict, rtol: float) -> str | None:
    """What is wrong with the run of `schedule` on `target` (None: it matches `expected` within
    `rtol`, at least 1e-5), or REFUSED: the device cannot take the schedule's tiles (a typed
    ScheduleError)."""
    try:
        got = pw.build(schedule, target=target).run(**inputs)
    except DeviceLimit:
        return REFUSED
    except HostCannotRun:  # this machine cannot run the CPU level PTOWSP_CPU names: no finding, stop
        raise
    except Exception as e:  # noqa: BLE001 - every crash is a finding
        return f"{type(e).__name__}: {e}"
    tol = max(rtol, 1e-5)
    for name, value in expected.items():
        magnitudes = np.abs(value.astype(np.float64))  # an empty output or one holding inf has a finite scale
        scale = max(1.0, float(np.max(magnitudes[np.isfinite(magnitudes)], initial=0.0)))
        if not np.allclose(got[name], value, rtol=tol, atol=tol * scale, equal_nan=True):
            return f"mismatch in {name}"
    return None


if __name__ == "__main__":
    sys.exit(main())
