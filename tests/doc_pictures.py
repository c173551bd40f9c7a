"""The Gantt charts of docs/runtime.md: the zoo's transformer block, default schedule, a warm run.

On the cpu target the chart is the median (by makespan) of 15 warm runs, so a slow spell of a shared
machine does not end up in the docs; the aicore target's device clock gives the same run every time.
The tuning curves beside them in docs/images come from benchmarks/autoschedule.py --plots.

    .venv/bin/python -m tests.doc_pictures   # rewrite docs/images/gantt_*.png
"""

from __future__ import annotations

import pathlib

import ptowsp as pw
from ptowsp.workloads import random_inputs, zoo

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"


def warm_trace(target: str, runs: int = 15) -> pw.Trace:
    """The median-makespan trace of `runs` runs after a first (cold) one."""
    wl = zoo.transformer_block()
    prog, inputs = pw.build(wl, target=target), random_inputs(wl)
    prog.run(**inputs)  # the cold run: one-off costs (page faults, first touches)
    traces = []
    for _ in range(runs):
        prog.run(**inputs)
        traces.append(prog.trace)
    return sorted(traces, key=lambda t: t.duration)[runs // 2]


if __name__ == "__main__":
    for target in ("cpu", "aicore"):
        print(warm_trace(target).plot(IMAGES / f"gantt_transformer_block_{target}.png"))
