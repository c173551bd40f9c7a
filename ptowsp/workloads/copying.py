"""Copying a task into another workload: how graph passes and the tuner's task extraction rebuild
a workload (blocking.py rewrites convolutions, transposing.py contractions; autoschedule/tasks.py cuts a model
into subgraphs)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from ptowsp.te import Expr, Op, substitute
from ptowsp.te.names import fit_name
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


def copy_replacing(out: Workload, task: ComputeTask, old: Expr, new: Expr) -> None:
    """`task` defined again in `out` with the load `old` (that very node of its body) read as `new`,
    every other load reading `out`'s tensor of the same name: a graph pass's rewritten operand."""
    inputs = {t.name: out.tensor(t.name) for t in task.inputs}

    def body(*_: Expr) -> Expr:
        def replace(e: Expr) -> Expr | None:
            if e is old:
                return new
            if e.op is Op.LOAD:
                return Expr(Op.LOAD, e.dtype, tuple(substitute(i, replace) for i in e.src), inputs[e.arg.name])
            return None

        return substitute(task.body, replace)

    compute_as(out, task.name, task.tensor.shape, task.loop_names, body)


def names_in(wl: Workload) -> set[str]:
    """Every tensor name `wl` has: its tasks', inputs' and constants'."""
    return set(wl.tasks) | set(wl.inputs) | set(wl.constants)


def fresh_name(name: str, taken) -> str:
    """`name`, with underscores added until it is not in `taken` (a pass's new task beside the user's);
    one too long for a name is shortened with a hash of it (te/names.py `fit_name`)."""
    name = fit_name(name)
    while name in taken:
        name = fit_name(name + "_")
    return name


def rebuild(wl: Workload, rewrite: Mapping[str, Callable[[Workload, ComputeTask], None]],
            drop: Collection[str] = ()) -> Workload:
    """A copy of `wl` (plain compute tasks only) in which each task named in `rewrite` is defined by
    `rewrite[name](out, task)` instead (which must define a task of that name, and may add others
    before it) and the tasks in `drop` (which nothing left reads) are left out; inputs, constants and
    outputs as they were."""
    out = Workload(wl.name)
    for name in wl.inputs:
        t = wl.tensor(name)
        out.input(name, t.shape, t.dtype)
    for name, array in wl.constants.items():
        out.constant(name, array, wl.tensor(name).dtype)
    for name in wl.tasks:
        task = wl.task(name)
        assert isinstance(task, ComputeTask)
        if name in drop:
            continue
        if name in rewrite:
            rewrite[name](out, task)
        else:
            copy_task(out, task)
    out.output(*(out.tensor(n) for n in wl.outputs))
    return out


def plain(task) -> bool:
    """A compute task with no domain, no scan and a static shape: what `rebuild` copies."""
    return isinstance(task, ComputeTask) and task.domain is None and task.scan is None and all(
        isinstance(n, int) for n in task.tensor.shape)
