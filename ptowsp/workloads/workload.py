"""`Workload`: a named task graph whose tasks are inline tensor expressions.

A workload is built in definition order, which is therefore a topological
order: a task may only read tensors that exist when it is defined.  Every
mistake is reported where it is made, with the task and tensor at fault.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from ptowsp.errors import DTypeError, ShapeError, WorkloadError
from ptowsp.te import Expr, Op, Tensor, check_bounds, dtypes, lift, rewrite, rules, sizes, walk
from ptowsp.te.names import check_name
from ptowsp.workloads.arrays import frozen_constant, normalize_shape
from ptowsp.workloads.category import infer_category
from ptowsp.workloads.checks import blamed_on, check_reduce_axes, loop_names_of
from ptowsp.workloads.scan import initial_value, scan_axis, scan_task
from ptowsp.workloads.scatter import scatter, scatter_names
from ptowsp.workloads.task import Category, ComputeTask, OpaqueTask, Task

_workload_ids = itertools.count(1)
_schedule_factory: Callable[[Workload], Any] | None = None


def register_schedule_factory(factory: Callable[[Workload], Any]) -> None:
    """Let the schedules layer (above this one) provide `Workload.schedule()`."""
    global _schedule_factory
    _schedule_factory = factory

OutputSpec = tuple[str, Sequence[int]] | tuple[str, Sequence[int], str]


def _settled(method: Callable) -> Callable:
    """Call the updates of scans defined so far before the method runs (Workload.scan)."""

    @functools.wraps(method)
    def settled(self: Workload, *args: Any, **kwargs: Any) -> Any:
        if self._pending:
            self._settle()
        return method(self, *args, **kwargs)

    return settled


class Workload:
    """A computation described once: inputs, tasks and outputs.

    >>> wl = Workload("scale")
    >>> x = wl.input("x", (4,))
    >>> y = wl.compute("y", (4,), lambda i: x[i] * 2.0)
    >>> wl.output(y)
    """

    def __init__(self, name: str):
        self.name = check_name(name, "workload")
        self._id = next(_workload_ids)
        self._tensors: dict[str, Tensor] = {}
        self._producers: dict[str, str] = {}  # tensor name -> task name (inputs, constants absent)
        self._inputs: list[str] = []
        self._constants: dict[str, np.ndarray] = {}  # name -> private read-only copy
        self._constant_digests: dict[str, str] = {}  # name -> digest of its bytes, for the fingerprint
        self._tasks: dict[str, Task] = {}
        self._outputs: list[str] = []
        self._graph = nx.DiGraph()
        self._frozen_graph: nx.DiGraph | None = None  # what `graph` hands out, until the graph changes
        self._sizes: dict[str, tuple[str, int]] = {}  # size name -> (input, dimension) that declares it
        self._bound: dict[tuple[tuple[str, int], ...], Workload] = {}  # bindings made so far (bind)
        self._pending: list[tuple[Tensor, tuple[Expr, ...], int, Expr, Callable]] = []  # scans to finish

    # -- definition -------------------------------------------------------------
    @_settled
    def input(self, name: str, shape: Sequence[int | str] | int | str, dtype: str = "float32") -> Tensor:
        """Declare an input array the caller passes to run/reference by name.

        A dimension given as a name ("n") is a symbolic size: bound at each run
        from this input's array, the same for every input and task that uses it.
        """
        self._claim(name, "input")
        with blamed_on(name):
            dims = normalize_shape(shape, f"input {name!r}")
            for d, dim in enumerate(dims):
                if isinstance(dim, Expr) and dim.op is Op.SIZE:
                    self._sizes.setdefault(dim.arg, (name, d))
            self._check_sizes(dims, f"input {name!r}")
            tensor = Tensor(name, dims, dtypes.normalize(dtype), self._id)
        self._tensors[name] = tensor
        self._inputs.append(name)
        self._graph.add_node(name, kind="input", tensor=tensor)
        self._frozen_graph = None
        return tensor

    @_settled
    def constant(self, name: str, array: object, dtype: str | None = None) -> Tensor:
        """Declare a constant input: its value (weights, a table) is given now, not passed at run time.

        The workload keeps a private read-only copy, so later changes to
        `array` change nothing (another workload's constant is shared: it never changes).  dtype: given, or the array's own (which must
        be supported); Python data without one is float32 when it holds
        floats (the workload default), else numpy's choice (int64, bool).
        Tasks reading only constants are evaluated once at build time.
        """
        self._claim(name, "constant")
        what = f"constant {name!r}"
        value, digest = frozen_constant(what, array, dtype)
        shape = normalize_shape(value.shape, what)
        tensor = Tensor(name, shape, value.dtype.name, self._id)
        self._tensors[name] = tensor
        self._constants[name] = value
        self._constant_digests[name] = digest
        self._graph.add_node(name, kind="constant", tensor=tensor)
        self._frozen_graph = None
        return tensor

    @_settled
    def compute(self, name: str, shape: Sequence[int | str] | int | str, fn: Callable[..., object],
                domain: Callable[..., object] | None = None) -> Tensor:
        """Define `name[loops] = fn(*loops)`; fn's parameter names become the loop names.

        `domain(*loops)` (same loops) is a bool condition, which may read integer
        tensors (`lambda b, s: s < lens[b]`): the task computes only where it holds
        and the other elements are zero; task instances whose tile lies wholly
        outside are never generated.
        """
        self._claim(name, "task")
        with blamed_on(name):
            shape = normalize_shape(shape, f"compute {name!r}")
            self._check_sizes(shape, f"compute {name!r}")
            loop_names = loop_names_of(name, shape, fn)
            axes = tuple(Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (n, x)) for n, x in zip(loop_names, shape, strict=True))
            result = fn(*axes)
            if isinstance(result, Tensor):
                raise ShapeError(f"the function returned tensor {result.name} itself; index it: {result.name}[...]")
            if isinstance(result, tuple):
                raise ShapeError(f"the function returned {len(result)} values (the values of a several-value "
                                 "reducer?); a task stores one: combine them (`m + pw.log(s)`) or give each a task")
            body = lift(result)
            self._check_body(name, body, loop_names)
            self._check_sizes([body], "the expression")
            where_ = None if domain is None else self._domain(domain, axes, loop_names)
            task = ComputeTask(name, Tensor(name, shape, body.dtype, self._id), axes, body,
                               infer_category(body, loop_names), where_)
            check_bounds(task.value)
        tensor = task.tensor
        self._add_task(task)
        return tensor

    @_settled
    def opaque(
        self,
        name: str,
        fn: Callable[..., object],
        inputs: Sequence[Tensor],
        outputs: Sequence[OutputSpec],
    ) -> Tensor | tuple[Tensor, ...]:
        """Wrap host code: fn(*input_arrays) returns one array per declared output.

        outputs lists (name, shape) or (name, shape, dtype); the result is the
        output tensor, or a tuple of them when there are several.
        """
        self._claim(name, "task")
        with blamed_on(name):
            if not callable(fn):
                raise WorkloadError(f"opaque task needs a callable, got {fn!r}")
            ins = tuple(self._own(t, "an input of the opaque task") for t in inputs)
            if not outputs:
                raise WorkloadError("an opaque task needs at least one output (name, shape[, dtype])")
            outs = []
            for spec in outputs:
                if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
                    raise WorkloadError(f"output spec {spec!r} is not (name, shape) or (name, shape, dtype)")
                out_name, out_shape, *dtype = spec
                if out_name != name:
                    self._claim(out_name, "opaque output")
                dims = normalize_shape(out_shape, f"output {out_name!r}")
                self._check_sizes(dims, f"output {out_name!r}")
                outs.append(Tensor(out_name, dims, dtypes.normalize(dtype[0] if dtype else "float32"), self._id))
            if len({t.name for t in outs}) != len(outs):
                raise WorkloadError(f"opaque outputs repeat a name: {[t.name for t in outs]}")
        self._add_task(OpaqueTask(name, fn, ins, tuple(outs)))
        return outs[0] if len(outs) == 1 else tuple(outs)

    @_settled
    def scatter(self, name: str, shape: Sequence[int | str] | int | str, over: Sequence[int | str] | int | str,
                index: Callable[..., Sequence[object]], value: Callable[..., object],
                domain: Callable[..., object] | None = None, combine: str | None = None) -> Tensor:
        """Write through an index map: `name` starts as zeros of `shape`, and every point p of the
        iteration space `over` (where `domain(*p)` holds) writes `value(*p)` to `name[index(*p)]`.

        Each target may be written at most once (else BoundsError at run time), unless `combine`
        is "add", "max" or "min": then targets start at its identity and fold their points' values
        in row-major order (a histogram in one pass).  value's parameter names are the loops of
        `over`; index returns one integer coordinate per output dimension and may read integer
        tensors (`lambda e, c, d: (slots[e, c], d)`).  It adds two tasks: a host step `name_source`
        that inverts the index map and the gather `name`, or with combine the values `name_value`
        and the host fold `name` (ptowsp/workloads/scatter.py).
        """
        for claimed in scatter_names(name, combine):  # checked before either task is added
            self._claim(claimed, "scatter")
        return scatter(self, name, shape, over, index, value, domain, combine)

    @_settled
    def scan(self, name: str, shape: Sequence[int | str] | int | str, *, init: Callable[..., object],
             update: Callable[..., object], axis: str | None = None, dtype: str | None = None) -> Tensor:
        """A recurrence along `axis` (update's loop variable of that name; the first when not named):
        `name` at the first steps is init(other loops) (or init(all loops)), and at step t after them
        update(loops), which may read `name` at `t - d` for constants d >= 1; the longest d is the
        number of initial steps (ptowsp/workloads/scan.py).  The dtype is `dtype`, else init's (a
        Python number: float32 or int32); update must give the same.

        update names the tensor this returns, so it is called when the workload is next used (any
        definition, query, schedule or run); its errors surface there, naming the scan.
        """
        self._claim(name, "task")
        with blamed_on(name):
            shape = normalize_shape(shape, f"scan {name!r}")
            self._check_sizes(shape, f"scan {name!r}")
            loops = loop_names_of(name, shape, update)
            k = scan_axis(name, loops, axis)
            axes = tuple(Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (n, x)) for n, x in zip(loops, shape, strict=True))
            init_value = initial_value(name, init, axes, k, dtype)
            self._check_body(name, init_value, loops)
            check_bounds(init_value)  # update's reads are checked once it is called
            tensor = Tensor(name, shape, init_value.dtype, self._id)
        self._tensors[name] = tensor
        self._pending.append((tensor, axes, k, init_value, update))
        return tensor

    def _settle(self) -> None:
        """Finish the scans defined so far, in order; a failing one is removed with those after it."""
        while self._pending:
            tensor, axes, k, init_value, update = self._pending[0]
            try:
                with blamed_on(tensor.name):
                    result = update(*axes)
                    if isinstance(result, Tensor):
                        raise ShapeError(f"update returned tensor {result.name} itself; index it")
                    task = scan_task(tensor.name, tensor, axes, k, init_value, lift(result))
                    self._check_body(tensor.name, task.body, task.loop_names)
                    self._check_sizes([task.body], "the expression")
                    check_bounds(task.value)
            except BaseException:
                for dropped, *_ in self._pending:
                    del self._tensors[dropped.name]
                self._pending.clear()
                raise
            self._pending.pop(0)
            self._add_task(task)

    @_settled
    def output(self, *tensors: Tensor) -> None:
        """Mark task results as outputs of the workload (call with one or more tensors)."""
        if not tensors:
            raise WorkloadError("wl.output needs at least one tensor")
        for t in tensors:
            if not isinstance(t, Tensor):
                raise WorkloadError(f"wl.output takes tensors returned by compute or opaque, got {t!r}")
            self._own(t, "an output")
            if t.name in self._constants:
                raise WorkloadError(f"{t.name} is a constant, not the result of a task; only task results can be "
                                    "outputs")
            if t.name not in self._producers:
                raise WorkloadError(f"{t.name} is an input, not the result of a task; only task results can be outputs")
            if t.name not in self._outputs:
                self._outputs.append(t.name)

    @_settled
    def schedule(self) -> Any:
        """A new, empty `pw.Schedule` for this workload."""
        if _schedule_factory is None:
            raise WorkloadError("schedules are unavailable: import ptowsp (not only ptowsp.workloads)")
        return _schedule_factory(self)

    # -- queries ----------------------------------------------------------------
    @property
    @_settled
    def fingerprint(self) -> str:
        """A digest of the definition (inputs, constants with their values' digests, tasks as written, outputs)
        that schedules and records key on."""
        return hashlib.sha256(str(self).encode()).hexdigest()

    @property
    @_settled
    def tasks(self) -> list[str]:
        """Task names in topological (definition) order."""
        return list(self._tasks)

    @property
    def inputs(self) -> list[str]:
        return list(self._inputs)

    @property
    def sizes(self) -> list[str]:
        """The symbolic sizes, in the order inputs declare them (empty for a static workload)."""
        return list(self._sizes)

    @property
    def size_sources(self) -> dict[str, tuple[str, int]]:
        """{size: (input, dimension)} where each run reads the size's value."""
        return dict(self._sizes)

    def size(self, name: str) -> Expr:
        """A symbolic size as an int64 expression, for use inside compute functions."""
        if name not in self._sizes:
            known = ", ".join(self._sizes) or "(none)"
            raise WorkloadError(f"workload {self.name!r} has no size {name!r}; sizes: {known}")
        return sizes.size_var(name)

    @_settled
    def bind(self, binding: Mapping[str, int] | None = None, **named: int) -> Workload:
        """The workload at one binding of its sizes: every shape and extent a number.

        The reference, the task table and the memory plan of a run work on this
        (kernels are compiled once, over the symbols).  Bindings are cached.
        """
        values = {**(binding or {}), **named}
        missing = [n for n in self._sizes if n not in values]
        unknown = [n for n in values if n not in self._sizes]
        if missing or unknown:
            raise WorkloadError(f"workload {self.name!r}: bind needs exactly its sizes "
                                f"({', '.join(self._sizes) or 'none'}), got {', '.join(values) or 'none'}")
        for n, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ShapeError(f"workload {self.name!r}: size {n} must be a positive int, got {v!r}")
        if not values:
            return self
        key = tuple((n, int(values[n])) for n in self._sizes)
        if key not in self._bound:
            if len(self._bound) >= 32:
                self._bound.pop(next(iter(self._bound)))
            self._bound[key] = bind_workload(self, dict(key))
        return self._bound[key]

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """{name: read-only array} of the constants, in declaration order (not among `inputs`)."""
        return dict(self._constants)

    @property
    def outputs(self) -> list[str]:
        return list(self._outputs)

    @property
    @_settled
    def graph(self) -> nx.DiGraph:
        """A frozen copy of the task graph over task and input names.

        Nodes carry `kind` ("input", "constant", "compute", "opaque"); task nodes carry
        `category`; each edge carries the `tensors` that flow along it.  One copy is shared until
        a task or input is added: the schedule generator asks for it thousands of times a search.
        """
        if self._frozen_graph is None:
            self._frozen_graph = nx.freeze(self._graph.copy())
        return self._frozen_graph

    @_settled
    def category(self, name: str) -> Category:
        return self.task(name).category

    @_settled
    def task(self, name: str) -> Task:
        if name not in self._tasks:
            raise WorkloadError(f"workload {self.name!r} has no task {name!r}; tasks: {', '.join(self._tasks)}")
        return self._tasks[name]

    @_settled
    def tensor(self, name: str) -> Tensor:
        if name not in self._tensors:
            raise WorkloadError(f"workload {self.name!r} has no tensor {name!r}")
        return self._tensors[name]

    @_settled
    def producer(self, tensor: str) -> str | None:
        """The task that writes `tensor`, or None for an input or a constant."""
        self.tensor(tensor)
        return self._producers.get(tensor)

    @_settled
    def __str__(self) -> str:
        lines = [f"workload {self.name}"]
        lines += [f"  input {t.name}{_dims(t)} {t.dtype}" for t in map(self.tensor, self._inputs)]
        lines += [f"  constant {t.name}{_dims(t)} {t.dtype} sha256:{self._constant_digests[t.name]}"
                  for t in map(self.tensor, self._constants)]
        for task in self._tasks.values():
            lines.append(f"  {task}    # {task.category.value}")
        lines.append(f"  output {', '.join(self._outputs) or '(none)'}")
        return "\n".join(lines)

    @_settled
    def __repr__(self) -> str:
        return f"Workload({self.name!r}, tasks={self.tasks}, outputs={self._outputs})"

    # -- helpers ----------------------------------------------------------------
    def _claim(self, name: str, what: str) -> None:
        check_name(name, what)
        if name in self._tensors or name in self._tasks:
            raise WorkloadError(f"workload {self.name!r} already has a tensor or task named {name!r}")

    def _own(self, t: object, role: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise WorkloadError(f"{role} must be a tensor of this workload, got {t!r}")
        if t.owner != self._id or self._tensors.get(t.name) != t:
            raise WorkloadError(f"tensor {t.name} used as {role} belongs to another workload")
        return t

    def _domain(self, fn: Callable[..., object], axes: tuple[Expr, ...], loop_names: tuple[str, ...]) -> Expr:
        """The domain condition: bool, over these loops, reading only integer tensors, no reduction."""
        if not callable(fn):
            raise WorkloadError(f"domain= needs a function of the loop variables, got {fn!r}")
        cond = lift(fn(*axes))
        if cond.dtype != "bool":
            raise DTypeError(f"domain must be a bool condition such as s < lens[b], got {cond.dtype}: {cond}")
        for node in walk(cond):
            if node.op is Op.REDUCE or node.op is Op.RVAR:
                raise WorkloadError(f"domain {cond} reduces; a domain is a condition on the task's own loops")
            if node.op is Op.LOAD and not dtypes.is_int(node.dtype):
                raise DTypeError(f"domain {cond} reads {node.arg.name}, a {node.dtype} tensor; a domain may "
                                 "read integer tensors only (lengths, counts, offsets)")
        self._check_body("domain", cond, loop_names)
        self._check_sizes([cond], "the domain")
        return cond

    def _check_sizes(self, items, what: str) -> None:
        """Every size used is declared by an input (so each run can bind it)."""
        for n in sorted(sizes.names_in(items)):
            if n not in self._sizes:
                raise WorkloadError(f"{what} uses size {n!r}, which no input declares; give an input "
                                    f"a dimension named {n!r} first")

    def _check_body(self, name: str, body: Expr, loop_names: tuple[str, ...]) -> None:
        """Tensors belong here, loop variables are this task's, reduce axes are bound."""
        for node in walk(body):
            if node.op is Op.LOAD:
                self._own(node.arg, "an operand")
            elif node.op is Op.VAR and node.arg[0] not in loop_names:
                raise WorkloadError(f"loop variable {node.arg[0]} belongs to another compute")
        check_reduce_axes(body, loop_names, frozenset())

    def _add_task(self, task: Task) -> None:
        self._tasks[task.name] = task
        self._frozen_graph = None
        self._graph.add_node(task.name, kind="compute" if isinstance(task, ComputeTask) else "opaque",
                             category=task.category)
        for out in task.outputs:
            self._tensors[out.name] = out
            self._producers[out.name] = task.name
        for t in task.inputs:
            source = self._producers.get(t.name, t.name)
            if self._graph.has_edge(source, task.name):
                self._graph.edges[source, task.name]["tensors"].append(t.name)
            else:
                self._graph.add_edge(source, task.name, tensors=[t.name])


def _dims(t: Tensor) -> str:
    """[n, 4096]: a tensor's shape in a workload's text (and so its fingerprint)."""
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def bind_workload(wl: Workload, binding: dict[str, int]) -> Workload:
    """A copy of `wl` with every size replaced by its value (Workload.bind; bounds checked again)."""
    out = Workload(wl.name)
    tensors: dict[str, Tensor] = {}

    def bound_tensor(t: Tensor) -> Tensor:
        if t.name not in tensors:
            tensors[t.name] = Tensor(t.name, sizes.bind_shape(t.shape, binding), t.dtype, out._id)
        return tensors[t.name]

    reads = rules(lambda n: Expr(Op.LOAD, n.dtype, n.src, bound_tensor(n.arg)), Op.LOAD)  # indices bound already

    def bound_expr(e: Expr) -> Expr:
        return rewrite(sizes.bind(e, binding), reads, fixpoint=False)

    for name in wl.inputs:
        t = bound_tensor(wl.tensor(name))
        out._tensors[name] = t
        out._inputs.append(name)
        out._graph.add_node(name, kind="input", tensor=t)
    for name, value in wl.constants.items():
        t = bound_tensor(wl.tensor(name))
        out._tensors[name], out._constants[name] = t, value
        out._constant_digests[name] = wl._constant_digests[name]
        out._graph.add_node(name, kind="constant", tensor=t)
    for name in wl.tasks:
        task = wl.task(name)
        with blamed_on(name):
            if isinstance(task, ComputeTask):
                body = bound_expr(task.body)
                check_bounds(body)
                axes = tuple(bound_expr(a) for a in task.axes)
                domain = None if task.domain is None else bound_expr(task.domain)
                out._add_task(ComputeTask(name, bound_tensor(task.tensor), axes, body, task.category, domain,
                                          task.scan))
            else:
                out._add_task(OpaqueTask(name, task.fn, tuple(map(bound_tensor, task.inputs)),
                                         tuple(map(bound_tensor, task.outputs))))
    out._outputs = list(wl.outputs)
    return out
