"""The ONNX operators `from_onnx` imports: each builds the node's tasks from ptowsp expressions.

Semantics follow the ONNX operator specs (opset 13+; `onnx.reference`
is the test oracle).  Attributes a handler does not cover are refused by
`refuse`, naming the node, the op and the attribute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_sizes import broadcast, same
from ptowsp.te import Expr

OPS: dict[str, Callable[[Importer, onnx.NodeProto], None]] = {}


def op(*names: str):
    def register(fn):
        for name in names:
            OPS[name] = fn
        return fn
    return register


def refuse(node: onnx.NodeProto, name: str, value: object, expected: str) -> None:
    raise WorkloadError(f"{describe(node)}: attribute {name}={value!r} is not supported ({expected})")


def axis_of(node: onnx.NodeProto, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise WorkloadError(f"{describe(node)}: {what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@op("Identity")
def identity(imp: Importer, node: onnx.NodeProto) -> None:
    imp.values[node.output[0]] = imp.value(node, 0)  # (over a constant it was folded before it got here)


_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


@op("Constant")
def constant(imp: Importer, node: onnx.NodeProto) -> None:
    """A tensor (`value`) or a float, int or list of them (`value_float(s)`, `value_int(s)`)."""
    given = [a.name for a in node.attribute]
    if "value" in given:
        imp.constant(node.output[0], imp.tensor_array(attribute(node, "value"), describe(node)))
        return
    form = next((g for g in given if g in _CONSTANT_FORMS), None)
    if form is None:
        refuse(node, given[0] if given else "value", "...", "a tensor `value`, or value_float(s) or value_int(s)")
    imp.constant(node.output[0], np.array(attribute(node, form), dtype=_CONSTANT_FORMS[form]))


NARROW_FLOATS = ("float16", "bfloat16")


def in_float32(fn: Callable[..., Expr], *xs: Expr) -> Expr:
    """fn(*xs), computed in float32 and rounded once where it would give a narrow float (float16,
    bfloat16): one ONNX node is one rounding (as onnxruntime and onnx's reference compute it), where
    the language rounds after every operation (a Celu would round its exp, its minus and its product)."""
    plain = fn(*xs)
    if plain.dtype not in NARROW_FLOATS:
        return plain
    return pw.cast(fn(*(pw.cast(x, "float32") if x.dtype in NARROW_FLOATS else x for x in xs)), plain.dtype)


# -- contractions --------------------------------------------------------------------------------
@op("MatMul")
def matmul(imp: Importer, node: onnx.NodeProto) -> None:
    matmul_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b)


def matmul_of(imp: Importer, node: onnx.NodeProto, a: Value, b: Value, term: Callable[[Expr, Expr], Expr],
              then: Callable[[Expr, Sequence[Expr]], Expr] | None = None) -> Value:
    """numpy's matmul of a and b, summing `term(a element, b element)`; `then(sum, output index)` finishes
    each element (the quantized operators' rescaling), else the sum is the result."""
    if len(a.shape) < 1 or len(b.shape) < 1:
        raise WorkloadError(f"{describe(node)}: MatMul of a scalar")
    a_shape = a.shape if len(a.shape) > 1 else (1, *a.shape)
    b_shape = b.shape if len(b.shape) > 1 else (*b.shape, 1)
    if not same(a_shape[-1], b_shape[-2]):
        raise WorkloadError(f"{describe(node)}: shapes {a.shape} and {b.shape} do not multiply")
    batch = broadcast(node, a_shape[:-2], b_shape[:-2])
    out = batch + (a_shape[-2], b_shape[-1])
    k = pw.reduce_axis(a_shape[-1], "k")
    finish = then or (lambda total, idx: total)

    def body(*idx):
        *bi, m, n = idx
        left = a.broadcast_at(bi + [m, k], batch + a_shape[-2:]) if len(a.shape) > 1 else a.at([k])
        right = b.broadcast_at(bi + [k, n], batch + b_shape[-2:]) if len(b.shape) > 1 else b.at([k])
        return finish(in_float32(lambda x, y: pw.sum(term(x, y), k), left, right), idx)

    full = imp.compute(node, out, body, part="" if len(a.shape) > 1 and len(b.shape) > 1 else "full")
    if full.shape != out or len(a.shape) > 1 and len(b.shape) > 1:
        return full
    keep = [d for d in range(len(out)) if not (d == len(out) - 2 and len(a.shape) == 1
                                                or d == len(out) - 1 and len(b.shape) == 1)]
    shape = tuple(out[d] for d in keep)

    def squeeze(*idx):
        full_idx = [0] * len(out)
        for d, i in zip(keep, idx, strict=True):
            full_idx[d] = i
        return full.at(full_idx)
    return imp.compute(node, shape, squeeze)


@op("Einsum")
def einsum(imp: Importer, node: onnx.NodeProto) -> None:
    """numpy's einsum: one product of the operands at their letters' indices, summed over the letters
    the output leaves out ("ij,jk->ik", "bij,bjk->bik", a diagonal "ii->i", a trace "ii", "...ij->...ji";
    without "->" the output is the letters met once, in alphabetical order, after the ellipsis)."""
    equation = text_attribute(node, "equation", "").replace(" ", "")
    values = [imp.value(node, k) for k in range(len(node.input))]
    given, _, wanted = equation.partition("->")
    terms = given.split(",")
    if len(terms) != len(values):
        raise WorkloadError(f"{describe(node)}: equation {equation!r} has {len(terms)} operands, the node "
                            f"{len(values)}")
    ellipsis = max((len(v.shape) - len(t.replace("...", "")) for t, v in zip(terms, values, strict=True)
                    if "..." in t), default=0)
    dots = "".join(chr(0x3b1 + d) for d in range(ellipsis))  # the ellipsis' dimensions as Greek letters

    def letters(term: str, rank: int) -> str:
        return term.replace("...", dots[ellipsis - (rank - len(term.replace("...", ""))):]) if "..." in term \
            else term
    spelled = [letters(t, len(v.shape)) for t, v in zip(terms, values, strict=True)]
    extent: dict[str, int] = {}
    for term, v in zip(spelled, values, strict=True):
        if len(term) != len(v.shape) or not all(ch.isalpha() for ch in term):
            raise WorkloadError(f"{describe(node)}: equation {equation!r} does not fit operand shape {v.shape}")
        for ch, n in zip(term, v.shape, strict=True):
            if extent.get(ch, 1) not in (1, n) and n != 1:
                raise WorkloadError(f"{describe(node)}: index {ch!r} of {equation!r} is {extent[ch]} and {n}")
            extent[ch] = max(extent.get(ch, 1), n)
    counts = {ch: sum(term.count(ch) for term in spelled) for ch in extent}
    output = letters(wanted, ellipsis + len(wanted.replace("...", ""))) if "->" in equation else \
        dots + "".join(sorted(ch for ch in extent if counts[ch] == 1 and ch not in dots))
    summed = [ch for ch in extent if ch not in output]
    axes = {ch: pw.reduce_axis(extent[ch], f"e_{ch}" if ch.isascii() else f"e{ord(ch)}") for ch in summed}

    def body(*idx):
        at = {**dict(zip(output, idx, strict=True)), **axes}
        product = None
        for term, v in zip(spelled, values, strict=True):
            read = v.at([at[ch] if n != 1 else 0 for ch, n in zip(term, v.shape, strict=True)])
            product = read if product is None else product * read
        return pw.sum(product, tuple(axes.values())) if axes else product
    imp.compute(node, tuple(extent[ch] for ch in output), body)


@op("Gemm")
def gemm(imp: Importer, node: onnx.NodeProto) -> None:
    a, b, c = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
    alpha, beta = float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0))
    ta, tb = int(attribute(node, "transA", 0)), int(attribute(node, "transB", 0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise WorkloadError(f"{describe(node)}: Gemm needs 2-D inputs, got {a.shape} and {b.shape}")
    m, kk = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if kk != kb:
        raise WorkloadError(f"{describe(node)}: shapes {a.shape} (transA={ta}) and {b.shape} (transB={tb}) "
                            "do not multiply")
    k = pw.reduce_axis(kk, "k")

    def body(i, j):
        product = pw.sum((a.at([k, i]) if ta else a.at([i, k])) * (b.at([j, k]) if tb else b.at([k, j])), k)
        value = product * alpha if alpha != 1.0 else product
        if c is not None and beta != 0.0:
            bias = c.broadcast_at([i, j], (m, n))
            value = value + (bias * beta if beta != 1.0 else bias)
        return value
    imp.compute(node, (m, n), body)


def _pads(node: onnx.NodeProto, size: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int]) -> list[int]:
    """The pads before and after each spatial dimension: the node's, none (VALID), or SAME_UPPER /
    SAME_LOWER's: as many as make the output ceil(size / stride) long, the odd one at the end / start."""
    auto = text_attribute(node, "auto_pad", "NOTSET")
    k = len(kernel)
    if auto == "VALID":
        return [0] * 2 * k
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if not all(isinstance(n, int) for n in size):
            refuse(node, "auto_pad", auto, "NOTSET or VALID over a symbolic image size; give explicit pads")
        total = [max((-(-n // st) - 1) * st + (kn - 1) * d + 1 - n, 0)
                 for n, kn, st, d in zip(size, kernel, strides, dilations, strict=True)]
        before = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return before + [t - b for t, b in zip(total, before, strict=True)]
    if auto != "NOTSET":
        refuse(node, "auto_pad", auto, "NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    return list(attribute(node, "pads", [0] * 2 * k))


def _window(node: onnx.NodeProto, x: Value, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int],
                                                                              list[int]]:
    """(strides, pads, dilations, output sizes) of a sliding window over x (N, C, spatial...), in as many
    spatial dimensions as the kernel has."""
    k = len(kernel)
    if k < 1 or len(x.shape) != 2 + k:
        raise WorkloadError(f"{describe(node)}: a {k}-D window needs an input of rank {2 + k} (N, C and "
                            f"{k} spatial dimensions), got shape {x.shape}")
    strides = list(attribute(node, "strides", [1] * k))
    dilations = list(attribute(node, "dilations", [1] * k))
    for name, values, count, least in (("strides", strides, k, 1), ("dilations", dilations, k, 1),
                                       ("kernel_shape", list(kernel), k, 1)):
        if len(values) != count or any(v < least for v in values):
            refuse(node, name, values, f"{count} integers of at least {least} (a {k}-D window)")
    pads = _pads(node, x.shape[2:], kernel, strides, dilations)
    if len(pads) != 2 * k or any(v < 0 for v in pads):
        refuse(node, "pads", pads, f"{2 * k} integers of at least 0 (a {k}-D window)")
    ceil = bool(int(attribute(node, "ceil_mode", 0)))  # pools: the last window may hang over the end
    spans = [x.shape[2 + d] + pads[d] + pads[d + k] - dilations[d] * (kernel[d] - 1) - 1 for d in range(k)]
    out = [-(-spans[d] // strides[d]) + 1 if ceil else spans[d] // strides[d] + 1 for d in range(k)]
    # (ONNX and torch: a last window that would start past the input and its leading pad is dropped)
    out = [o - 1 if ceil and (o - 1) * strides[d] >= x.shape[2 + d] + pads[d] else o for d, o in enumerate(out)]
    if any(isinstance(o, int) and o < 1 for o in out):  # (a symbolic image size: checked when bound)
        raise WorkloadError(f"{describe(node)}: the window {list(kernel)} leaves no output on input {x.shape}")
    return strides, pads, dilations, out


def lowest(dtype: str) -> float | int:
    """The identity of max in `dtype`: padding that never wins and keeps the type."""
    return int(np.iinfo(dtype).min) if np.dtype(dtype).kind in "iu" else -math.inf


def highest(dtype: str) -> float | int:
    """The identity of min in `dtype`."""
    return int(np.iinfo(dtype).max) if np.dtype(dtype).kind in "iu" else math.inf


def _inside(pos: Sequence[object], size: Sequence[object], low: Sequence[int] | None = None) -> object:
    """Whether a window position lies in [low, size) in every dimension (low: 0)."""
    low = low or [0] * len(pos)
    inside = (pos[0] >= low[0]) & (pos[0] < size[0])
    for p, lo, n in zip(pos[1:], low[1:], size[1:], strict=True):
        inside = inside & (p >= lo) & (p < n)
    return inside


def _taps(kernel: Sequence[int]) -> tuple:
    """A reduce axis per spatial dimension of a window: r, s (and t for a 3-D one)."""
    names = "rstuvw" if len(kernel) <= 6 else [f"r{d}" for d in range(len(kernel))]
    return tuple(pw.reduce_axis(n, names[d]) for d, n in enumerate(kernel))


@op("Conv")
def conv(imp: Importer, node: onnx.NodeProto) -> None:
    bias = imp.optional(node, 2)
    if bias is None:
        conv_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b, 0.0)
        return
    # the bias is a task of its own: the convolution stays the plain contraction the cpu's blocking pass
    # recognises (passes/blocking.py), and fusion makes the add its epilogue
    total = conv_of(imp, node, imp.value(node, 0), imp.value(node, 1), lambda a, b: a * b, 0.0, part="conv")
    imp.compute(node, total.shape, lambda n, o, *where: total.at([n, o, *where]) + bias.at([o]))


def conv_of(imp: Importer, node: onnx.NodeProto, x: Value, w: Value, term: Callable[[Expr, Expr], Expr],
            pad: object, part: str = "", then: Callable[[Expr, Sequence[Expr]], Expr] | None = None) -> Value:
    """A convolution in 1, 2 or more spatial dimensions (the node's strides, pads, dilations and group)
    summing `term(x element, w element)`, with x's padding read as `pad`; `then(sum, output index)`
    finishes each element."""
    if len(w.shape) < 3:
        raise WorkloadError(f"{describe(node)}: a convolution's weight has (M, C/group, kernel...) dimensions, "
                            f"got shape {w.shape}")
    group = int(attribute(node, "group", 1))
    out_ch, per_group, *kernel = w.shape
    if not all(isinstance(d, int) for d in (x.shape[1], *w.shape)) or group < 1 \
            or x.shape[1] != per_group * group or out_ch % group:
        raise WorkloadError(f"{describe(node)}: input channels {x.shape[1]} do not match weight {w.shape} "
                            f"with group={group}")
    strides, pads, dil, out = _window(node, x, kernel)
    c, taps = pw.reduce_axis(per_group, "c"), _taps(kernel)
    outs_per_group = out_ch // group
    size = x.shape[2:]
    finish = then or (lambda total, idx: total)

    def body(n, o, *at):
        pos = tuple(at[d] * strides[d] + taps[d] * dil[d] - pads[d] for d in range(len(kernel)))
        if per_group == 1:  # depthwise: one input channel per group, read as the output's own (no c axis)
            channel, k, axes = o if outs_per_group == 1 else o // outs_per_group, 0, taps
        else:
            channel, k, axes = c if group == 1 else o // outs_per_group * per_group + c, c, (c, *taps)
        read = x.at([n, channel, *pos])
        if any(pads):
            read = pw.where(_inside(pos, size), read, pad)
        return finish(pw.sum(term(read, w.at([o, k, *taps])), axes), (n, o, *at))
    return imp.compute(node, (x.shape[0], out_ch, *out), body, part=part)


@op("ConvTranspose")
def conv_transpose(imp: Importer, node: onnx.NodeProto) -> None:
    """The gradient of a convolution as a gather: output position y sums, over input channels c of its
    group and taps r, X[c, t / stride] * W[c, o, r] where t = y + pad - r * dilation is a multiple of
    the stride inside the input (the other taps land between input elements or outside)."""
    x, w, bias = imp.value(node, 0), imp.value(node, 1), imp.optional(node, 2)
    group = int(attribute(node, "group", 1))
    in_ch, outs_per_group, *kernel = w.shape
    k = len(kernel)
    if k < 1 or len(x.shape) != 2 + k or x.shape[1] != in_ch or in_ch % group or \
            not all(isinstance(d, int) for d in x.shape[1:]):
        raise WorkloadError(f"{describe(node)}: input {x.shape} does not match weight {w.shape} with group={group}")
    strides = list(attribute(node, "strides", [1] * k))
    dil = list(attribute(node, "dilations", [1] * k))
    extra = list(attribute(node, "output_padding", [0] * k))
    size = x.shape[2:]
    reach = [(kernel[d] - 1) * dil[d] + 1 for d in range(k)]
    full = [strides[d] * (size[d] - 1) + extra[d] + reach[d] for d in range(k)]  # before any pads
    wanted = attribute(node, "output_shape")
    auto = text_attribute(node, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):  # as onnx's reference splits them: UPPER's odd one at the end
        out = list(wanted)[-k:] if wanted is not None else [size[d] * strides[d] for d in range(k)]
        total = [full[d] - out[d] for d in range(k)]
        before = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    elif auto in ("NOTSET", "VALID"):  # an output_shape past the full one holds zeros at the end
        pads = [0] * 2 * k if auto == "VALID" else list(attribute(node, "pads", [0] * 2 * k))
        before = pads[:k]
        out = list(wanted)[-k:] if wanted is not None else [full[d] - pads[d] - pads[d + k] for d in range(k)]
    else:
        refuse(node, "auto_pad", auto, "NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    if any(o < 1 for o in out):
        raise WorkloadError(f"{describe(node)}: the output {out} of input {x.shape} is empty")
    per_group = in_ch // group
    c, taps = pw.reduce_axis(per_group, "c"), _taps(kernel)

    def body(n, o, *at):
        channel = o // outs_per_group * per_group + c if group > 1 else c
        starts = [at[d] + before[d] - taps[d] * dil[d] for d in range(k)]
        pos = [t // strides[d] if strides[d] != 1 else t for d, t in enumerate(starts)]
        hit = _inside(pos, size)
        for d, t in enumerate(starts):
            if strides[d] != 1:
                hit = hit & (t % strides[d] == 0)
        clamped = [pw.minimum(pw.maximum(p, 0), size[d] - 1) for d, p in enumerate(pos)]
        read = pw.where(hit, x.at([n, channel, *clamped]), 0.0)
        total = pw.sum(read * w.at([channel, o % outs_per_group, *taps]), (c, *taps))
        return total + bias.at([o]) if bias is not None else total
    imp.compute(node, (x.shape[0], outs_per_group * group, *out), body)


# -- pooling and normalisation -------------------------------------------------------------------
@op("MaxPool", "AveragePool", "LpPool")
def pool(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    kernel = list(attribute(node, "kernel_shape"))
    strides, pads, dil, out = _window(node, x, kernel)
    k = len(kernel)
    taps = _taps(kernel)
    size = x.shape[2:]
    # how far the last window reaches past the input's end (ceil_mode=1 lets it hang over the end pad)
    over = [(o - 1) * strides[d] - pads[d] + (kernel[d] - 1) * dil[d] + 1 - size[d] for d, o in enumerate(out)]
    ceil = bool(int(attribute(node, "ceil_mode", 0)))
    # over a symbolic image size only ceil_mode=1 can hang a window past the end (and past the end pad)
    past = [o > 0 if isinstance(o, int) else ceil for o in over]
    masked = any(pads) or any(past)

    def window(at):
        return tuple(at[d] * strides[d] + (taps[d] * dil[d] if dil[d] != 1 else taps[d]) - pads[d] for d in range(k))

    if node.op_type == "LpPool":  # (sum of |x| ** p over the window, padding 0) ** (1 / p)
        p = int(attribute(node, "p", 2))

        def body(n, ch, *at):
            pos = window(at)
            read = pw.abs(x.at([n, ch, *pos]))
            read = pw.where(_inside(pos, size), read, 0.0) if masked else read
            powered = read * read if p == 2 else read if p == 1 else read ** float(p)
            total = pw.sum(powered, taps)
            return pw.sqrt(total) if p == 2 else total if p == 1 else total ** (1.0 / p)
    elif node.op_type == "MaxPool":
        def body(n, ch, *at, indices=False):
            pos = window(at)
            read = x.at([n, ch, *pos])
            read = pw.where(_inside(pos, size), read, lowest(x.dtype)) if masked else read
            if not indices:
                return pw.max(read, taps)
            return _flat_index(node, pw.argmax(read, taps), n, ch, at, x.shape, kernel, strides, pads, dil)

        if len(node.output) > 1 and node.output[1]:
            imp.compute(node, (x.shape[0], x.shape[1], *out), lambda *idx: body(*idx, indices=True), output=1)
    else:
        include = int(attribute(node, "count_include_pad", 0))
        # the divisor: the taps inside the input, or inside the input and its pads (count_include_pad),
        # never those of a window hanging past the end pad (ceil_mode)
        low = [-pads[d] if include else 0 for d in range(k)]
        high = [size[d] + pads[d + k] if include else size[d] for d in range(k)]

        def body(n, ch, *at):
            pos = window(at)
            read = x.at([n, ch, *pos])
            total = pw.sum(pw.where(_inside(pos, size), read, 0.0) if masked else read, taps)
            if not masked or include and not any(past):
                return total / float(math.prod(kernel))
            if any(d != 1 for d in dil):  # the taps inside, counted
                return total / pw.cast(pw.sum(pw.where(_inside(pos, high, low), 1, 0), taps), x.dtype)
            counts = [pw.minimum(at[d] * strides[d] - pads[d] + kernel[d], high[d])
                      - pw.maximum(at[d] * strides[d] - pads[d], low[d]) for d in range(k)]
            return total / pw.cast(math.prod(counts[1:], start=counts[0]), x.dtype)
    imp.compute(node, (x.shape[0], x.shape[1], *out), body)


def _flat_index(node: onnx.NodeProto, tap: Expr, n: Expr, ch: Expr, at, shape, kernel, strides, pads, dil) -> Expr:
    """MaxPool's Indices: the input element that `tap` (the row-major index over the window's taps, the
    first largest) names, flattened over the whole input: row-major (storage_order 0), or with the
    spatial axes column-major (storage_order 1: 2-D only)."""
    k, offsets, rest = len(kernel), [], tap
    for d in reversed(range(k)):
        offsets.insert(0, rest % kernel[d])
        rest = rest // kernel[d]
    pos = [at[d] * strides[d] + offsets[d] * dil[d] - pads[d] for d in range(k)]
    index = n * shape[1] + ch
    if int(attribute(node, "storage_order", 0)):
        if k != 2:
            refuse(node, "storage_order", 1, "0 for other than 2-D pooling")
        return index * (shape[2] * shape[3]) + pos[0] + pos[1] * shape[2]
    for d in range(k):
        index = index * shape[2 + d] + pos[d]
    return index


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if len(x.shape) < 3:
        raise WorkloadError(f"{describe(node)}: needs an (N, C, spatial...) input, got shape {x.shape}")
    taps = _taps(x.shape[2:])
    spatial = (1,) * len(taps)
    if node.op_type == "GlobalAveragePool":
        area = float(math.prod(x.shape[2:]))
        imp.compute(node, (*x.shape[:2], *spatial), lambda n, ch, *_: pw.sum(x.at([n, ch, *taps]), taps) / area)
    else:
        imp.compute(node, (*x.shape[:2], *spatial), lambda n, ch, *_: pw.max(x.at([n, ch, *taps]), taps))
