"""`Workload`: a named task graph whose tasks are inline tensor expressions.

A workload is built in definition order, which is therefore a topological
order: a task may only read tensors that exist when it is defined.  Every
mistake is reported where it is made, with the task and tensor at fault.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import networkx as nx
import numpy as np

from ptowsp.errors import DTypeError, PtowspError, ShapeError, WorkloadError
from ptowsp.te import Expr, Op, Tensor, check_bounds, dtypes, lift, walk
from ptowsp.workloads.category import infer_category
from ptowsp.workloads.task import Category, ComputeTask, OpaqueTask, Task

_workload_ids = itertools.count(1)
_schedule_factory: Callable[[Workload], Any] | None = None


def register_schedule_factory(factory: Callable[[Workload], Any]) -> None:
    """Let the schedules layer (above this one) provide `Workload.schedule()`."""
    global _schedule_factory
    _schedule_factory = factory

OutputSpec = tuple[str, Sequence[int]] | tuple[str, Sequence[int], str]


def normalize_shape(shape: object, what: str) -> tuple[int, ...]:
    """A shape as a tuple of positive ints, or ShapeError naming `what`."""
    items = (shape,) if isinstance(shape, int) else shape
    try:
        items = tuple(items)  # type: ignore[arg-type]
    except TypeError:
        raise ShapeError(f"{what}: shape must be a tuple of positive ints, got {shape!r}") from None
    for n in items:
        if isinstance(n, str):
            raise ShapeError(f"{what}: symbolic size {n!r} is not supported yet; give an integer")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ShapeError(f"{what}: shape must be a tuple of positive ints, got {shape!r}")
    return items


def _constant_array(what: str, value: object, dtype: object) -> np.ndarray:
    """A private copy of a constant's value in a supported dtype, or DTypeError / ShapeError naming it."""
    try:
        found = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(f"{what}: the value is not a rectangular array: {e}") from None
    if dtype is None:
        if isinstance(value, np.ndarray):
            dtype = found.dtype
        else:  # Python data: floats take the workload default, as wl.input does
            dtype = "float32" if found.dtype.kind == "f" else found.dtype
    try:
        name = dtypes.normalize(dtype)
    except DTypeError as e:
        raise DTypeError(f"{what}: {e}; pass dtype= or convert the array") from None
    if found.dtype.kind not in "biuf" or not np.can_cast(found.dtype, name, casting="same_kind"):
        raise DTypeError(f"{what}: a {found.dtype} value does not convert to {name} without changing its kind; "
                         "convert it explicitly")
    array = np.array(found, dtype=name, order="C")  # always a copy: the caller's array stays theirs
    if array.dtype.kind in "iu" and not np.array_equal(array, found):
        raise DTypeError(f"{what}: some values do not fit {name}")
    return array


@contextlib.contextmanager
def _blame(task: str) -> Iterator[None]:
    """Prefix errors raised while defining a task with the task's name."""
    try:
        yield
    except PtowspError as e:
        if not str(e).startswith("task "):
            e.args = (f"task {task!r}: {e}",)
        raise


class Workload:
    """A computation described once: inputs, tasks and outputs.

    >>> wl = Workload("scale")
    >>> x = wl.input("x", (4,))
    >>> y = wl.compute("y", (4,), lambda i: x[i] * 2.0)
    >>> wl.output(y)
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise WorkloadError(f"a workload needs a non-empty name, got {name!r}")
        self.name = name
        self._id = next(_workload_ids)
        self._tensors: dict[str, Tensor] = {}
        self._producers: dict[str, str] = {}  # tensor name -> task name (inputs, constants absent)
        self._inputs: list[str] = []
        self._constants: dict[str, np.ndarray] = {}  # name -> private read-only copy
        self._constant_digests: dict[str, str] = {}  # name -> digest of its bytes, for the fingerprint
        self._tasks: dict[str, Task] = {}
        self._outputs: list[str] = []
        self._graph = nx.DiGraph()

    # -- definition -------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int] | int, dtype: str = "float32") -> Tensor:
        """Declare an input array the caller passes to run/reference by name."""
        self._claim(name, "input")
        with _blame(name):
            tensor = Tensor(name, normalize_shape(shape, f"input {name!r}"), dtypes.normalize(dtype), self._id)
        self._tensors[name] = tensor
        self._inputs.append(name)
        self._graph.add_node(name, kind="input", tensor=tensor)
        return tensor

    def constant(self, name: str, array: object, dtype: str | None = None) -> Tensor:
        """Declare a constant input: its value (weights, a table) is given now, not passed at run time.

        The workload keeps a private read-only copy, so later changes to
        `array` change nothing.  dtype: given, or the array's own (which must
        be supported); Python data without one is float32 when it holds
        floats (the workload default), else numpy's choice (int64, bool).
        Tasks reading only constants are evaluated once at build time.
        """
        self._claim(name, "constant")
        what = f"constant {name!r}"
        value = _constant_array(what, array, dtype)
        if value.ndim == 0:
            raise ShapeError(f"{what}: a constant needs at least one dimension, got a scalar; "
                             "use a shape-(1,) array and index it with [0]")
        shape = normalize_shape(value.shape, what)
        tensor = Tensor(name, shape, value.dtype.name, self._id)
        value.flags.writeable = False
        self._tensors[name] = tensor
        self._constants[name] = value
        self._constant_digests[name] = hashlib.sha256(value.tobytes()).hexdigest()[:16]
        self._graph.add_node(name, kind="constant", tensor=tensor)
        return tensor

    def compute(self, name: str, shape: Sequence[int] | int, fn: Callable[..., object]) -> Tensor:
        """Define `name[loops] = fn(*loops)`; fn's parameter names become the loop names."""
        self._claim(name, "task")
        with _blame(name):
            shape = normalize_shape(shape, f"compute {name!r}")
            loop_names = self._loop_names(name, shape, fn)
            axes = tuple(Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (n, x)) for n, x in zip(loop_names, shape, strict=True))
            result = fn(*axes)
            if isinstance(result, Tensor):
                raise ShapeError(f"the function returned tensor {result.name} itself; index it: {result.name}[...]")
            body = lift(result)
            self._check_body(name, body, loop_names)
            check_bounds(body)
        tensor = Tensor(name, shape, body.dtype, self._id)
        task = ComputeTask(name, tensor, axes, body, infer_category(body, loop_names))
        self._add_task(task)
        return tensor

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
        with _blame(name):
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
                outs.append(
                    Tensor(out_name, normalize_shape(out_shape, f"output {out_name!r}"),
                           dtypes.normalize(dtype[0] if dtype else "float32"), self._id)
                )
            if len({t.name for t in outs}) != len(outs):
                raise WorkloadError(f"opaque outputs repeat a name: {[t.name for t in outs]}")
        self._add_task(OpaqueTask(name, fn, ins, tuple(outs)))
        return outs[0] if len(outs) == 1 else tuple(outs)

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

    def schedule(self) -> Any:
        """A new, empty `pw.Schedule` for this workload."""
        if _schedule_factory is None:
            raise WorkloadError("schedules are unavailable: import ptowsp (not only ptowsp.workloads)")
        return _schedule_factory(self)

    # -- queries ----------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """A digest of the definition (inputs, constants with their values' digests, tasks as written, outputs)
        that schedules and records key on."""
        return hashlib.sha256(str(self).encode()).hexdigest()

    @property
    def tasks(self) -> list[str]:
        """Task names in topological (definition) order."""
        return list(self._tasks)

    @property
    def inputs(self) -> list[str]:
        return list(self._inputs)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """{name: read-only array} of the constants, in declaration order (not among `inputs`)."""
        return dict(self._constants)

    @property
    def outputs(self) -> list[str]:
        return list(self._outputs)

    @property
    def graph(self) -> nx.DiGraph:
        """A frozen copy of the task graph over task and input names.

        Nodes carry `kind` ("input", "constant", "compute", "opaque"); task nodes carry
        `category`; each edge carries the `tensors` that flow along it.
        """
        return nx.freeze(self._graph.copy())

    def category(self, name: str) -> Category:
        return self.task(name).category

    def task(self, name: str) -> Task:
        if name not in self._tasks:
            raise WorkloadError(f"workload {self.name!r} has no task {name!r}; tasks: {', '.join(self._tasks)}")
        return self._tasks[name]

    def tensor(self, name: str) -> Tensor:
        if name not in self._tensors:
            raise WorkloadError(f"workload {self.name!r} has no tensor {name!r}")
        return self._tensors[name]

    def producer(self, tensor: str) -> str | None:
        """The task that writes `tensor`, or None for an input or a constant."""
        self.tensor(tensor)
        return self._producers.get(tensor)

    def __str__(self) -> str:
        lines = [f"workload {self.name}"]
        lines += [f"  input {t.name}{list(t.shape)} {t.dtype}" for t in map(self.tensor, self._inputs)]
        lines += [f"  constant {t.name}{list(t.shape)} {t.dtype} sha256:{self._constant_digests[t.name]}"
                  for t in map(self.tensor, self._constants)]
        for task in self._tasks.values():
            lines.append(f"  {task}    # {task.category.value}")
        lines.append(f"  output {', '.join(self._outputs) or '(none)'}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Workload({self.name!r}, tasks={self.tasks}, outputs={self._outputs})"

    # -- helpers ----------------------------------------------------------------
    def _claim(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise WorkloadError(f"{what} name must be an identifier, got {name!r}")
        if name in self._tensors or name in self._tasks:
            raise WorkloadError(f"workload {self.name!r} already has a tensor or task named {name!r}")

    def _own(self, t: object, role: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise WorkloadError(f"{role} must be a tensor of this workload, got {t!r}")
        if t.owner != self._id or self._tensors.get(t.name) != t:
            raise WorkloadError(f"tensor {t.name} used as {role} belongs to another workload")
        return t

    @staticmethod
    def _loop_names(name: str, shape: tuple[int, ...], fn: Callable[..., object]) -> tuple[str, ...]:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            raise WorkloadError(f"compute {name!r} needs a function of its loop variables, got {fn!r}") from None
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        # Parameters with defaults are the closure-binding idiom (`lambda i, f=f: ...`), not loops.
        params = [p for p in params if p.default is inspect.Parameter.empty]
        if any(p.kind not in positional for p in params):
            raise WorkloadError(f"compute {name!r}: give the function one named parameter per dimension (no *args)")
        if len(params) != len(shape):
            raise ShapeError(
                f"shape {shape} has {len(shape)} dimension(s) but the function takes "
                f"{len(params)} loop variable(s) ({', '.join(p.name for p in params)})"
            )
        return tuple(p.name for p in params)

    def _check_body(self, name: str, body: Expr, loop_names: tuple[str, ...]) -> None:
        """Tensors belong here, loop variables are this task's, reduce axes are bound."""
        for node in walk(body):
            if node.op is Op.LOAD:
                self._own(node.arg, "an operand")
            elif node.op is Op.VAR and node.arg[0] not in loop_names:
                raise WorkloadError(f"loop variable {node.arg[0]} belongs to another compute")
        self._check_reduce_axes(body, loop_names, frozenset())

    def _check_reduce_axes(self, e: Expr, loop_names: tuple[str, ...], bound: frozenset[str]) -> None:
        if e.op is Op.RVAR and e.arg[0] not in bound:
            raise WorkloadError(f"reduce axis {e.arg[0]} is used outside a pw.sum/max/min over it")
        if e.op is Op.REDUCE:
            axes = [a.arg[0] for a in e.src[1:]]
            clash = [a for a in axes if a in loop_names or a in bound]
            if clash:
                raise WorkloadError(f"reduce axis {clash[0]} has the name of an enclosing loop variable")
            self._check_reduce_axes(e.src[0], loop_names, bound | set(axes))
            return
        for s in e.src:
            self._check_reduce_axes(s, loop_names, bound)

    def _add_task(self, task: Task) -> None:
        self._tasks[task.name] = task
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
