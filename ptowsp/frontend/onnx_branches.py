"""ONNX's `If`: a condition known at import picks its branch, whose nodes are imported in the If's
place (a function body's test of its input's rank, AffineGrid's 2-D or 3-D); a condition computed at
run time computes both branches and picks each output element with `where`, when the two branches'
outputs agree in shape and dtype (else the import needs the condition's value: ValueNeeded, or a
refusal when it is computed from data)."""

from __future__ import annotations

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import describe
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_walk import import_nodes
from ptowsp.frontend.onnx_ops import op


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def _imported(imp: Importer, graph: onnx.GraphProto) -> list[str]:
    """The branch's nodes imported into `imp` (its names are the model's own: ONNX keeps every name of a
    graph and its subgraphs distinct); the names of its outputs."""
    for init in graph.initializer:
        imp.constant(init.name, imp.tensor_array(init, f"initializer {init.name!r}"))
    imp.producers.update({out: inner for inner in graph.node for out in inner.output if out})
    import_nodes(imp, list(graph.node))
    return [o.name for o in graph.output]


def _alias(imp: Importer, name: str, source: str) -> None:
    """The If's output `name` is the branch's value `source` (a constant stays one, so it folds on)."""
    if source in imp.arrays:
        imp.constant(name, imp.arrays[source])
        return
    if source in imp.sizes:
        imp.sizes[name] = imp.sizes[source]
    imp.values[name] = _value(imp, source)


@op("If")
def if_(imp: Importer, node: onnx.NodeProto) -> None:
    outputs = [o for o in node.output]
    if node.input[0] in imp.arrays:
        taken = "then_branch" if bool(np.asarray(imp.arrays[node.input[0]]).reshape(-1)[0]) else "else_branch"
        for name, source in zip(outputs, _imported(imp, _branch(node, taken)), strict=True):
            if name:
                _alias(imp, name, source)
        return
    condition = imp.value(node, 0)
    branches = [_imported(imp, _branch(node, b)) for b in ("then_branch", "else_branch")]
    for k, (name, then, other) in enumerate(zip(outputs, *branches, strict=True)):
        if not name:
            continue
        a, b = _value(imp, then), _value(imp, other)
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            imp.array(node, 0, "cond")  # ValueNeeded when a graph input's value decides it
            raise WorkloadError(f"{describe(node)}: its branches give output {k} as {a.dtype} {a.shape} and "
                                f"{b.dtype} {b.shape}; a condition computed at run time needs them alike")
        imp.compute(node, a.shape, lambda *idx, a=a, b=b: pw.where(
            pw.cast(condition.at([0] * len(condition.shape)), "bool"), a.at(idx), b.at(idx)), output=k)


def _value(imp: Importer, name: str) -> Value:
    found = imp.lookup(name)
    if found is None:
        raise WorkloadError(f"If: the branch output {name!r} is produced by no node of its branch")
    return found
