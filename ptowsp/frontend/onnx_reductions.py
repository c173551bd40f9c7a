"""ONNX operators that reduce along axes: the Reduce family, ArgMax/ArgMin, the softmax family and
the normalizations.

One mechanism serves them all: `Along` is a node's reduced axes and how the kept ones index the
input (`keepdims`, negative axes, `noop_with_empty_axes`, the axes as an attribute or a constant
input, by opset); a reduction is then `combine(pre(x), loops)` finished by `post`, and a
normalization is its statistics as tasks over the kept axes, read back by the elementwise task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import NARROW_FLOATS, axis_of, in_float32, op, refuse
from ptowsp.te import Expr

product = pw.reducer(combine=lambda a, b: a * b, identity=1, name="prod")  # ReduceProd, CumProd, a scatter's mul


@dataclass(frozen=True)
class Along:
    """The axes a node reduces over (sorted) of an input of `shape`, and whether it keeps them."""

    shape: tuple
    axes: tuple[int, ...]
    keep: bool

    @property
    def out(self) -> tuple:
        return tuple(1 if d in self.axes else n for d, n in enumerate(self.shape) if self.keep or d not in self.axes)

    @property
    def count(self) -> int:
        return math.prod(self.shape[d] for d in self.axes)

    def loops(self, prefix: str = "r") -> dict[int, Expr]:
        return {d: pw.reduce_axis(self.shape[d], f"{prefix}{d}") for d in self.axes}

    def read(self, idx: Sequence[Expr], loops: dict[int, Expr]) -> list[Expr]:
        """The input index for output index `idx`, the reduced axes at `loops`."""
        it = iter(idx)
        read = []
        for d in range(len(self.shape)):
            if d in loops:
                if self.keep:
                    next(it)
                read.append(loops[d])
            else:
                read.append(next(it))
        return read

    def row(self, idx: Sequence[Expr]) -> list[Expr]:
        """The index of a statistic kept with unit axes (keep=True) for input index `idx`."""
        return [0 if d in self.axes else i for d, i in enumerate(idx)]


def along(imp: Importer, node: onnx.NodeProto, x: Value, *, axes_input: int | None = 1) -> Along:
    """The Reduce family's axes: the `axes` attribute (before opset 18; ReduceSum from 13) or input,
    every axis when there are none, no axis at all under `noop_with_empty_axes=1`."""
    axes = attribute(node, "axes")
    if axes is None and axes_input is not None and len(node.input) > axes_input and node.input[axes_input]:
        axes = imp.array(node, axes_input, "axes")
    keep = bool(int(attribute(node, "keepdims", 1)))
    rank = len(x.shape)
    if axes is None or len(axes) == 0:
        axes = [] if int(attribute(node, "noop_with_empty_axes", 0)) else range(rank)
    return Along(tuple(x.shape), tuple(sorted({axis_of(node, int(a), rank) for a in axes})), keep)


def _pre_post(kind: str, dtype: str) -> tuple[Callable, Callable, Callable]:
    """(pre(x), combine(body, loops), post(total, count)) of one Reduce operator."""
    same = (lambda v: v)
    square = (lambda v: v * v)
    return {
        "ReduceSum": (same, pw.sum, lambda t, n: t),
        "ReduceMean": (same, pw.sum, lambda t, n: t / float(n) if np.dtype(dtype).kind == "f"
                       else pw.cast(t // n, dtype)),
        "ReduceMax": (same, pw.max, lambda t, n: t),
        "ReduceMin": (same, pw.min, lambda t, n: t),
        "ReduceProd": (same, product, lambda t, n: t),
        "ReduceL1": (pw.abs, pw.sum, lambda t, n: t),
        "ReduceL2": (square, pw.sum, lambda t, n: _keep_type(pw.sqrt(t), dtype)),
        "ReduceSumSquare": (square, pw.sum, lambda t, n: t),
        "ReduceLogSum": (same, pw.sum, lambda t, n: _keep_type(pw.log(t), dtype)),
        "ReduceLogSumExp": (pw.exp, pw.sum, lambda t, n: _keep_type(pw.log(t), dtype)),
    }[kind]


def _keep_type(e: Expr, dtype: str) -> Expr:
    return e if e.dtype == dtype else pw.cast(e, dtype)


@op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
    "ReduceLogSum", "ReduceLogSumExp")
def reduce(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    ax = along(imp, node, x)
    if not ax.axes:  # noop_with_empty_axes: the input, through the operator's elementwise part
        pre, _, post = _pre_post(node.op_type, x.dtype)
        imp.compute(node, x.shape, lambda *idx: post(pre(x.at(idx)), 1))
        return
    pre, combine, post = _pre_post(node.op_type, x.dtype)
    if node.op_type in ("ReduceMax", "ReduceMin") and x.dtype == "bool":
        combine = {"ReduceMax": pw.max, "ReduceMin": pw.min}[node.op_type]
    loops = ax.loops()
    every = tuple(loops.values())
    imp.compute(node, ax.out, lambda *idx: in_float32(lambda v: post(combine(pre(v), every), ax.count),
                                                      x.at(ax.read(idx, loops))))


@op("ArgMax", "ArgMin")
def arg_reduce(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if not x.shape:
        raise WorkloadError(f"{describe(node)}: {node.op_type} of a 0-d tensor")
    axis = axis_of(node, int(attribute(node, "axis", 0)), len(x.shape))
    ax = Along(tuple(x.shape), (axis,), bool(int(attribute(node, "keepdims", 1))))
    last = bool(int(attribute(node, "select_last_index", 0)))
    n = x.shape[axis]
    k = pw.reduce_axis(n, "k")
    pick = pw.argmax if node.op_type == "ArgMax" else pw.argmin

    def body(*idx):
        if not last:
            return pick(x.at(ax.read(idx, {axis: k})), k)
        return (n - 1) - pick(x.at(ax.read(idx, {axis: (n - 1) - k})), k)  # the first from the end
    imp.compute(node, ax.out, body)


# -- the softmax family ---------------------------------------------------------------------------
def _softmax_axes(imp: Importer, node: onnx.NodeProto, x: Value) -> Along:
    """Opset 13 on: one axis (default -1).  Before: the input as 2-D at `axis` (default 1), so the
    operator runs over every axis from `axis` on."""
    rank = len(x.shape)
    if imp.opset >= 13:
        return Along(tuple(x.shape), (axis_of(node, int(attribute(node, "axis", -1)), rank),), True)
    axis = axis_of(node, int(attribute(node, "axis", 1)), rank)
    return Along(tuple(x.shape), tuple(range(axis, rank)), True)


@op("Softmax", "LogSoftmax", "Hardmax")
def softmax(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    ax = _softmax_axes(imp, node, x)
    loops = ax.loops("j")
    every = tuple(loops.values())
    if node.op_type == "Hardmax":  # 1 at the first largest element along the axes, 0 elsewhere
        first = imp.compute(node, ax.out, lambda *idx: pw.argmax(x.at(ax.read(idx, loops)), every), part="argmax")

        def flat(idx):  # the row-major index of idx over the axes, as argmax gives it
            out = 0
            for d in ax.axes:
                out = out * x.shape[d] + idx[d]
            return out
        imp.compute(node, x.shape, lambda *idx: pw.cast(flat(idx) == first.at(ax.row(idx)), x.dtype))
        return
    log_softmax(imp, node, x, ax, exp=node.op_type == "Softmax")


def log_softmax(imp: Importer, node: onnx.NodeProto, x: Value, ax: Along, *, exp: bool = False,
                output: int = 0, part: str = "") -> Value:
    """x's log-softmax over ax's axes (its softmax with `exp`), shifted by the largest element; narrow
    floats take the sum and the result in float32, rounded once."""
    loops = ax.loops("j")
    every = tuple(loops.values())
    read = _stash(x, node, always=True)
    top = imp.compute(node, ax.out, lambda *idx: pw.max(read(ax.read(idx, loops)), every), part="max")
    total = imp.compute(node, ax.out, lambda *idx: pw.sum(pw.exp(read(ax.read(idx, loops)) - top.at(idx)), every),
                        part="sum")

    def body(*idx):
        shifted = read(idx) - top.at(ax.row(idx))
        value = pw.exp(shifted) / total.at(ax.row(idx)) if exp else shifted - pw.log(total.at(ax.row(idx)))
        return _keep_type(value, x.dtype)
    return imp.compute(node, x.shape, body, output=output, part=part)


# -- normalizations -------------------------------------------------------------------------------
def _stash(x: Value, node: onnx.NodeProto, always: bool = False) -> Callable[[Sequence[Expr]], Expr]:
    """x's element in the type statistics are computed in (`stash_type`: float32 for narrow floats)."""
    stash = 1 if always else attribute(node, "stash_type", 1)
    wide = stash == 1 and x.dtype in NARROW_FLOATS
    return (lambda idx: pw.cast(x.at(idx), "float32")) if wide else x.at


def _moments(imp: Importer, node: onnx.NodeProto, read: Callable, ax: Along, eps: float,
             centred: bool = True) -> tuple[Value, Value]:
    """Tasks over the kept axes (unit axes for the reduced ones): the mean (0 when not `centred`: RMS)
    and 1 / sqrt(variance + eps)."""
    loops = ax.loops()
    every = tuple(loops.values())
    n = float(ax.count)
    mean = imp.compute(node, ax.out, lambda *idx: pw.sum(read(ax.read(idx, loops)), every) / n, part="mean") \
        if centred else None

    def inverse_deviation(*idx):
        value = read(ax.read(idx, loops))
        d = value - mean.at(idx) if centred else value
        return pw.rsqrt(pw.sum(d * d, every) / n + eps)
    return mean, imp.compute(node, ax.out, inverse_deviation, part="inv_std")


def _affine(value: Expr, idx: Sequence[Expr], scale: Value | None, bias: Value | None, inner: Sequence[int],
            offset: int) -> Expr:
    """value * scale + bias, the two broadcast over the last `len(inner)` axes from `offset`."""
    col = idx[offset:]
    if scale is not None:
        value = value * scale.broadcast_at(col, inner)
    return value + bias.broadcast_at(col, inner) if bias is not None else value


@op("LayerNormalization", "RMSNormalization")
def layer_norm(imp: Importer, node: onnx.NodeProto) -> None:
    """Y over the axes from `axis` on, and LayerNormalization's optional Mean and InvStdDev outputs."""
    x, scale = imp.value(node, 0), imp.value(node, 1)
    bias = imp.optional(node, 2) if node.op_type == "LayerNormalization" else None
    rank = len(x.shape)
    axis = axis_of(node, int(attribute(node, "axis", -1)), rank)
    eps = float(attribute(node, "epsilon", 1e-5))
    ax = Along(tuple(x.shape), tuple(range(axis, rank)), True)
    read = _stash(x, node)
    centred = node.op_type == "LayerNormalization"
    mean, inv = _moments(imp, node, read, ax, eps, centred)

    def body(*idx):
        value = read(idx) - mean.at(ax.row(idx)) if centred else read(idx)
        value = _keep_type(value * inv.at(ax.row(idx)), x.dtype)
        return _affine(value, idx, scale, bias, x.shape[axis:], axis)
    imp.compute(node, x.shape, body)
    for k, stat in ((1, mean), (2, inv)):
        if len(node.output) > k and node.output[k]:
            imp.compute(node, ax.out, lambda *idx, s=stat: s.at(idx), output=k)


@op("InstanceNormalization", "GroupNormalization", "MeanVarianceNormalization")
def channel_norm(imp: Importer, node: onnx.NodeProto) -> None:
    """Normalized over the spatial axes per (n, c) (Instance), per (n, group) (Group), or over `axes`
    (MeanVariance: no scale, eps 1e-9 added to the deviation, not the variance)."""
    x = imp.value(node, 0)
    rank = len(x.shape)
    if node.op_type == "MeanVarianceNormalization":
        axes = attribute(node, "axes", [0, 2, 3])
        ax = Along(tuple(x.shape), tuple(sorted(axis_of(node, int(a), rank) for a in axes)), True)
        mean, _ = _moments(imp, node, x.at, ax, 0.0)
        loops = ax.loops("q")
        n = float(ax.count)
        second = imp.compute(node, ax.out, lambda *idx: pw.sum(x.at(ax.read(idx, loops)) ** 2,
                                                               tuple(loops.values())) / n, part="square_mean")

        def body(*idx):
            m = mean.at(ax.row(idx))
            return (x.at(idx) - m) / (pw.sqrt(second.at(ax.row(idx)) - m * m) + 1e-9)
        imp.compute(node, x.shape, body)
        return
    if rank < 3:
        raise WorkloadError(f"{describe(node)}: input of rank {rank}; needs (N, C, D1, ...)")
    scale, bias = imp.value(node, 1), imp.value(node, 2)
    eps = float(attribute(node, "epsilon", 1e-5))
    channels = x.shape[1]
    groups = channels if node.op_type == "InstanceNormalization" else int(attribute(node, "num_groups"))
    if groups < 1 or channels % groups:
        refuse(node, "num_groups", groups, f"a divisor of the {channels} channels")
    per = channels // groups
    # the input seen as (N, G, C/G, D1, ...): statistics over everything after G
    grouped = Along((x.shape[0], groups, per, *x.shape[2:]), tuple(range(2, rank + 1)), True)
    read = _stash(x, node)
    mean, inv = _moments(imp, node, lambda g: read([g[0], g[1] * per + g[2], *g[3:]]), grouped, eps)
    by_group = node.op_type == "GroupNormalization" and imp.opset < 21 and scale.shape[0] == groups

    def body(*idx):
        stat = [idx[0], idx[1] // per] + [0] * (rank - 1)
        value = (read(idx) - mean.at(stat)) * inv.at(stat)
        value = _keep_type(value, x.dtype)
        c = [idx[1] // per] if by_group else [idx[1]]
        return value * scale.at(c) + bias.at(c)
    imp.compute(node, x.shape, body)


@op("BatchNormalization")
def batch_norm(imp: Importer, node: onnx.NodeProto) -> None:
    """Inference: y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = B - mean * a, folded at import.
    training_mode=1: normalized by the batch's own mean and (biased) variance over every axis but the
    channels, which the running_mean and running_var outputs blend into the given ones by `momentum`."""
    x = imp.value(node, 0)
    if len(x.shape) < 2:
        raise WorkloadError(f"{describe(node)}: input of rank {len(x.shape)}; needs (N, C, ...)")
    eps = float(attribute(node, "epsilon", 1e-5))
    if int(attribute(node, "training_mode", 0)):
        _batch_norm_training(imp, node, x, eps)
        return
    if len([o for o in node.output if o]) > 1:
        refuse(node, "training_mode", 0, "1 for the running mean and variance outputs")
    scale, bias, mean, var = (imp.array(node, k, what) for k, what in
                              ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")))
    dtype = np.dtype(x.dtype)
    a = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(dtype)
    b = (bias - mean * a).astype(dtype)
    imp.constant(f"{node.name or 'bn'}_scale", a)
    imp.constant(f"{node.name or 'bn'}_shift", b)
    fa, fb = imp.lookup(f"{node.name or 'bn'}_scale"), imp.lookup(f"{node.name or 'bn'}_shift")
    imp.compute(node, x.shape, lambda *idx: x.at(idx) * fa.at([idx[1]]) + fb.at([idx[1]]))


def _batch_norm_training(imp: Importer, node: onnx.NodeProto, x: Value, eps: float) -> None:
    scale, bias, mean, var = (imp.value(node, k) for k in range(1, 5))
    momentum = float(attribute(node, "momentum", 0.9))
    ax = Along(tuple(x.shape), tuple(d for d in range(len(x.shape)) if d != 1), False)
    loops = ax.loops()
    every, n = tuple(loops.values()), float(ax.count)
    batch_mean = imp.compute(node, ax.out, lambda c: pw.sum(x.at(ax.read([c], loops)), every) / n, part="mean")
    batch_var = imp.compute(node, ax.out, lambda c: pw.sum((x.at(ax.read([c], loops)) - batch_mean.at([c])) ** 2,
                                                           every) / n, part="var")
    imp.compute(node, x.shape, lambda *idx: (x.at(idx) - batch_mean.at([idx[1]])) * pw.rsqrt(
        batch_var.at([idx[1]]) + eps) * scale.at([idx[1]]) + bias.at([idx[1]]))
    for k, given, batch in ((1, mean, batch_mean), (2, var, batch_var)):
        if len(node.output) > k and node.output[k]:
            imp.compute(node, ax.out, lambda c, g=given, b=batch: g.at([c]) * momentum + b.at([c]) * (1 - momentum),
                        output=k)


@op("LRN")
def lrn(imp: Importer, node: onnx.NodeProto) -> None:
    """Local response normalisation across channels: x / (bias + alpha / size * (sum of x^2 over the
    channels from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), inside the tensor)) ** beta."""
    x = imp.value(node, 0)
    if len(x.shape) < 3 or not isinstance(x.shape[1], int):
        raise WorkloadError(f"{describe(node)}: LRN needs an (N, C, ...) input of known channels, got {x.shape}")
    size = int(attribute(node, "size"))
    alpha, beta = float(attribute(node, "alpha", 1e-4)), float(attribute(node, "beta", 0.75))
    bias = float(attribute(node, "bias", 1.0))
    before, channels = (size - 1) // 2, x.shape[1]
    k = pw.reduce_axis(size, "k")

    def body(n, c, *rest):
        i = c - before + k
        inside = (i >= 0) & (i < channels)
        value = x.at([n, pw.clamp(i, 0, channels - 1), *rest])
        square_sum = pw.sum(pw.where(inside, value * value, 0.0), k)
        return x.at([n, c, *rest]) / (square_sum * (alpha / size) + bias) ** beta
    imp.compute(node, x.shape, body)


@op("LpNormalization")
def lp_norm(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    axis = axis_of(node, int(attribute(node, "axis", -1)), len(x.shape))
    p = int(attribute(node, "p", 2))
    if p not in (1, 2):
        refuse(node, "p", p, "1 or 2")
    ax = Along(tuple(x.shape), (axis,), True)
    loops = ax.loops()
    term = pw.abs if p == 1 else (lambda v: v * v)
    norm = imp.compute(node, ax.out, lambda *idx: pw.sum(term(x.at(ax.read(idx, loops))), tuple(loops.values())),
                       part="norm")
    finish = (lambda t: t) if p == 1 else pw.sqrt
    def body(*idx):  # a zero norm gives 0, not NaN (as onnx's reference)
        n = norm.at(ax.row(idx))
        return pw.where(n == 0, pw.cast(0, x.dtype), _keep_type(x.at(idx) / finish(n), x.dtype))
    imp.compute(node, x.shape, body)


@op("CumSum", "CumProd")
def cumulative(imp: Importer, node: onnx.NodeProto) -> None:
    """Running sums and products along an axis (exclusive, reverse), each element a reduction over the
    axis masked to the elements before it: n**2 work along the axis, with no order between elements."""
    x = imp.value(node, 0)
    axis = axis_of(node, int(np.asarray(imp.array(node, 1, "axis")).reshape(-1)[0]), len(x.shape))
    exclusive, reverse = int(attribute(node, "exclusive", 0)), int(attribute(node, "reverse", 0))
    n = x.shape[axis]
    k = pw.reduce_axis(n, "k")
    combine, identity = (pw.sum, 0) if node.op_type == "CumSum" else (product, 1)

    def body(*idx):
        i = idx[axis]
        taken = (k > i if exclusive else k >= i) if reverse else (k < i if exclusive else k <= i)
        read = x.at([*idx[:axis], k, *idx[axis + 1:]])
        return in_float32(lambda v: combine(pw.where(taken, v, pw.cast(identity, v.dtype)), k), read)
    imp.compute(node, x.shape, body)


@op("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def loss(imp: Importer, node: onnx.NodeProto) -> None:
    """-x[n, target, d...] (times the target's weight; 0 at ignore_index), reduced by `reduction`
    (none, sum, or mean: over the weights taken).  SoftmaxCrossEntropyLoss takes it of the log-softmax
    over axis 1, its second output."""
    scores, target = imp.value(node, 0), imp.value(node, 1)
    weight = imp.optional(node, 2)
    if len(scores.shape) < 2 or np.dtype(target.dtype).kind not in "iu":
        raise WorkloadError(f"{describe(node)}: needs scores (N, C, ...) and integer targets, got {scores.shape} "
                            f"and {target.dtype}")
    reduction = text_attribute(node, "reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        refuse(node, "reduction", reduction, "none, sum or mean")
    ignore = attribute(node, "ignore_index")
    classes = scores.shape[1]
    if node.op_type == "SoftmaxCrossEntropyLoss":
        scores = log_softmax(imp, node, scores, Along(tuple(scores.shape), (1,), True), output=1,
                             part="" if len(node.output) > 1 else "logp")

    def taken(t: Expr) -> Expr:
        return t != int(ignore) if ignore is not None else t == t

    def class_weight(t: Expr) -> Expr:
        one = pw.cast(1, scores.dtype)
        w = weight.at([pw.clamp(pw.cast(t, "int64"), 0, classes - 1)]) if weight is not None else one
        return pw.where(taken(t), w, pw.cast(0, scores.dtype))

    def element(idx) -> Expr:
        t = target.at(idx)
        c = pw.clamp(pw.cast(t, "int64"), 0, classes - 1)
        return -scores.at([idx[0], c, *idx[1:]]) * class_weight(t)

    if reduction == "none":
        imp.compute(node, target.shape, lambda *idx: element(idx))
        return
    loops = [pw.reduce_axis(n, f"r{d}") for d, n in enumerate(target.shape)]
    total = imp.compute(node, (), lambda: pw.sum(element(loops), tuple(loops)),
                        part="" if reduction == "sum" else "total")
    if reduction == "mean":
        weights = imp.compute(node, (), lambda: pw.sum(class_weight(target.at(loops)), tuple(loops)), part="weights")
        imp.compute(node, (), lambda: total.at([]) / weights.at([]))


@op("TopK")
def top_k(imp: Importer, node: onnx.NodeProto) -> None:
    """The k largest (or smallest) elements along an axis and their indices, by rank: an element's rank
    counts the elements before it in the order (greater, or equal at a lower index: ONNX's tie rule), a
    task of its own; output position p then takes the element of rank p.  Quadratic in the axis' length
    (a sort is not one expression): right for the short axes of scores and boxes, not for long ones."""
    x = imp.value(node, 0)
    k = int(np.asarray(imp.array(node, 1, "K")).reshape(-1)[0])
    axis = axis_of(node, int(attribute(node, "axis", -1)), len(x.shape))
    n = x.shape[axis]
    if not isinstance(n, int) or not 0 < k <= n:
        raise WorkloadError(f"{describe(node)}: K={k} for an axis of {n}")
    largest = bool(int(attribute(node, "largest", 1)))
    j = pw.reduce_axis(n, "j")

    def rank(*idx):
        other = list(idx)
        other[axis] = j
        a, b = x.at(other), x.at(idx)
        before = (a > b if largest else a < b) | ((a == b) & (j < idx[axis]))
        return pw.sum(pw.where(before, 1, 0), j)
    ranks = imp.compute(node, x.shape, rank, part="rank")
    i = pw.reduce_axis(n, "i")
    shape = tuple(k if d == axis else s for d, s in enumerate(x.shape))

    def picked(what):
        def body(*idx):
            at = list(idx)
            at[axis] = i
            hit = ranks.at(at) == idx[axis]
            return pw.sum(pw.where(hit, x.at(at) if what == "values" else pw.cast(i, "int64"),
                                   pw.cast(0, x.dtype if what == "values" else "int64")), i)
        return body
    imp.compute(node, shape, picked("values"), output=0)
    if len(node.output) > 1 and node.output[1]:
        imp.compute(node, shape, picked("indices"), output=1)
