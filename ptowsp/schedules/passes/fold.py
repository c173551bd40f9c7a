"""Constant folding: compute tasks that read only constants are evaluated once, at build time.

As TVM's FoldConstant and Halide's compile-time simplification do, whatever
depends only on values known when the program is built (`wl.constant`
weights, tables, and tasks over them, such as a rescaled weight matrix) is
computed then, with the reference evaluator, instead of on every run: a
folded task gets no kernel and no task instance, and its result is handed
to the kernels that read it like a constant.  Only compute tasks fold:
opaque host code may be impure (random, clocks, I/O), so it always runs.
Nor do scans: the evaluator takes their steps one at a time in Python (an
ONNX `Loop` of 2^20 constant steps took 43 s to build that way; its kernel
runs them in 24 ms), so a scan is always compiled, and what reads it too.

Workloads are append-only (tasks and constants are added, never changed),
so the folded values are cached per workload object and extended when
tasks are added; building several schedules of one workload evaluates each
folded task once.
"""

from __future__ import annotations

import weakref

import numpy as np

from ptowsp.errors import BuildError
from ptowsp.te import sizes
from ptowsp.workloads import ComputeTask, Workload

# per workload object: folded values computed so far
_values: weakref.WeakKeyDictionary[Workload, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()
# per workload object: (the graph it was decided for, the foldable tasks); fusion asks thousands of times
_foldable: weakref.WeakKeyDictionary[Workload, tuple[object, frozenset[str]]] = weakref.WeakKeyDictionary()


def foldable(wl: Workload) -> frozenset[str]:
    """Compute tasks whose every input is a constant or the result of a foldable task.

    Decided once per version of the workload: `wl.graph` is one object until
    a task, input or constant is added.
    """
    graph = wl.graph
    cached = _foldable.get(wl)
    if cached is None or cached[0] is not graph:
        cached = _foldable[wl] = (graph, _find_foldable(wl))
    return cached[1]


def _find_foldable(wl: Workload) -> frozenset[str]:
    known = set(wl.constants)
    for name in wl.tasks:  # definition order: a task's inputs are decided before it
        task = wl.task(name)
        static = isinstance(task, ComputeTask) and task.scan is None and not sizes.names_in(task.tensor.shape)
        if static and all(t.name in known for t in task.inputs):
            known.add(name)
    return frozenset(known - set(wl.constants))


def fold_constants(wl: Workload) -> dict[str, np.ndarray]:
    """{folded task: its read-only result}, in task order; evaluated once per workload object.

    A task that fails to evaluate raises BuildError naming it.
    """
    folded = foldable(wl)
    done = _values.setdefault(wl, {})
    values = {**wl.constants, **done}
    for name in wl.tasks:
        if name not in folded or name in done:
            continue
        task = wl.task(name)
        assert isinstance(task, ComputeTask)
        try:
            result = task.evaluate(values)
        except Exception as e:
            raise BuildError(f"constant folding: task {name!r} (which reads only constants) failed at build "
                             f"time: {type(e).__name__}: {e}") from e
        result.flags.writeable = False
        done[name] = values[name] = result
    return {name: done[name] for name in wl.tasks if name in folded}
