"""The node walk of an ONNX import: each node folded when everything it reads is a constant, read as
shape arithmetic over symbolic sizes, expanded by its function body, or made by its operator's
handler from the registry (onnx_ops.py `OPS`, filled as the handler modules load: onnx_import.py
loads them all).  Subgraphs (Loop, Scan and If bodies, function bodies) walk through here too."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ptowsp.errors import WorkloadError
from ptowsp.frontend import onnx_functions, onnx_sizes
from ptowsp.frontend.onnx_budget import check_fold, check_fold_time, fold_seconds
from ptowsp.frontend.onnx_graph import describe, node_reads
from ptowsp.frontend.onnx_importer import Importer
from ptowsp.frontend.onnx_ops import OPS


def import_nodes(imp: Importer, nodes: Sequence[onnx.NodeProto]) -> None:
    """Each node in turn: folded when everything it reads is a constant (shape arithmetic, constant
    subgraphs), else made by its operator's handler (onnx_ops.py and the modules beside it)."""
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
