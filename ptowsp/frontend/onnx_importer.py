"""The importer's state while an ONNX graph becomes a Workload: its values (tensors, constants and
shapes by ONNX name), the tasks it adds and their names, and what every operator's handler reads
through it (`Importer`).  The node walk is onnx_walk.py, `from_onnx` onnx_import.py."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ptowsp.errors import InputError, PtowspError, WorkloadError
from ptowsp.frontend.onnx_budget import DEFAULT_MAX_BYTES, DEFAULT_MAX_FOLD_SECONDS
from ptowsp.frontend.onnx_data import tensor_array
from ptowsp.frontend.onnx_graph import describe, node_reads
from ptowsp.frontend.onnx_sizes import size_name
from ptowsp.te import Expr, Tensor, sizes
from ptowsp.te.names import fit_name
from ptowsp.workloads import Workload
from ptowsp.workloads.arrays import adopt
from ptowsp.workloads.checks import with_parameters


class ConstantNeeded(WorkloadError):
    """A node needs, at import, a value that is computed at run time (not from a graph input's value,
    which ValueNeeded names): a Slice's starts that a loop's iteration number gives."""


class ValueNeeded(WorkloadError):
    """The import needs graph input `input`'s value (it steers shapes or axes): give it with
    `from_onnx(..., values={input: array})`."""

    def __init__(self, input: str, message: str):  # noqa: A002 - the input's name
        super().__init__(message)
        self.input = input


@dataclass(frozen=True)
class Value:
    """An ONNX value: the tensor holding it and its ONNX shape (a scalar is a 0-d tensor); a dimension
    is an int or a symbolic size (onnx_sizes.py)."""

    tensor: Tensor
    shape: tuple[int | Expr, ...]

    def at(self, idx: Sequence[Expr | int]) -> Expr:
        return self.tensor[tuple(idx)]

    def broadcast_at(self, idx: Sequence[Expr | int], out: Sequence[int]) -> Expr:
        return broadcast_read(self, idx, out)

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


def broadcast_read(value, idx: Sequence[Expr | int], out: Sequence[int]) -> Expr:
    """`value`'s element for output index `idx` under numpy broadcasting to shape `out`."""
    offset = len(out) - len(value.shape)
    return value.at([0 if dim == 1 else idx[offset + d] for d, dim in enumerate(value.shape)])


class Importer:
    """The state of one import: the workload, the values by ONNX name, constant arrays, names taken."""

    def __init__(self, model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], source: str,
                 folder: Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_fold_seconds: float = DEFAULT_MAX_FOLD_SECONDS, values: Mapping[str, object] | None = None):
        self.model, self.source, self.folder, self.max_bytes = model, source, folder, max_bytes
        self.max_fold_seconds = max_fold_seconds
        graph = model.graph
        self.wl = Workload(_identifier(graph.name or "onnx_model", set()))
        self.values: dict[str, Value] = {}
        self.arrays: dict[str, np.ndarray] = {}  # constant values known at import time, by ONNX name
        self.deferred: dict[str, Callable[[], Value]] = {}  # values made when first read (defer)
        self.sizes: dict[str, np.ndarray] = {}  # shape arithmetic over symbolic sizes (onnx_sizes.py)
        self.producers = {out: node for node in graph.node for out in node.output if out}
        self.taken: set[str] = set()
        self.suffixes: dict[str, int] = {}  # base name -> the last number it was given (_identifier)
        self.outputs = {o.name: _identifier(o.name, set()) for o in graph.output}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        known = onnx.defs.onnx_opset_version()  # the newest opset the onnx package (and so its evaluator) knows
        if self.opset > known or model.ir_version > onnx.IR_VERSION:
            raise InputError(f"{source}: opset {self.opset}, IR version {model.ir_version}: newer than this importer "
                             f"knows (opset {known}, IR version {onnx.IR_VERSION}); its operators' meaning is unknown")
        self.graph_inputs = {i.name for i in graph.input}
        for what, given in (("shapes", shapes), ("values", values or {})):
            unknown = sorted(set(given) - self.graph_inputs)
            if unknown:
                raise InputError(f"{source}: {what} names {unknown[0]!r}, which is not an input of the model "
                                 f"(inputs: {', '.join(i.name for i in graph.input)})")
        for init in graph.initializer:
            self.constant(init.name, self.tensor_array(init, f"initializer {init.name!r}"))
        for inp in graph.input:
            if inp.name in (values or {}):
                self.constant(inp.name, self._given(inp, values[inp.name]))
            elif inp.name not in self.arrays:  # (older exporters list initializers as inputs too)
                self._input(inp, shapes)

    def tensor_array(self, tensor: onnx.TensorProto, what: str) -> np.ndarray:
        """A tensor's value, sized against the budget, its external data read from the model's folder
        only (onnx_data.py)."""
        return tensor_array(tensor, self.folder, self.source, what, self.max_bytes)

    # -- names and values ------------------------------------------------------------------
    def name(self, wanted: str) -> str:
        name = _identifier(wanted, self.taken, self.suffixes)
        self.taken.add(name)
        return name

    def constant(self, onnx_name: str, array: np.ndarray) -> None:
        """A value known now; it becomes a workload constant only when a task reads it (`lookup`), so
        initializers that only steer the import (shapes, axes, folded batch norms) leave nothing behind."""
        self.arrays[onnx_name] = np.asarray(array)

    def defer(self, onnx_name: str, make: Callable[[], Value]) -> None:
        """`make` the value when something first reads it: a dequantized tensor that every reader takes in
        its integer form (onnx_quantized.py) costs nothing."""
        self.deferred[onnx_name] = make

    def lookup(self, onnx_name: str) -> Value | None:
        """The value named `onnx_name` (a constant is declared on first use), or None if nothing made it."""
        if onnx_name in self.deferred:
            self.values[onnx_name] = self.deferred.pop(onnx_name)()
        if onnx_name not in self.values and onnx_name in self.arrays:
            array = self.arrays[onnx_name]
            # a graph output's name stays free for the task that copies the constant out (from_onnx)
            name = f"{onnx_name}_constant" if onnx_name in self.outputs else onnx_name
            self.values[onnx_name] = Value(self.wl.constant(self.name(name), adopt(array)), tuple(array.shape))
        return self.values.get(onnx_name)

    def _input(self, inp: onnx.ValueInfoProto, shapes: Mapping[str, Sequence[int]]) -> None:
        kind = inp.type.WhichOneof("value")
        if kind != "tensor_type":
            raise WorkloadError(f"{self.source}: input {inp.name!r} is a {kind}, not a tensor; only tensors import")
        t = inp.type.tensor_type
        dtype = element_dtype(t.elem_type, f"input {inp.name!r}")
        if inp.name in shapes:
            shape = self._bound(inp, shapes[inp.name])
        else:  # a symbolic dimension becomes a size (onnx_sizes.py)
            shape = tuple(d.dim_value if d.HasField("dim_value") else size_name(inp, k)
                          for k, d in enumerate(t.shape.dim))
        tensor = self.wl.input(self.name(inp.name), shape, dtype)
        self.values[inp.name] = Value(tensor, tensor.shape)

    def _given(self, inp: onnx.ValueInfoProto, value: object) -> np.ndarray:
        """`values=`'s array for the input: of its declared dtype, rank and static sizes."""
        dtype = element_dtype(inp.type.tensor_type.elem_type, f"input {inp.name!r}")
        array = np.asarray(value)
        dims = inp.type.tensor_type.shape.dim
        if array.dtype != np.dtype(dtype) or array.ndim != len(dims) or any(
                d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, array.shape, strict=True)):
            declared = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
            raise InputError(f"{self.source}: values[{inp.name!r}] is a {array.dtype} array of shape {array.shape}; "
                             f"the input is {dtype} of shape {declared}")
        return array.copy()

    def _bound(self, inp: onnx.ValueInfoProto, given: Sequence[int]) -> tuple[int, ...]:
        """`shapes=`'s shape for the input: positive integers that bind its symbolic dimensions and repeat
        its static ones (InputError otherwise: a rank or size the model does not declare is no binding)."""
        try:
            shape = tuple(int(d) for d in given)
        except (TypeError, ValueError):
            raise InputError(f"{self.source}: shapes[{inp.name!r}] = {given!r} is not a sequence of integers") from None
        if any(d < 1 for d in shape):
            raise InputError(f"{self.source}: shapes[{inp.name!r}] = {list(shape)} has a dimension below 1")
        t = inp.type.tensor_type
        if not t.HasField("shape"):  # the model declares no shape: any binding
            return shape
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
        if len(declared) != len(shape):
            raise InputError(f"{self.source}: shapes[{inp.name!r}] = {list(shape)} has rank {len(shape)}; the model "
                             f"declares {declared} (rank {len(declared)})")
        for d, (want, got) in enumerate(zip(declared, shape, strict=True)):
            if isinstance(want, int) and want != got:
                raise InputError(f"{self.source}: shapes[{inp.name!r}] = {list(shape)} gives dimension {d} as {got}; "
                                 f"the model declares it {want} (shapes= binds symbolic dimensions only)")
        return shape

    def value(self, node: onnx.NodeProto, k: int) -> Value:
        name = node.input[k]
        found = self.lookup(name)
        if found is None:
            raise WorkloadError(f"{describe(node)}: input {k} ({name!r}) is not produced by any earlier node, "
                                "initializer or graph input (the graph is not in topological order?)")
        return found

    def value_type(self, node: onnx.NodeProto, name: str) -> tuple[np.dtype, tuple]:
        """The dtype and shape of the value `name` that `node` reads (a constant's or a computed one's)."""
        if name in self.arrays:
            return self.arrays[name].dtype, tuple(self.arrays[name].shape)
        found = self.value(node, list(node.input).index(name))
        return np.dtype(found.dtype), found.shape

    def optional(self, node: onnx.NodeProto, k: int) -> Value | None:
        return self.value(node, k) if len(node.input) > k and node.input[k] else None

    def array(self, node: onnx.NodeProto, k: int, what: str) -> np.ndarray | None:
        """Input k's value when it is known at import time (an initializer or Constant); None when absent."""
        if len(node.input) <= k or not node.input[k]:
            return None
        name = node.input[k]
        if name in self.sizes:
            raise WorkloadError(f"{describe(node)}: input {k} ({what}, {name!r}) depends on the symbolic dimensions "
                                f"{sorted(set().union(*(sizes.names_in(x) for x in self.sizes[name].reshape(-1))))}, "
                                "which this operator does not take; bind them with shapes=")
        if name not in self.arrays:
            if name in self.graph_inputs:
                raise ValueNeeded(name, f"{describe(node)}: input {k} ({what}, {name!r}) must be known at import: "
                                        f"it is the graph input {name!r}; give its value with "
                                        f"from_onnx(..., values={{{name!r}: ...}})")
            source = self.steering_input(name)
            if source is not None:
                raise ValueNeeded(source, f"{describe(node)}: input {k} ({what}, {name!r}) must be known at import: "
                                          f"it is computed from the value of the graph input {source!r}; give that "
                                          f"value with from_onnx(..., values={{{source!r}: ...}})")
            raise ConstantNeeded(f"{describe(node)}: input {k} ({what}, {name!r}) must be a constant (an initializer "
                                "or a Constant node): it is computed at run time, which this importer does not support")
        return self.arrays[name]

    def steering_input(self, name: str) -> str | None:
        """The first graph input (in declared order) whose value the value `name` is computed from, or None:
        giving it (values=) makes `name` a constant.  Shape and Size read only their input's shape, which
        the import knows already, so the walk back through the producers stops there."""
        seen, todo, found = set(), [name], set()
        while todo:
            current = todo.pop()
            if current in seen or current in self.arrays:
                continue
            seen.add(current)
            if current in self.graph_inputs:
                found.add(current)
            producer = self.producers.get(current)
            if producer is not None and producer.op_type not in ("Shape", "Size"):
                todo.extend(node_reads(producer))
        return next((i.name for i in self.model.graph.input if i.name in found), None)

    def task_name(self, node: onnx.NodeProto, output: int = 0, part: str = "") -> str:
        """A fresh name for a task of `node`: its graph output's, else the node's (and the part's)."""
        onnx_name = node.output[output] if len(node.output) > output and not part else ""
        return self.name(self.outputs.get(onnx_name) or f"{node.name or node.op_type}{'_' + part if part else ''}")

    def compute(self, node: onnx.NodeProto, shape: Sequence[int], fn: Callable[..., object], output: int = 0,
                part: str = "") -> Value:
        """A task computing `fn(*loop indices)` over `shape`, named after the node (or its graph output)."""
        shape = tuple(d if isinstance(d, Expr) else int(d) for d in shape)
        body = with_parameters(lambda *idx: fn(*idx), [f"i{d}" for d in range(len(shape))])
        try:
            tensor = self.wl.compute(self.task_name(node, output, part), shape, body)
        except PtowspError as e:
            raise WorkloadError(f"{describe(node)}: {e}") from e
        value = Value(tensor, shape)
        if not part:
            self.values[node.output[output]] = value
        return value


def _identifier(wanted: str, taken: set[str], suffixes: dict[str, int] | None = None) -> str:
    """`wanted` as a ptowsp name: other characters become _, a leading digit gets a prefix, unique in taken.
    `suffixes` remembers the last number given to each base, so a model of n nodes of one name takes
    O(n) steps to name them, not O(n^2)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", wanted).strip("_") or "t"
    if base[0].isdigit():
        base = "t_" + base
    base = fit_name(base)  # room for the suffixes the cpu's passes add: fresh_name shortens those too
    k = 0 if suffixes is None else suffixes.get(base, 0)  # the last number given to this base
    name = base if k == 0 else fit_name(f"{base}_{k}")
    while name in taken or name in _RESERVED:
        k += 1
        name = fit_name(f"{base}_{k}")
    if suffixes is not None:
        suffixes[base] = k
    return name


_RESERVED = {"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
             "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
             "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield"}


def element_dtype(elem_type: int, what: str) -> str:
    """The numpy name of an ONNX element type; WorkloadError naming `what` for one numpy lacks."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        raise WorkloadError(f"{what}: ONNX element type {elem_type} has no numpy equivalent ptowsp supports") \
            from None
