"""Copying a task into another workload: how graph passes and the tuner's task extraction rebuild
a workload (blocking.py rewrites convolutions; autoschedule/tasks.py cuts a model into subgraphs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ptowsp.te import Expr, Op, substitute
from ptowsp.workloads.checks import with_parameters
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload


def retarget(out: Workload, body: Expr, rename: Mapping[str, str] | None = None) -> Expr:
    """`body` reading `out`'s tensors: of the same names, or of `rename[name]` where given."""
    rename = rename or {}

    def load(e: Expr) -> Expr | None:
        if e.op is not Op.LOAD:
            return None
        return Expr(Op.LOAD, e.dtype, tuple(retarget(out, i, rename) for i in e.src),
                    out.tensor(rename.get(e.arg.name, e.arg.name)))

    return substitute(body, load)


def compute_as(out: Workload, name: str, shape, loop_names, make: Callable[..., Expr]):
    """`out.compute(name, shape, make)` with its loops named `loop_names`."""
    return out.compute(name, shape, with_parameters(make, loop_names))


def copy_task(out: Workload, task: ComputeTask, name: str | None = None,
              rename: Mapping[str, str] | None = None):
    """`task` (a plain compute task: no domain, no scan) defined again in `out`, as `name`, reading
    `out`'s tensors named after its own or renamed by `rename`."""
    body = task.body
    return compute_as(out, name or task.name, task.tensor.shape, task.loop_names,
                      lambda *_: retarget(out, body, rename))
