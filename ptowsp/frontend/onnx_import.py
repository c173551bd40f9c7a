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
from collections.abc import Mapping, Sequence

import onnx

from ptowsp.errors import InputError, WorkloadError
from ptowsp.frontend import (  # noqa: F401 - each registers its operators' handlers as it loads
    onnx_branches, onnx_control, onnx_elementwise, onnx_gridsample, onnx_host, onnx_indexing, onnx_ngrams,
    onnx_quantized, onnx_recurrent, onnx_reductions, onnx_resize, onnx_scatter, onnx_shapes, onnx_trigonometry,
)
from ptowsp.frontend.onnx_budget import DEFAULT_MAX_BYTES, DEFAULT_MAX_FOLD_SECONDS
from ptowsp.frontend.onnx_data import load
from ptowsp.frontend.onnx_graph import fold_batch_norms, one_producer_each, schema_checked
from ptowsp.frontend.onnx_importer import Importer
from ptowsp.frontend.onnx_narrow import NARROW_FLOAT_MODES, widened
from ptowsp.frontend.onnx_ops import OPS
from ptowsp.frontend.onnx_walk import import_nodes
from ptowsp.workloads import Workload


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
    return sorted(OPS)


def _copy_node(output: str) -> onnx.NodeProto:
    return onnx.helper.make_node("Identity", [output], [output], name=output)
