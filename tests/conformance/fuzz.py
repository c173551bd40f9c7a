"""`make fuzz`: thousands of (workload, random legal schedule) pairs on every compiled target.

    python -m tests.conformance.fuzz --pairs 5000 [--seed 0] [--failures fuzz-failures.jsonl]

Each pair builds a catalogue workload under a seeded random schedule (with random
layouts of intermediates and constants where the target stores them), runs it
and compares it with pw.reference.  Mismatches and crashes are written to the
failures file (the workload name, seed and schedule JSON, enough to replay)
and make the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import ptowsp as pw
from ptowsp.schedules.random_schedule import random_schedule
from tests.conformance.catalogue import CASES, random_inputs


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
    checked = failed = 0
    start = time.perf_counter()
    with open(args.failures, "w") as failures:
        for n in range(args.pairs):
            case, wl = workloads[n % len(workloads)]
            seed = args.seed + n // len(workloads)
            inputs, expected = prepared[case.name]
            for target in targets:
                schedule = random_schedule(wl, seed, layouts=target != "cuda")  # cuda refuses layouts
                problem = None
                try:
                    got = pw.build(schedule, target=target).run(**inputs)
                    for name, value in expected.items():
                        scale = max(1.0, float(np.max(np.abs(value.astype(np.float64)))))
                        tol = max(case.rtol, 1e-5)
                        if not np.allclose(got[name], value, rtol=tol, atol=tol * scale, equal_nan=True):
                            problem = f"mismatch in {name}"
                except Exception as e:  # noqa: BLE001 - every crash is a finding
                    problem = f"{type(e).__name__}: {e}"
                checked += 1
                if problem:
                    failed += 1
                    failures.write(json.dumps({"case": case.name, "seed": seed, "target": target,
                                               "problem": problem, "schedule": schedule.to_json()}) + "\n")
            if (n + 1) % 500 == 0:
                print(f"  {n + 1} pairs, {failed} failures, {time.perf_counter() - start:.0f} s", flush=True)
    print(f"fuzz: {checked} (workload, schedule, target) runs over {len(workloads)} workloads, "
          f"{failed} failures, {time.perf_counter() - start:.0f} s; failures in {args.failures}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
