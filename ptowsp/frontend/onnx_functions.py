"""Operators the ONNX standard defines as functions of other operators, imported as their bodies.

Attention, RotaryEmbedding, LinearAttention, CenterCropPad, AffineGrid, the window generators and
others have no handler here: the standard's own schema (`onnx.defs`) holds each one's body, a
graph of simpler operators (for some the body depends on the node's attributes and input types: a
context-dependent function).  A node of such an operator becomes the nodes of its body at the
model's opset, with its attributes substituted and the body's own values renamed apart, and the
importer takes them as any others (an operator of the body without a handler is refused there,
naming the node it came from).  The body is data from the onnx package: nothing from the model runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import onnx

from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import describe

_EXPANDED = itertools.count()  # a prefix per expansion keeps each body's values apart


def has_body(op_type: str, opset: int) -> bool:
    """Whether the standard defines `op_type` at `opset` as a function of other operators."""
    schema = _schema(op_type, opset)
    return schema is not None and _version(schema, opset) is not None


def expand(node: onnx.NodeProto, opset: int, input_type: Callable[[str], tuple[np.dtype, tuple]]
           ) -> list[onnx.NodeProto]:
    """The nodes of `node`'s function body at `opset`, reading and writing `node`'s own values.

    `input_type(name)`: the dtype and shape of one of the node's inputs (a context-dependent body is
    made for them; a dimension that is not a number is left unknown)."""
    schema = _schema(node.op_type, opset)
    found = None if schema is None else _version(schema, opset)
    if found is None:
        raise WorkloadError(f"{describe(node)}: operator {node.op_type!r} has no function body at opset {opset}")
    version, contextual = found
    assert schema is not None
    try:
        if contextual:
            types = [_type_proto(*input_type(name)).SerializeToString() if name else onnx.TypeProto().SerializeToString()
                     for name in node.input]
            body = onnx.FunctionProto.FromString(schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types))
        else:
            body = onnx.FunctionProto.FromString(schema.get_function_with_opset_version(version))
    except (RuntimeError, ValueError, onnx.onnx_cpp2py_export.defs.SchemaError) as e:
        raise WorkloadError(f"{describe(node)}: the standard's function body for {node.op_type!r} could not be "
                            f"made for these inputs: {e}") from None
    # the operator's own attribute defaults (HannWindow's output_datatype), then the body's
    defaults = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.type}
    defaults.update({a.name: a for a in body.attribute_proto})
    return _renamed(node, body, defaults, f"{node.name or node.op_type}__{next(_EXPANDED)}__")


def _schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def _version(schema: onnx.defs.OpSchema, opset: int) -> tuple[int, bool] | None:
    """(the latest opset at most `opset` the schema has a body for, whether that body is context-dependent)."""
    candidates = [(v, False) for v in schema.function_opset_versions if v <= opset] + \
        [(v, True) for v in schema.context_dependent_function_opset_versions if v <= opset]
    return max(candidates) if candidates else None


def _type_proto(dtype: np.dtype, shape: tuple) -> onnx.TypeProto:
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = [d if isinstance(d, int) else None for d in shape]
    return onnx.helper.make_tensor_type_proto(elem, dims)


def _renamed(node: onnx.NodeProto, body: onnx.FunctionProto, defaults: dict[str, onnx.AttributeProto],
             prefix: str) -> list[onnx.NodeProto]:
    """The body's nodes with its inputs and outputs as `node`'s, its other values prefixed, and each
    attribute that refers to one of the function's (`ref_attr_name`) replaced by `node`'s, or by the
    default in `defaults`, or left out when neither gives one."""
    names = {formal: (node.input[k] if k < len(node.input) else "") for k, formal in enumerate(body.input)}
    names.update({formal: node.output[k] for k, formal in enumerate(body.output)
                  if k < len(node.output) and node.output[k]})
    given = {a.name: a for a in node.attribute}

    def rename(value: str) -> str:
        return names.get(value, prefix + value if value else "")

    return [_node(inner, rename, given, defaults, prefix) for inner in body.node]


def _node(inner: onnx.NodeProto, rename: Callable[[str], str], given: dict, defaults: dict,
          prefix: str) -> onnx.NodeProto:
    """One node of a body, renamed; a subgraph (a Scan's body) keeps its own values' names and
    renames what it reads from around it."""
    copy = onnx.NodeProto()
    copy.CopyFrom(inner)
    del copy.input[:], copy.output[:], copy.attribute[:]
    copy.input.extend(rename(v) for v in inner.input)
    copy.output.extend(rename(v) for v in inner.output)
    copy.name = prefix + (inner.name or inner.op_type)
    for attribute in inner.attribute:
        if attribute.ref_attr_name:
            source = given.get(attribute.ref_attr_name) or defaults.get(attribute.ref_attr_name)
            if source is None:
                continue  # neither the node nor the function gives it: the operator's own default
            substituted = onnx.AttributeProto()
            substituted.CopyFrom(source)
            substituted.name = attribute.name
            copy.attribute.append(substituted)
        elif attribute.HasField("g"):
            renamed = onnx.AttributeProto()
            renamed.CopyFrom(attribute)
            renamed.g.CopyFrom(_graph(attribute.g, rename, given, defaults, prefix))
            copy.attribute.append(renamed)
        elif len(attribute.graphs):
            raise WorkloadError(f"{copy.name}: a function body's {inner.op_type} holds a list of subgraphs "
                                f"({attribute.name!r}), which this importer does not expand")
        else:
            copy.attribute.append(attribute)
    return copy


def _graph(graph: onnx.GraphProto, rename: Callable[[str], str], given: dict, defaults: dict,
           prefix: str) -> onnx.GraphProto:
    own = {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
        {o for n in graph.node for o in n.output}

    def inside(value: str) -> str:
        return value if value in own else rename(value)

    copy = onnx.GraphProto()
    copy.CopyFrom(graph)
    del copy.node[:]
    copy.node.extend(_node(n, inside, given, defaults, prefix) for n in graph.node)
    for out in copy.output:
        out.name = inside(out.name)
    return copy
