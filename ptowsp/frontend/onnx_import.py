"""`pw.frontend.from_onnx`: an ONNX model as a Workload, node by node.

The model is data: it is parsed by the onnx package (protobuf), never
executed.  Graph inputs become `wl.input`s, initializers (and Constant
nodes) `wl.constant`s, and each node one or more tasks named after the node
(its name, else its op type and position), the task that makes a graph
output after that output.  The operators are in onnx_ops.py; an operator or
attribute it does not cover is a WorkloadError naming the node, its op type
and the attribute, never a wrong result.

A symbolic dimension of a graph input becomes a ptowsp size (onnx_sizes.py: one import and one build
for every batch size), unless `shapes={"input": (1, 3, 224, 224)}` binds it for a static build.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ptowsp.errors import InputError, PtowspError, WorkloadError
from ptowsp.frontend.onnx_budget import (
    DEFAULT_MAX_BYTES, DEFAULT_MAX_FOLD_SECONDS, check_fold, check_fold_time, fold_seconds,
)
from ptowsp.frontend.onnx_data import load, tensor_array
from ptowsp.frontend.onnx_narrow import NARROW_FLOAT_MODES, widened
from ptowsp.frontend.onnx_graph import describe, fold_batch_norms, node_reads, one_producer_each, schema_checked
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
            from ptowsp.frontend.onnx_sizes import size_name

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


def attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def text_attribute(node: onnx.NodeProto, name: str, default: str) -> str:
    """A string attribute as text (onnx gives bytes)."""
    value = attribute(node, name, default)
    return value.decode() if isinstance(value, bytes) else value


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


def from_onnx(model: str | os.PathLike | bytes | onnx.ModelProto,
              shapes: Mapping[str, Sequence[int]] | None = None, *, values: Mapping[str, object] | None = None,
              max_bytes: int = DEFAULT_MAX_BYTES, max_fold_seconds: float = DEFAULT_MAX_FOLD_SECONDS,
              narrow_floats: str = "float32") -> Workload:
    """The Workload an ONNX model computes (see the module docstring).  `values` fixes graph inputs to
    arrays (they become constants: a Reshape's shape, a ReduceSum's axes that the model takes as
    inputs; ValueNeeded names an input the import needs so).  `max_bytes` bounds every constant
    the import reads, computes or folds, `max_fold_seconds` the estimated time of each node computed at
    import (onnx_budget.py: an InputError before it is allocated or run).  `narrow_floats`: how a
    float16/bfloat16 graph computes, "float32" between its nodes (rounded where it leaves and at its
    Casts, as onnxruntime's CPU provider computes it: onnx_narrow.py) or rounded at "each_node"'s output."""
    registered_operators()  # every handler registered before the first node
    proto, source, folder = load(model)
    one_producer_each(proto.graph, source)
    if narrow_floats not in NARROW_FLOAT_MODES:
        raise InputError(f"narrow_floats must be one of {', '.join(map(repr, NARROW_FLOAT_MODES))}, "
                         f"got {narrow_floats!r}")
    if narrow_floats == "float32":
        proto = widened(proto)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InputError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    if isinstance(max_fold_seconds, bool) or not isinstance(max_fold_seconds, (int, float)) \
            or not max_fold_seconds > 0:
        raise InputError(f"max_fold_seconds must be a positive number of seconds, got {max_fold_seconds!r}")
    for out in proto.graph.output:
        kind = out.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):
            raise WorkloadError(f"{source}: output {out.name!r} is a {kind}, not a tensor; only tensors import")
    imp = Importer(proto, shapes or {}, source, folder, max_bytes, float(max_fold_seconds), values)
    schema_checked(proto, imp.opset)
    with _no_cycle_collection():
        import_nodes(imp, fold_batch_norms(list(proto.graph.node), imp.arrays, {o.name for o in proto.graph.output}))
    for out in proto.graph.output:
        value = imp.lookup(out.name)
        if value is None:
            raise WorkloadError(f"{source}: graph output {out.name!r} is produced by no node")
        if value.tensor.name != imp.outputs[out.name] or value.tensor.name in imp.wl.constants \
                or value.tensor.name in imp.wl.inputs:  # an input, constant or shared value: copy it out
            value = imp.compute(_copy_node(out.name), value.shape, lambda *i, v=value: v.at(i))
        imp.wl.output(value.tensor)
    return imp.wl


@contextlib.contextmanager
def _no_cycle_collection():
    """Python's cycle collector paused while the nodes are imported: each task adds thousands of
    expression objects that live as long as the workload, and the collector's full passes over
    them took a third of a 20k-node import (2.5 s, 1.6 s paused).  Resumed after, if it ran before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def registered_operators() -> list[str]:
    """The ONNX operators with a handler (onnx_ops.py and the modules beside it register theirs on
    import), sorted; operators defined by function bodies come on top (onnx_functions.py)."""
    from ptowsp.frontend import (  # noqa: F401 - register operators
        onnx_branches, onnx_control, onnx_elementwise, onnx_gridsample, onnx_indexing, onnx_quantized,
        onnx_host, onnx_ngrams, onnx_recurrent, onnx_reductions, onnx_resize, onnx_scatter, onnx_trigonometry)
    from ptowsp.frontend.onnx_shapes import OPS

    return sorted(OPS)


def import_nodes(imp: Importer, nodes: Sequence[onnx.NodeProto]) -> None:
    """Each node in turn: folded when everything it reads is a constant (shape arithmetic, constant
    subgraphs), else made by its operator's handler (onnx_ops.py and the modules beside it)."""
    from ptowsp.frontend import onnx_functions, onnx_sizes
    from ptowsp.frontend.onnx_shapes import OPS

    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            raise WorkloadError(f"{describe(node)}: operator domain {node.domain!r} is not supported (only the "
                                "default ONNX domain)")
        reads = node_reads(node)
        if reads and all(n in imp.arrays for n in reads) and not _scan_outputs(node) and not (
                node.op_type in _RECURRENCES and fold_seconds(node, imp.arrays)[0] > imp.max_fold_seconds):
            _fold(imp, node)  # every input is known: the node's outputs are constants (shape arithmetic)
            continue  # (a loop too long to fold, or one with scan outputs, is a scan: onnx_control.py)
        if onnx_sizes.fold(imp, node):  # shape arithmetic over symbolic sizes
            continue
        handler = OPS.get(node.op_type)
        if handler is None and onnx_functions.has_body(node.op_type, imp.opset):
            body = onnx_functions.expand(node, imp.opset, lambda name: imp.value_type(node, name))
            imp.producers.update({out: inner for inner in body for out in inner.output if out})
            import_nodes(imp, body)
            continue  # an operator the standard defines by a function body: its nodes (onnx_functions.py)
        if handler is None and all(imp.value(node, k).shape == () for k, n in enumerate(node.input)
                                   if n and n not in imp.arrays):
            for k, name in enumerate(node.input):  # scalars that steer what it makes (MelWeightMatrix's sizes):
                if name:  # given as values (ValueNeeded), they fold it
                    imp.array(node, k, f"a scalar parameter of {node.op_type}, which is folded at import")
        if handler is None:
            raise WorkloadError(f"{describe(node)}: operator {node.op_type!r} is not supported; supported: "
                                f"{', '.join(sorted(OPS))}")
        handler(imp, node)


_RECURRENCES = ("Loop", "Scan")


def _scan_outputs(node: onnx.NodeProto) -> bool:
    """Whether a Loop stacks per-iteration values: onnx's reference evaluator (onnx 1.23) joins them with
    numpy's vstack, not stack, so 0-d values come out (n, 1) and 2-d ones (2n, m); such a loop is
    imported as a scan (onnx_control.py), never folded."""
    if node.op_type != "Loop":
        return False
    body = next(a.g for a in node.attribute if a.name == "body")
    return len(body.output) > len(node.input) - 1  # outputs: the condition, the carried values, the scans


def _fold(imp: Importer, node: onnx.NodeProto) -> None:
    """Compute a node whose inputs are all constants with onnx's reference evaluator (the onnx package's
    own implementation of the standard operators; nothing from the model runs)."""
    from onnx.reference import ReferenceEvaluator

    check_fold(node, imp.arrays, imp.opset, imp.max_bytes, describe(node))
    check_fold_time(node, imp.arrays, imp.max_fold_seconds, describe(node))
    names = sorted(node_reads(node))  # a Loop's or If's body reads outer values by name too
    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(
            imp.arrays[n].dtype), imp.arrays[n].shape) for n in names],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", imp.opset)])
    try:
        results = ReferenceEvaluator(model).run(None, {n: imp.arrays[n] for n in names})
    except Exception as e:  # noqa: BLE001 - the evaluator's own error: report it against the node
        raise WorkloadError(f"{describe(node)}: folding it over constant inputs failed: {type(e).__name__}: {e}") \
            from None
    for name, value in zip([o for o in node.output if o], results, strict=True):
        if not isinstance(value, (np.ndarray, np.generic)):  # a sequence or an optional value
            raise WorkloadError(f"{describe(node)}: output {name!r} is a {type(value).__name__}, not a tensor; "
                                "only tensors import")
        imp.constant(name, np.asarray(value))


def _copy_node(output: str) -> onnx.NodeProto:
    return onnx.helper.make_node("Identity", [output], [output], name=output)
