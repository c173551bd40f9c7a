"""Symbolic dimensions: a model's `batch` and `sequence` as ptowsp sizes (docs/dynamic.md).

A graph input dimension the model leaves symbolic (and `shapes=` does not bind) becomes a size named
after its `dim_param`, so one import and one build serve every batch size and sequence length.  A
dimension is then an `int` or a size expression, and the shape arithmetic exporters write around
it (`Shape -> Slice/Gather -> Concat -> Reshape`, `Range(0, seq)`) is folded here over sizes: a
"size value" is a numpy object array whose elements are ints or size expressions.  What this module
cannot carry over sizes is a WorkloadError naming the node and saying to bind the dimension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import collections
import math
import re
from collections.abc import Sequence

import numpy as np
import onnx

from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe
from ptowsp.te import Expr, Op
from ptowsp.te import sizes as te_sizes

if TYPE_CHECKING:
    from ptowsp.frontend.onnx_importer import Importer  # the importer reads sizes through this module

Dim = int | Expr


def same(a: Dim, b: Dim) -> bool:
    if isinstance(a, Expr):
        return a.same_as(b)
    return b.same_as(a) if isinstance(b, Expr) else a == b


def broadcast(node: onnx.NodeProto, *shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy's broadcasting of shapes whose dimensions may be sizes (a size meets 1 or itself)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for d in range(rank):
        dims = [s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0]
        kept = [n for n in dims if not (isinstance(n, int) and n == 1)]
        if any(not same(n, kept[0]) for n in kept):
            raise WorkloadError(f"{describe(node)}: input shapes {[shown(s) for s in shapes]} do not broadcast")
        out.append(kept[0] if kept else 1)
    return tuple(out)


def shown(shape: Sequence[Dim]) -> list[object]:
    return [d if isinstance(d, int) else str(d) for d in shape]


def _factors(d: Dim) -> tuple[int, collections.Counter] | None:
    """d as an integer times a product of sizes, or None for other arithmetic."""
    if isinstance(d, (int, np.integer)):
        return int(d), collections.Counter()
    if d.op is Op.SIZE:
        return 1, collections.Counter([d.arg])
    if d.op is Op.CONST:
        return int(d.arg), collections.Counter()
    if d.op is Op.MUL:
        a, b = _factors(d.src[0]), _factors(d.src[1])
        if a is not None and b is not None:
            return a[0] * b[0], a[1] + b[1]
    return None


def quotient(node: onnx.NodeProto, numerator: Sequence[Dim], denominator: Sequence[Dim]) -> Dim:
    """prod(numerator) / prod(denominator) where it divides exactly (Reshape's -1 over sizes)."""
    top, bottom = [_factors(d) for d in numerator], [_factors(d) for d in denominator]
    if None in top or None in bottom:
        raise WorkloadError(f"{describe(node)}: cannot infer -1 from {shown(numerator)} / {shown(denominator)}; "
                            "bind the symbolic dimensions with shapes=")
    coef_top, coef_bottom = math.prod(c for c, _ in top), math.prod(c for c, _ in bottom)
    names = sum((s for _, s in top), collections.Counter())
    names.subtract(sum((s for _, s in bottom), collections.Counter()))
    if coef_bottom == 0 or coef_top % coef_bottom or any(n < 0 for n in names.values()):
        raise WorkloadError(f"{describe(node)}: {shown(numerator)} does not divide by {shown(denominator)}")
    result: Dim = coef_top // coef_bottom
    for name, count in sorted(names.items()):
        for _ in range(count):
            result = te_sizes.mul(result, te_sizes.size_var(name))
    return result


def size_value(array: np.ndarray) -> np.ndarray:
    """A folded value: plain int64 when every element is an int, else an object array of ints and sizes."""
    flat = [x.item() if isinstance(x, np.generic) else x for x in array.reshape(-1)]
    if all(isinstance(x, int) for x in flat):
        return np.array(flat, np.int64).reshape(array.shape)
    return np.array(flat, dtype=object).reshape(array.shape)


def _int_list(imp: Importer, node: onnx.NodeProto, k: int) -> list[int] | None:
    if len(node.input) <= k or not node.input[k]:
        return None
    return [int(v) for v in np.asarray(imp.arrays[node.input[k]]).reshape(-1)]


def _slice(imp: Importer, node: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
    starts, ends, axes, steps = (_int_list(imp, node, k) for k in (1, 2, 3, 4))
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        index[a % x.ndim] = slice(s, e, st)
    return x[tuple(index)]


_ARITHMETIC = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
               "Div": lambda a, b: a // b}


def fold(imp: Importer, node: onnx.NodeProto) -> bool:
    """Fold shape arithmetic over size values; False when the node is not such arithmetic."""
    names = [n for n in node.input if n]
    if not names or not all(n in imp.arrays or n in imp.sizes for n in names) or \
            not any(n in imp.sizes for n in names):
        return False
    value = [imp.sizes.get(n, imp.arrays.get(n)) for n in node.input]
    x = np.asarray(value[0], dtype=object)
    op = node.op_type
    if op in ("Identity", "Cast"):
        out = x
    elif op == "Gather":
        out = np.take(x, np.asarray(value[1]).astype(np.int64), axis=int(attribute(node, "axis", 0)))
    elif op == "Slice":
        out = _slice(imp, node, x)
    elif op == "Concat":
        out = np.concatenate([np.asarray(v, dtype=object).reshape(-1) if np.ndim(v) == 0 else np.asarray(v, dtype=object)
                              for v in value], axis=int(attribute(node, "axis", 0)))
    elif op in ("Unsqueeze", "Squeeze"):
        axes = attribute(node, "axes")
        axes = axes if axes is not None else _int_list(imp, node, 1)
        if op == "Unsqueeze":
            rank = x.ndim + len(axes)
            out = np.expand_dims(x, tuple(int(a) % rank for a in axes))
        else:
            out = np.squeeze(x, None if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes))
    elif op in ("Reshape", "Flatten"):
        out = x.reshape(-1)
    elif op in _ARITHMETIC:
        out = _ARITHMETIC[op](x, np.asarray(value[1], dtype=object))
    else:
        return False
    made = size_value(np.asarray(out, dtype=object))
    if made.dtype == object:
        imp.sizes[node.output[0]] = made
    else:
        imp.constant(node.output[0], made)
    return True


def extents(imp: Importer, node: onnx.NodeProto, k: int, what: str) -> list[Dim]:
    """Input k as a list of dimensions: a constant, or a size value folded above."""
    name = node.input[k] if len(node.input) > k else ""
    if name in imp.sizes:
        return [x for x in imp.sizes[name].reshape(-1)]
    values = np.asarray(imp.array(node, k, what))
    if values.dtype.kind not in "iu":
        raise WorkloadError(f"{describe(node)}: input {k} ({what}) is {values.dtype}; it must hold integers")
    return [int(d) for d in values.reshape(-1)]


def size_name(inp: onnx.ValueInfoProto, d: int) -> str:
    """The size a symbolic dimension becomes: its dim_param as an identifier, else `<input>_dim<d>`."""
    param = inp.type.tensor_type.shape.dim[d].dim_param
    name = re.sub(r"[^A-Za-z0-9_]", "_", param or f"{inp.name}_dim{d}").strip("_") or f"dim{d}"
    return f"d_{name}" if name[0].isdigit() else name
