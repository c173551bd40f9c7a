"""The model's graph as data, checked before anything is imported: one producer per value, every node
valid against its operator's schema at the model's opset, and what a node reads, including what its
subgraphs (a Loop's body, If's branches) read from the graphs around them by name; and the one rewrite
of the graph before the import, Conv -> BatchNormalization pairs folded into one Conv."""

from __future__ import annotations

import collections

import numpy as np
import onnx

from ptowsp.errors import InputError


def describe(node: onnx.NodeProto) -> str:
    """How errors name a node: its name (if it has one) and its op type."""
    return f"ONNX node {node.name!r} (op {node.op_type})" if node.name else f"ONNX node of op {node.op_type}"


def node_reads(node: onnx.NodeProto) -> set[str]:
    """The values a node reads: its inputs and what its subgraphs (a Loop's body, If's branches) read
    from the enclosing graph by name."""
    reads = {n for n in node.input if n}
    for graph in _subgraphs(node):
        reads |= graph_reads(graph)
    return reads


def graph_reads(graph: onnx.GraphProto) -> set[str]:
    """The names a subgraph reads from the graphs around it."""
    made = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    reads: set[str] = set()
    for inner in graph.node:
        reads |= node_reads(inner) - made
        made |= set(inner.output)
    return reads | ({o.name for o in graph.output} - made)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]


def schema_checked(model: onnx.ModelProto, opset: int) -> None:
    """onnx's own check of each node against its operator's schema at the model's opset (a known operator,
    input and output counts, attribute types, required attributes), its message an InputError naming
    the node: what the handlers may then take for granted."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version or onnx.IR_VERSION
    context.opset_imports = {"": opset}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue  # refused by the import, naming the domain
        try:
            onnx.checker.check_node(_outer_names_declared(node), context)
        except onnx.checker.ValidationError as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(f"{describe(node)}: not a valid {node.op_type} at opset {opset}: {reason}") from None


def _outer_names_declared(node: onnx.NodeProto) -> onnx.NodeProto:
    """`node`, its subgraphs given placeholders for the names they read from the enclosing graph (legal
    in ONNX; the checker, seeing the node alone, would call them undefined)."""
    if not _subgraphs(node):
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    for graph in _subgraphs(copy):
        graph.initializer.extend(onnx.numpy_helper.from_array(np.zeros(1, np.float32), n)
                                 for n in sorted(graph_reads(graph)))
    return copy


def one_producer_each(graph: onnx.GraphProto, source: str) -> None:
    """InputError for a value two places define (a later node would silently win) or an output listed twice."""
    made: dict[str, str] = {i.name: "an initializer" for i in graph.initializer}
    made.update({i.name: "a graph input" for i in graph.input if i.name not in made})
    for node in graph.node:
        for out in filter(None, node.output):
            if out in made:
                raise InputError(f"{describe(node)}: its output {out!r} is already {made[out]}; "
                                 "a value has one producer")
            made[out] = f"the output of node {node.name or node.op_type!r}"
    listed = collections.Counter(o.name for o in graph.output)
    twice = sorted(n for n, count in listed.items() if count > 1)
    if twice:
        raise InputError(f"{source}: graph output {twice[0]!r} is listed {listed[twice[0]]} times")


__all__ = ["attribute", "describe", "graph_reads", "node_reads", "one_producer_each", "schema_checked", "text_attribute"]


def attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def text_attribute(node: onnx.NodeProto, name: str, default: str) -> str:
    """A string attribute as text (onnx gives bytes)."""
    value = attribute(node, name, default)
    return value.decode() if isinstance(value, bytes) else value


def fold_batch_norms(nodes: list[onnx.NodeProto], arrays: dict[str, np.ndarray],
                     outputs: set[str]) -> list[onnx.NodeProto]:
    """Conv -> BatchNormalization (inference) pairs as one Conv with rescaled constant weights and a bias:
    W'[o] = W[o] * a[o], b' = (b - mean) * a + B with a = scale / sqrt(var + eps).  Only where the Conv's
    weights (and bias) and the norm's parameters are constants and the norm is the Conv's only reader."""
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    made = {o: node for node in nodes for o in node.output}
    out: list[onnx.NodeProto] = []
    for node in nodes:
        conv = made.get(node.input[0]) if node.op_type == "BatchNormalization" and node.input else None
        if conv is None or conv.op_type != "Conv" or readers.get(conv.output[0]) != 1 or conv.output[0] in outputs \
                or len([o for o in node.output if o]) != 1 or attribute(node, "training_mode", 0) \
                or not all(n in arrays for n in [*conv.input[1:], *node.input[1:5]]):
            out.append(node)
            continue
        scale, shift, mean, var = (arrays[n].astype(np.float64) for n in node.input[1:5])
        weight = arrays[conv.input[1]]
        a = scale / np.sqrt(var + float(attribute(node, "epsilon", 1e-5)))
        bias = arrays[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] else 0.0
        w_name, b_name = f"{conv.output[0]}__folded_w", f"{conv.output[0]}__folded_b"
        arrays[w_name] = (weight * a.reshape(-1, 1, 1, 1)).astype(weight.dtype)
        arrays[b_name] = ((bias - mean) * a + shift).astype(weight.dtype)
        folded = onnx.NodeProto()
        folded.CopyFrom(conv)
        del folded.input[:]
        folded.input.extend([conv.input[0], w_name, b_name])
        del folded.output[:]
        folded.output.append(node.output[0])
        out[out.index(conv)] = folded  # the norm itself is left out
    return out
