"""Narrow floats as storage at a graph's edges: the graph rewrite `from_onnx(..., narrow_floats="float32")`
makes before the import.

A model whose values are float16 or bfloat16 is imported as its float32 twin: its narrow inputs and
constants are widened (exactly) where they enter, a Cast or CastLike to a
narrow float, or an operator's `dtype` asking for one, gives float32 instead, and each narrow graph
output is rounded once where it leaves.  In between, every node computes in float32 and hands its
float32 result on.  That is what torch.compile does by default (it drops a cast to float16 and back
inside a kernel unless `emulate_precision_casts` is set) and what onnxruntime's CPU provider gets from
float16 graphs (float32 kernels between inserted casts, the cast pairs between them removed); it is
closer to the exact result than rounding at every node, a CPU has no float16 arithmetic to save time
with, and it is what the ONNX suite's narrow-float expected outputs were computed by.
`narrow_floats="each_node"` imports the graph as it is: every node rounds its output to its narrow
type, every Cast to a narrow float rounds (ONNX's letter; `is_inf` after an overflowing cast sees it).

A graph with subgraphs (whose own values would need the same rewrite), one that reinterprets bits
(BitCast) or one whose narrow-looking outputs have no declared type is imported as it is.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

NARROW = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
NARROW_FLOAT_MODES = ("float32", "each_node")
_TYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")  # Cast; EyeLike and the random generators; DequantizeLinear
_BIT_LEVEL = ("BitCast",)


def widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 twin of a narrow-float model (module docstring); `model` itself when it has no narrow
    value or is imported as it is.  The caller's model is never modified."""
    graph = model.graph
    if not _has_narrow(graph) or any(n.op_type in _BIT_LEVEL or _has_subgraph(n) for n in graph.node) \
            or any(not o.type.tensor_type.elem_type for o in graph.output):
        return model
    taken = _names(graph)

    def fresh(base: str) -> str:
        name, k = f"{base}__float32", 1
        while name in taken:
            name, k = f"{base}__float32_{k}", k + 1
        taken.add(name)
        return name

    renamed: dict[str, str] = {}  # narrow value -> the name of its float32 twin
    nodes: list[onnx.NodeProto] = []
    # narrow graph inputs and initializers are widened by a Cast where they enter (the import folds an
    # initializer's, reading it as it reads every constant: budgeted, external data from the model's folder)
    sources = [i.name for i in graph.input if i.type.tensor_type.elem_type in NARROW]
    sources += [i.name for i in graph.initializer if i.data_type in NARROW and i.name not in sources]
    for name in sources:
        renamed[name] = fresh(name)
        nodes.append(_cast(name, renamed[name], TensorProto.FLOAT))
    stay = {i.name for i in graph.input} | {i.name for i in graph.initializer}  # an output that is one stays
    leaving = {o.name: o.type.tensor_type.elem_type for o in graph.output
               if o.type.tensor_type.elem_type in NARROW and o.name not in stay}
    for name in leaving:
        renamed[name] = fresh(name)
    for node in graph.node:
        nodes += _float32_nodes(node, renamed, fresh)
    nodes += [_cast(renamed[name], name, elem_type) for name, elem_type in leaving.items()]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:], out.graph.value_info[:]  # value_info: stale types
    out.graph.node.extend(nodes)
    return out


def _float32_nodes(node: onnx.NodeProto, renamed: dict[str, str], fresh) -> list[onnx.NodeProto]:
    """`node` reading and writing the float32 twins, a Cast's or a generator's narrow type made float32;
    a node whose attribute holds a narrow tensor (Constant, ConstantOfShape) keeps it and is followed by
    a Cast to float32 (its data is read by the import, not here)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = [renamed.get(n, n) for n in node.input]
    copy.output[:] = [renamed.get(n, n) for n in node.output]
    for attr in copy.attribute:
        if attr.name in _TYPE_ATTRIBUTES and attr.type == onnx.AttributeProto.INT and attr.i in NARROW:
            attr.i = TensorProto.FLOAT
    if any(a.type == onnx.AttributeProto.TENSOR and a.t.data_type in NARROW for a in node.attribute) \
            and len(copy.output) == 1:
        wide = copy.output[0]
        copy.output[0] = fresh(node.output[0])
        return [copy, _cast(copy.output[0], wide, TensorProto.FLOAT)]
    return [copy]


def _cast(source: str, result: str, to: int) -> onnx.NodeProto:
    return helper.make_node("Cast", [source], [result], name=f"{result}_cast", to=to)


def _has_narrow(graph: onnx.GraphProto) -> bool:
    declared = [i.type.tensor_type.elem_type for i in list(graph.input) + list(graph.output)
                if i.type.WhichOneof("value") == "tensor_type"]
    return any(t in NARROW for t in declared) or any(i.data_type in NARROW for i in graph.initializer) or any(
        (a.type == onnx.AttributeProto.TENSOR and a.t.data_type in NARROW)
        or (a.name in _TYPE_ATTRIBUTES and a.type == onnx.AttributeProto.INT and a.i in NARROW)
        for n in graph.node for a in n.attribute)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _names(graph: onnx.GraphProto) -> set[str]:
    return ({i.name for i in graph.input} | {o.name for o in graph.output} | {i.name for i in graph.initializer}
            | {n for node in graph.node for n in list(node.input) + list(node.output)})
