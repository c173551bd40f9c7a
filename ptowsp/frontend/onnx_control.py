"""ONNX's `Loop` and `Scan` as ptowsp scans: a loop body is one step of a recurrence, not an unrolled fold.

A body graph is imported once, by a `BodyImporter`, into *inline* values (`Inline`): expressions of
their indices, never tasks, so that the whole body becomes the update expression of one
`wl.scan`.  The carried values (ONNX's loop-carried dependencies, Scan's state) are packed into
the scan's tensor `state[t, slot, element]` (each value flattened, the slots as wide as the
widest; step t holds the values before iteration t), and the body reads them at the step the
expression is being built for (`Recurrence.time`).  Per-iteration outputs (Loop's and Scan's scan
outputs) are the body evaluated again over the finished state, one task each: nothing in the body
runs twice per step at run time except what the outputs need.

So a `Loop` of 2^20 iterations costs the import a few milliseconds, and its history 2^20 steps
of the state at run time (sized against the import budget, onnx_budget.py); a trip count that is
not a constant is refused, as is a data-dependent exit together with scan outputs (their length
would be data).  An exit condition computed by the body is kept: once it is false the state
stops changing (a `running` slot), as the loop would have stopped.

A body that needs its iteration number as a value at import (a Slice whose starts count the
iterations: a scan's step is an index, never a constant) is unrolled instead, when the trip count
is at most UNROLL_LIMIT: one copy of the body per iteration, the number a constant in each.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_budget import check_size
from ptowsp.frontend.onnx_graph import attribute, describe
from ptowsp.frontend.onnx_importer import ConstantNeeded, Importer, Value, ValueNeeded, broadcast_read, element_dtype
from ptowsp.frontend.onnx_walk import import_nodes
from ptowsp.frontend.onnx_ops import op
from ptowsp.frontend.onnx_shapes import regrouped
from ptowsp.te import Expr, Op, const, dtypes, lift, substitute, walk

_FRESH = itertools.count()
# carried values of different dtypes share one state tensor as float64 when it holds each exactly
_EXACT_IN_FLOAT64 = {"bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "bfloat16", "float32",
                     "float64"}


class Inline:
    """An ONNX value inside a loop body: `read(*idx)` builds its element as an expression (no task).
    Each read renames the reduce axes its reductions bind, so a body's contractions nest without
    clashing (a matmul of a matmul: both handlers name their axis k)."""

    def __init__(self, shape: Sequence[int], dtype: str, read: Callable[..., object]):
        self.shape, self.dtype, self.read = tuple(shape), dtype, read

    def at(self, idx: Sequence[Expr | int]) -> Expr:
        element = lift(self.read(*idx))
        # the axes its own reductions bind (not those of an enclosing one, passed in through idx)
        # (by identity: an enclosing axis may have the same name and extent, both handlers' "k")
        fresh = {id(axis): Expr(Op.RVAR, axis.dtype, (), (f"r{next(_FRESH)}", axis.arg[1]))
                 for e in walk(element) if e.op is Op.REDUCE for axis in e.src[1:]}
        return substitute(element, lambda e: fresh.get(id(e))) if fresh else element

    def broadcast_at(self, idx: Sequence[Expr | int], out: Sequence[int]) -> Expr:
        return broadcast_read(self, idx, out)


class BodyImporter(Importer):
    """Imports a body graph as inline values: it shares the enclosing import's workload, names, budgets
    and values (a body may read any value of the enclosing graph by name), and keeps its own."""

    def __init__(self, parent: Importer, graph: onnx.GraphProto, inputs: Sequence[Inline]):
        # not Importer.__init__: there is no model to open, only a scope to add
        self.parent, self.model, self.source, self.folder = parent, parent.model, parent.source, parent.folder
        self.max_bytes, self.max_fold_seconds, self.opset = parent.max_bytes, parent.max_fold_seconds, parent.opset
        self.wl, self.taken, self.suffixes = parent.wl, parent.taken, parent.suffixes
        self.graph_inputs = parent.graph_inputs
        self.local_arrays: dict[str, np.ndarray] = {}
        self.arrays = collections.ChainMap(self.local_arrays, parent.arrays)
        self.sizes = collections.ChainMap({}, parent.sizes)
        self.values, self.deferred, self.outputs = {}, {}, {}
        self.producers = {out: node for node in graph.node for out in node.output if out}
        for init in graph.initializer:
            self.constant(init.name, self.tensor_array(init, f"loop body initializer {init.name!r}"))
        for given, value in zip(graph.input, inputs, strict=True):
            self.values[given.name] = value

    def lookup(self, onnx_name: str):
        if onnx_name in self.values or onnx_name in self.deferred or onnx_name in self.local_arrays:
            return super().lookup(onnx_name)
        return self.parent.lookup(onnx_name)

    def compute(self, node: onnx.NodeProto, shape: Sequence[int], fn: Callable[..., object], output: int = 0,
                part: str = "") -> Inline:
        shape = tuple(int(d) if not isinstance(d, Expr) else d for d in shape)
        try:  # built once over placeholder indices: the dtype, and the body's errors at import
            probe = lift(fn(*(_var(f"i{d}", n) for d, n in enumerate(shape))))
        except pw.PtowspError as e:
            raise WorkloadError(f"{describe(node)} in a loop body: {e}") from e
        value = Inline(shape, probe.dtype, fn)
        if not part:
            self.values[node.output[output]] = value
        return value


def _var(name: str, extent: int) -> Expr:
    return Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (name, extent))


class Recurrence:
    """`trips` iterations of a body over carried values (their initial `Value`s), as one ptowsp scan."""

    def __init__(self, imp: Importer, node: onnx.NodeProto, trips: int, initial: Sequence[Value],
                 running: Inline | None = None):
        self.imp, self.node, self.trips = imp, node, trips
        self.slots = [*initial, *([running] if running is not None else [])]
        self.shapes = [tuple(int(d) for d in v.shape) for v in self.slots]
        self.width = max([math.prod(s) for s in self.shapes] + [1])
        self.dtype = _common_dtype(node, [v.dtype for v in self.slots])
        self.has_running = running is not None
        self.time: Expr = _var("t", 1)  # the step the body's expressions are being built for
        self.state = None

    def read(self, k: int, time: Expr, idx: Sequence[Expr | int]) -> Expr:
        """Carried value k at step `time` (ONNX's dtype); a placeholder while the body is imported, before
        the scan exists (BodyImporter only learns dtypes from it)."""
        if self.state is None:
            return const(0, self.slots[k].dtype)
        element = self.state[time, k, regrouped(idx, self.shapes[k], (self.width,))[0]]
        return element if self.slots[k].dtype == self.dtype else pw.cast(element, self.slots[k].dtype)

    def carried(self, k: int) -> Inline:
        """Carried value k at the step being built (what the body graph's input reads)."""
        return Inline(self.shapes[k], self.slots[k].dtype, lambda *idx: self.read(k, self.time, idx))

    def run(self, body: Callable[[], Sequence[Inline]]) -> None:
        """Make the scan: `body()` gives the carried values after one iteration, built at `self.time`
        (the running flag's next value last, when there is one)."""
        check_size((self.trips + 1, len(self.slots), self.width), self.dtype, self.imp.max_bytes,
                   f"{describe(self.node)}: the history of its {self.trips:,} iterations")
        for k, (new, shape) in enumerate(zip(body(), self.shapes, strict=True)):
            if tuple(new.shape) != shape:
                raise WorkloadError(f"{describe(self.node)}: loop-carried value {k} changes shape from {list(shape)} "
                                    f"to {list(new.shape)} in an iteration; ptowsp's scans keep one shape")

        def packed(values: Sequence[Value | Inline], s: Expr, f: Expr, hold: Callable[[int], Expr] | None) -> Expr:
            out: Expr | None = None
            for k in reversed(range(len(values))):
                size = math.prod(self.shapes[k])
                at = f if size == self.width else pw.minimum(f, size - 1)
                element = values[k].at(regrouped([at], (size,), self.shapes[k]))
                element = pw.cast(element, self.dtype) if element.dtype != self.dtype else element
                if hold is not None and not (self.has_running and k == len(values) - 1):
                    element = pw.where(self.read(len(values) - 1, self.time, []), element, hold(k))
                if size < self.width:
                    element = pw.where(f < size, element, const(0, self.dtype))
                out = element if out is None else pw.where(s == k, element, out)
            return out

        def update(t, s, f):
            self.time = t - 1
            hold = (lambda k: self.state[t - 1, k, f]) if self.has_running else None
            return packed(body(), s, f, hold)

        name = self.imp.name(f"{self.node.name or self.node.op_type}_state")
        try:
            self.state = self.imp.wl.scan(name, (self.trips + 1, len(self.slots), self.width), axis="t",
                                          init=lambda s, f: packed(self.slots, s, f, None), update=update)
        except pw.PtowspError as e:
            raise WorkloadError(f"{describe(self.node)}: {e}") from e

    def final(self, k: int, output: int, part: str = "") -> Value | None:
        """Node output `output`: carried value k after the last iteration (a task of its own, not the node's
        output, with a `part` name)."""
        if len(self.node.output) > output and self.node.output[output]:
            return self.imp.compute(self.node, self.shapes[k], lambda *idx: self.read(k, self.trips, idx),
                                    output=output, part=part)
        return None

    def stacked(self, value: Inline, output: int, axis: int = 0, reverse: bool = False,
                part: str = "") -> Value | None:
        """Node output `output`: the per-iteration `value` of every iteration, stacked along `axis`."""
        if not (len(self.node.output) > output and self.node.output[output]):
            return None
        if self.trips == 0:
            raise WorkloadError(f"{describe(self.node)}: a scan output of 0 iterations is an empty tensor, which "
                                "ptowsp does not make")
        shape = list(value.shape)
        shape.insert(axis, self.trips)

        def element(*idx):
            i = idx[axis]
            self.time = (self.trips - 1 - i) if reverse else i
            return value.at([*idx[:axis], *idx[axis + 1:]])

        return self.imp.compute(self.node, shape, element, output=output, part=part)


def _common_dtype(node: onnx.NodeProto, kinds: Sequence[str]) -> str:
    if len(set(kinds)) == 1:
        return kinds[0]
    if set(kinds) <= _EXACT_IN_FLOAT64:
        return "float64"
    raise WorkloadError(f"{describe(node)}: loop-carried values of dtypes {sorted(set(kinds))} share one state, "
                        "which holds them exactly only when float64 holds each (not 64-bit integers)")


def _body(imp: Importer, node: onnx.NodeProto, inputs: Sequence[Inline]) -> tuple[BodyImporter, onnx.GraphProto]:
    graph = attribute(node, "body")
    if len(graph.input) != len(inputs):
        raise WorkloadError(f"{describe(node)}: its body takes {len(graph.input)} inputs; {len(inputs)} are given")
    body = BodyImporter(imp, graph, inputs)
    import_nodes(body, list(graph.node))
    return body, graph


def _outputs(body: BodyImporter, node: onnx.NodeProto, graph: onnx.GraphProto) -> list[Inline]:
    found = []
    for out in graph.output:
        value = body.lookup(out.name)
        if value is None:
            raise WorkloadError(f"{describe(node)}: body output {out.name!r} is produced by no node")
        if not isinstance(value, Inline):  # a constant or an enclosing graph's value, passed on
            value = _part(value)
        found.append(value)
    return found


@op("Loop")
def loop(imp: Importer, node: onnx.NodeProto) -> None:
    trip_count = imp.array(node, 0, "trip count M")
    if trip_count is None:
        raise WorkloadError(f"{describe(node)}: a Loop without a trip count M runs until its condition turns false, "
                            "a number of steps only the data decides, which ptowsp's scans do not take; give M")
    trips = max(0, int(np.asarray(trip_count).reshape(-1)[0]))
    graph = attribute(node, "body")
    if len(graph.output) > len(node.input) - 1 and len(node.input) > 1 and node.input[1]:
        # with scan outputs, the initial condition sets their length (0 or the trip count): a value
        imp.array(node, 1, "the initial condition, which sets the length of its scan outputs")
    given = imp.optional(node, 1)
    if given is not None and node.input[1] in imp.arrays:
        if not bool(np.asarray(imp.arrays[node.input[1]]).all()):
            trips = 0  # false before the first iteration
        given = None
    carried = [imp.value(node, k) for k in range(2, len(node.input))]
    running = None
    if given is not None or not _stays_true(graph):
        running = Inline((), "bool", (lambda: const(True, "bool")) if given is None else
                         (lambda: given.at([0] * len(given.shape))))
    if running is None and (trips == 0 or trips <= UNROLL_LIMIT and
                            _needs_the_iteration_as_a_value(imp, node, graph, carried)):
        _unrolled(imp, node, graph, trips, carried)
        return
    rec = Recurrence(imp, node, trips, carried, running)
    iteration = Inline((), "int64", lambda: pw.cast(rec.time, "int64"))
    still = Inline((), "bool", (lambda: rec.read(len(carried), rec.time, [])) if running is not None
                   else (lambda: const(True, "bool")))
    body, graph = _body(imp, node, [iteration, still, *(rec.carried(k) for k in range(len(carried)))])
    outs = _outputs(body, node, graph)
    new, per_step = outs[1:1 + len(carried)], outs[1 + len(carried):]
    if per_step and running is not None:
        raise WorkloadError(f"{describe(node)}: its condition is computed, so the length of its scan outputs is "
                            "data, which ptowsp's scans do not give")
    if running is not None:
        condition = outs[0]
        new = [*new, Inline((), "bool", lambda: still.at([]) & condition.at([0] * len(condition.shape)))]
    rec.run(lambda: new)
    for k in range(len(carried)):
        rec.final(k, k)
    for j, value in enumerate(per_step):
        rec.stacked(value, len(carried) + j)


UNROLL_LIMIT = 64  # the most iterations a Loop is unrolled to (each iteration's nodes are tasks of their own)


def _needs_the_iteration_as_a_value(imp: Importer, node: onnx.NodeProto, graph: onnx.GraphProto,
                                    carried: Sequence[Value]) -> bool:
    """Whether the body, imported as one step of a scan, refuses to compute something from the
    iteration number that it needs at import (a Slice's starts: ConstantNeeded or ValueNeeded).
    The trial imports the body into inline values only, which leave no task behind."""
    try:
        _body(imp, node, _loop_inputs(carried))
    except (ConstantNeeded, ValueNeeded):
        return True
    except WorkloadError:
        pass  # something else: the scan's own import refuses it, saying what
    return False


def _unrolled(imp: Importer, node: onnx.NodeProto, graph: onnx.GraphProto, trips: int,
              carried: Sequence[Value]) -> None:
    """The loop as `trips` copies of its body, each with its iteration number a constant (what a Slice
    whose starts count the iterations needs at import); each iteration's carried values are tasks.  No
    copy at all for 0 iterations: the initial values, and empty scan outputs."""
    stacked: list[list[Value]] = []
    for k in range(trips):
        body = BodyImporter(imp, graph, _loop_inputs(carried))
        for given, value in ((graph.input[0].name, np.array(k, np.int64)), (graph.input[1].name, np.array(True))):
            del body.values[given]
            body.local_arrays[given] = value
        import_nodes(body, list(graph.node))
        outs = _outputs(body, node, graph)
        carried = [imp.compute(node, v.shape, lambda *i, v=v: v.at(i), part=f"iteration{k}_{j}")
                   for j, v in enumerate(outs[1:1 + len(carried)])]
        stacked.append([imp.compute(node, v.shape, lambda *i, v=v: v.at(i), part=f"iteration{k}_scan{j}")
                        for j, v in enumerate(outs[1 + len(carried):])])
    for k, value in enumerate(carried):
        if len(node.output) > k and node.output[k]:
            imp.compute(node, value.shape, lambda *i, v=value: v.at(i), output=k)
    for j, declared in enumerate(graph.output[1 + len(carried):]):
        out = len(carried) + j
        if not (len(node.output) > out and node.output[out]):
            continue
        if trips == 0:  # no iteration: empty, in the shape and type the body declares
            t = declared.type.tensor_type
            if not all(d.HasField("dim_value") for d in t.shape.dim):
                raise WorkloadError(f"{describe(node)}: no iteration runs, and the body does not declare the shape "
                                    f"of its scan output {declared.name!r}, which sets the empty output's")
            dtype = element_dtype(t.elem_type, f"{describe(node)}: scan output {declared.name!r}")
            imp.compute(node, (0, *(d.dim_value for d in t.shape.dim)), lambda *i, d=dtype: const(0, d), output=out)
        else:
            _stacked_parts(imp, node, [step[j] for step in stacked], out)


def _loop_inputs(carried: Sequence[Value]) -> list[Inline]:
    """A Loop body's inputs for an import outside a scan: iteration 0, the condition true, the carried
    values as they are (the unrolled copies replace the first two by constants)."""
    return [Inline((), "int64", lambda: const(0, "int64")), Inline((), "bool", lambda: const(True, "bool")),
            *(_part(v) for v in carried)]


def _part(v: Value, first: int | None = None) -> Inline:
    """v, or with `first` its element `first` along axis 0, as an inline value."""
    if first is None:
        return Inline(v.shape, v.dtype, lambda *idx: v.at(idx))
    return Inline(v.shape[1:], v.dtype, lambda *idx: v.at([first, *idx]))


def _stacked_parts(imp: Importer, node: onnx.NodeProto, parts: Sequence[Value], output: int) -> None:
    """Node output `output`: the parts (one shape) stacked along a new first axis."""
    def element(k, *idx):
        pick = parts[-1].at(idx)
        for n in reversed(range(len(parts) - 1)):
            pick = pw.where(k == n, parts[n].at(idx), pick)
        return pick
    imp.compute(node, (len(parts), *parts[0].shape), element, output=output)


def _stays_true(graph: onnx.GraphProto) -> bool:
    """Whether a Loop body's condition output is its condition input passed on, or the constant true:
    then the loop runs its trip count, and its scan outputs have that length."""
    producers = {o: node for node in graph.node for o in node.output}
    out = graph.output[0].name
    while out in producers and producers[out].op_type == "Identity":
        out = producers[out].input[0]
    if out == graph.input[1].name:
        return True
    made = producers.get(out)
    if made is not None and made.op_type == "Constant" and attribute(made, "value") is not None:
        return bool(onnx.numpy_helper.to_array(attribute(made, "value")).all())
    constant = next((i for i in graph.initializer if i.name == out), None)
    return constant is not None and bool(onnx.numpy_helper.to_array(constant).all())


@op("Scan")
def scan(imp: Importer, node: onnx.NodeProto) -> None:
    count = int(attribute(node, "num_scan_inputs"))
    if imp.opset >= 9:
        first = len(node.input) - count
        states, scanned = [imp.value(node, k) for k in range(first)], [imp.value(node, k) for k in
                                                                       range(first, len(node.input))]
        _scan(imp, node, states, scanned, attribute(node, "scan_input_axes", [0] * count),
              attribute(node, "scan_input_directions", [0] * count),
              attribute(node, "scan_output_axes", [0] * (len(node.output) - len(states))),
              attribute(node, "scan_output_directions", [0] * (len(node.output) - len(states))))
        return
    # opset 8: axis 0 of every value is a batch, each element scanned on its own along axis 1
    first = len(node.input) - count
    values = [imp.value(node, k) for k in range(1, len(node.input))]
    batch = values[0].shape[0]
    if any(v.shape[0] != batch for v in values):
        raise WorkloadError(f"{describe(node)}: Scan (opset 8) takes one batch axis first; its inputs have "
                            f"{sorted({v.shape[0] for v in values})} elements there")
    lengths = imp.array(node, 0, "sequence_lens")
    full = values[-1].shape[1]
    if lengths is not None and np.any(lengths != full):
        raise WorkloadError(f"{describe(node)}: sequence_lens {lengths.tolist()}: only sequences of the full length "
                            f"{full} are supported")
    directions = attribute(node, "directions", [0] * count)
    parts = [_scan(imp, node, [_part(v, b) for v in values[:first - 1]],
                   [_part(v, b) for v in values[first - 1:]], [0] * count, directions,
                   [0] * (len(node.output) - first + 1), [0] * (len(node.output) - first + 1), part=f"batch{b}")
             for b in range(batch)]
    for j, value in enumerate(parts[0]):
        if value is not None:
            _stacked_parts(imp, node, [part[j] for part in parts], j)


def _scan(imp: Importer, node: onnx.NodeProto, states: Sequence[Value | Inline],
          scanned: Sequence[Value | Inline], in_axes: Sequence[int], in_reverse: Sequence[int],
          out_axes: Sequence[int], out_reverse: Sequence[int], part: str = "") -> list[Value | None]:
    """Scan over `scanned` along their axes carrying `states`: the node's outputs (with a `part` name,
    tasks of their own), None where the node leaves one out."""
    in_axes = [a % max(1, len(v.shape)) for a, v in zip(in_axes, scanned, strict=True)]
    lengths = {int(v.shape[a]) for v, a in zip(scanned, in_axes, strict=True)}
    if len(lengths) != 1:
        raise WorkloadError(f"{describe(node)}: its scan inputs have lengths {sorted(lengths)} along their scan "
                            "axes; they must agree")
    trips = lengths.pop()
    rec = Recurrence(imp, node, trips, states)

    def slice_of(v: Value, axis: int, reverse: int) -> Inline:
        def read(*idx):
            step = (trips - 1 - rec.time) if reverse else rec.time
            return v.at([*idx[:axis], step, *idx[axis:]])
        return Inline(v.shape[:axis] + v.shape[axis + 1:], v.dtype, read)

    inputs = [*(rec.carried(k) for k in range(len(states))),
              *(slice_of(v, a, r) for v, a, r in zip(scanned, in_axes, in_reverse, strict=True))]
    body, graph = _body(imp, node, inputs)
    outs = _outputs(body, node, graph)
    new, per_step = outs[:len(states)], outs[len(states):]
    rec.run(lambda: new)
    made = [rec.final(k, k, part) for k in range(len(states))]
    for j, value in enumerate(per_step):
        made.append(rec.stacked(value, len(states) + j, out_axes[j] % (len(value.shape) + 1), bool(out_reverse[j]),
                                part))
    return made
