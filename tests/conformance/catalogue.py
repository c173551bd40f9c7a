"""The conformance catalogue: workloads with an independent numpy formula each.

Every backend is checked against `pw.reference` on these cases, and the
reference itself is checked against the formulas here, which are written
from the math without ptowsp.  New features add a case.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import ptowsp as pw
from ptowsp.schedules.passes.blocking import block_convolutions
from ptowsp.schedules.passes.propagation import propagate_blocking
from ptowsp.schedules.passes.splitting import split_reductions
from ptowsp.schedules.passes.winograd import winograd_convolutions
from ptowsp.schedules.random_schedule import read_entries
from ptowsp.workloads import random_inputs, zoo  # noqa: F401 - random_inputs: the tests import it from here
from ptowsp.workloads.zoo import layers
from tests.conformance.dtype_cases import DTYPE_CASES
from tests.conformance.edge_cases import EDGE_CASES
from tests.conformance.onnx_cases import onnx_cnn, onnx_cnn_formula, onnx_loop, onnx_loop_formula
from tests.conformance.operator_cases import EXACT, OPERATOR_CASES


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], pw.Workload]
    expected: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    rtol: float = 1e-4


def _erf(x):
    return np.vectorize(math.erf)(x)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _attention(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    return _softmax(s) @ v


def _conv2d(x, w, stride, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    y = np.zeros((n, o, oh, ow))
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, :, r: r + stride * oh: stride, s: s + stride * ow: stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, r, s])
    return y


def _gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _conv_chain() -> pw.Workload:
    """conv -> relu -> max pool 3x3/2 -> conv + the pool -> relu, as the cpu's default build rewrites it:
    blocked convolutions (passes/blocking.py) and the activations between them blocked too
    (passes/propagation.py)."""
    wl = pw.Workload("conv_chain")
    x, w1, w2 = wl.input("X", (1, 3, 10, 10)), wl.input("W1", (16, 3, 3, 3)), wl.input("W2", (16, 16, 3, 3))

    def conv(name, source, w):
        size, padded = source.shape[2], source.boundary("constant", 0.0)
        c, r, s = pw.reduce_axis(source.shape[1], f"c{name}"), pw.reduce_axis(3, f"r{name}"), pw.reduce_axis(3, f"s{name}")
        return wl.compute(name, (1, w.shape[0], size, size), lambda n, o, y, xx: pw.sum(
            padded[n, c, y + r - 1, xx + s - 1] * w[o, c, r, s], axis=(c, r, s)))

    first = conv("C1", x, w1)
    act = wl.compute("A1", first.shape, lambda n, c, y, xx: pw.maximum(first[n, c, y, xx], 0.0))
    edge, r, s = act.boundary("repeat_edge"), pw.reduce_axis(3, "rp"), pw.reduce_axis(3, "sp")
    pool = wl.compute("P", (1, 16, 5, 5), lambda n, c, y, xx: pw.max(pw.where(
        (y * 2 + r - 1 >= 0) & (xx * 2 + s - 1 >= 0), edge[n, c, y * 2 + r - 1, xx * 2 + s - 1], -np.inf), axis=(r, s)))
    second = conv("C2", pool, w2)
    wl.output(wl.compute("Y", second.shape, lambda n, c, y, xx: pw.maximum(second[n, c, y, xx] + pool[n, c, y, xx], 0.0)))
    return propagate_blocking(block_convolutions(wl, 8), 8)


def _conv_chain_formula(p):
    a = np.maximum(_conv2d(p["X"], p["W1"], 1, 1), 0)
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pool = np.max([padded[:, :, r:r + 10:2, s:s + 10:2] for r in range(3) for s in range(3)], axis=0)
    return {"Y": np.maximum(_conv2d(pool, p["W2"], 1, 1) + pool, 0)}


def _chain(x, length):
    steps = [lambda v: v * 1.5 + 0.25, np.tanh, lambda v: v / (1 + np.exp(-v)), lambda v: np.exp(-v * v)]
    for n in range(length):
        x = steps[n % 4](x)
    return x


def _block(p, heads, eps=1e-5):
    x = p["x"]
    seq, width = x.shape
    a = _layernorm(x, p["ln1_gamma"], p["ln1_beta"], eps)
    q, k, v = ((a @ p[w]).reshape(seq, heads, -1).transpose(1, 0, 2) for w in ("Wq", "Wk", "Wv"))
    ctx = _attention(q, k, v, True).transpose(1, 0, 2).reshape(seq, width)
    h = x + ctx @ p["Wo"]
    f = _gelu(_layernorm(h, p["ln2_gamma"], p["ln2_beta"], eps) @ p["W1"] + p["b1"])
    return h + f @ p["W2"] + p["b2"]


_WEIGHTS = {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
            for seed, (name, shape) in enumerate({"W1": (24, 40), "b1": (40,), "W2": (40, 8), "s": (8,),
                                                  "b2": (8,)}.items())}


def _constant_mlp() -> pw.Workload:
    """An mlp whose weights are constants; its rescaled weight Ws = W2 * s reads only constants, so it
    is folded at build time (and, as an output, returned from the folded value)."""
    wl = pw.Workload("mlp_constants")
    x = wl.input("X", (16, 24))
    w1, b1, w2, s, b2 = (wl.constant(name, value) for name, value in _WEIGHTS.items())
    ws = wl.compute("Ws", (40, 8), lambda k, j: w2[k, j] * s[j])
    g = layers.gelu(wl, "G", layers.bias_add(wl, "H_bias", layers.matmul(wl, "H", x, w1), b1))
    wl.output(layers.bias_add(wl, "Y", layers.matmul(wl, "Y_mm", g, ws), b2), ws)
    return wl


def _constant_mlp_formula(p):
    w = {name: value.astype(np.float64) for name, value in _WEIGHTS.items()}
    ws = w["W2"] * w["s"]
    return {"Y": _gelu(p["X"] @ w["W1"] + w["b1"]) @ ws + w["b2"], "Ws": ws}


CASES = [
    Case("matmul", lambda: zoo.matmul(64, 48, 80), lambda p: {"C": p["A"] @ p["B"]}),
    Case("matmul_int32", lambda: zoo.matmul(16, 8, 12, dtype="int32"), lambda p: {"C": p["A"] @ p["B"]}, 0),
    Case("matmul_float16", lambda: zoo.matmul(16, 8, 32, dtype="float16"), lambda p: {"C": p["A"] @ p["B"]}, 2e-2),
    Case("batch_matmul", lambda: zoo.batch_matmul(3, 16, 24, 8), lambda p: {"C": p["A"] @ p["B"]}),
    Case("softmax", lambda: zoo.softmax(32, 50), lambda p: {"Y": _softmax(p["X"])}),
    Case("layernorm", lambda: zoo.layernorm(32, 40),
         lambda p: {"Y": _layernorm(p["X"], p["gamma"], p["beta"], 1e-5)}),
    Case("rmsnorm", lambda: zoo.rmsnorm(32, 40),
         lambda p: {"Y": p["X"] / np.sqrt((p["X"] ** 2).mean(-1, keepdims=True) + 1e-6) * p["gamma"]}),
    Case("attention", lambda: zoo.attention(2, 3, 16, 8), lambda p: {"O": _attention(p["Q"], p["K"], p["V"], False)}),
    Case("attention_causal", lambda: zoo.attention(1, 2, 16, 8, causal=True),
         lambda p: {"O": _attention(p["Q"], p["K"], p["V"], True)}),
    Case("mlp", lambda: zoo.mlp(16, 24, 40, 8),
         lambda p: {"Y": _gelu(p["X"] @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]}),
    Case("conv2d", lambda: zoo.conv2d(2, 3, 9, 9, 4, 3, 1, 1), lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 1)}),
    Case("conv2d_strided", lambda: zoo.conv2d(1, 2, 11, 10, 3, 3, 2, 2),
         lambda p: {"Y": _conv2d(p["X"], p["W"], 2, 2)}),
    Case("conv2d_unpadded", lambda: zoo.conv2d(1, 2, 7, 7, 2, 3, 1, 0), lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 0)}),
    # 32 output channels: the cpu's default blocks it by one vector (passes/blocking.py)
    Case("conv2d_wide", lambda: zoo.conv2d(1, 5, 10, 9, 32, 3, 1, 1), lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 1)}),
    # the blocked form itself (pad, packed weights, NCHW8c contraction, unpack) under every schedule and target
    Case("conv2d_nchwc", lambda: block_convolutions(zoo.conv2d(2, 3, 11, 10, 16, 3, 2, 2), 8),
         lambda p: {"Y": _conv2d(p["X"], p["W"], 2, 2)}),
    # Winograd's F(4x4, 3x3) and F(2x2, 3x3) forms (pad, tile transforms, products, output transforms)
    Case("conv2d_winograd", lambda: winograd_convolutions(zoo.conv2d(1, 4, 26, 28, 4, 3, 1, 1), 4),
         lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 1)}),
    Case("conv2d_winograd_2x2", lambda: winograd_convolutions(zoo.conv2d(1, 4, 14, 13, 4, 3, 1, 1), 4),
         lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 1)}),
    # a 1x1 convolution of an input as a matmul over its flattened pixels, read back (passes/blocking.py)
    Case("conv1x1_pixels", lambda: block_convolutions(zoo.conv2d(1, 8, 4, 8, 8, 1, 1, 0), 8),
         lambda p: {"Y": _conv2d(p["X"], p["W"], 1, 0)}),
    # the activations between blocked convolutions kept blocked (a ReLU, a max pool, a residual add)
    Case("conv_chain_nchwc", _conv_chain, _conv_chain_formula),
    # a matrix-vector product as partial sums over slices of its reduction, then their sum (passes/splitting.py)
    Case("gemv_split", lambda: split_reductions(zoo.matmul(1, 24, 512), min_operand=1), lambda p: {"C": p["A"] @ p["B"]}),
    Case("elementwise_chain", lambda: zoo.elementwise_chain((16, 24), 6), lambda p: {"Y": _chain(p["X"], 6)}),
    Case("transformer_block", lambda: zoo.transformer_block(16, 32, 4, 64), lambda p: {"y": _block(p, 4)}),
    Case("matmul_prime", lambda: zoo.matmul(13, 7, 11), lambda p: {"C": p["A"] @ p["B"]}),
    Case("softmax_prime", lambda: zoo.softmax(7, 13), lambda p: {"Y": _softmax(p["X"])}),
    Case("mlp_constants", _constant_mlp, _constant_mlp_formula),
    Case("onnx_cnn", onnx_cnn, onnx_cnn_formula),  # imported by pw.frontend.from_onnx; oracle: onnx.reference
    Case("onnx_loop", onnx_loop, onnx_loop_formula),  # ONNX Loop and Scan as ptowsp scans
]
CASES += [
    Case(fn.__name__, lambda fn=fn: fn()[0], lambda p, fn=fn: fn()[1](p),
         {"float16_chain": 2e-2, "int_arith": 0, "int64_sum": 0, "compare_to_bool": 0}.get(fn.__name__, 1e-4))
    for fn in EDGE_CASES
]
CASES += [Case(fn.__name__, lambda fn=fn: fn()[0], lambda p, fn=fn: fn()[1](p),
               0 if fn in EXACT else 1e-4)
          for fn in OPERATOR_CASES]
CASES += [Case(*case) for case in DTYPE_CASES]


def hand_schedule(wl: pw.Workload) -> pw.Schedule:
    """A typical hand schedule: the innermost spatial loop split by 8 and vectorized, the outermost parallel."""
    s = wl.schedule()
    for task in wl.tasks:
        if wl.category(task) is pw.Category.OPAQUE:
            continue
        spatial = s.spatial_loops(task)
        if not spatial:  # a 0-d task: one element
            continue
        try:
            inner = spatial[-1]
            if s.nest(task).loop(inner).extent >= 8:
                s.split(task, inner, 8)
                lane = f"{inner}.inner"
                s.reorder(task, *[name for name in s.loops(task) if name != lane], lane)
                s.vectorize(task, lane)
            if len(s.spatial_loops(task)) > 1:
                s.parallel(task, s.loops(task)[0])
        except pw.ScheduleError:
            pass  # a shape this heuristic does not fit keeps its earlier steps
    return s


def fused_schedule(wl: pw.Workload) -> pw.Schedule:
    """Every producer computed inside the latest task that holds all its reads (at the loop where
    they enter it, else its outermost spatial loop), and innermost reduction loops vectorized as
    two 8-lane partials: compute_at, staging and partial reductions on every workload."""
    s = wl.schedule()
    computes = [t for t in wl.tasks if wl.category(t) is not pw.Category.OPAQUE]
    for task in reversed(computes):
        successors = list(wl.graph.successors(task))
        if task in wl.outputs or not successors:
            continue
        for host in reversed(computes):
            found = [read_entries(s, d, host) for d in successors]
            if host in s.inlined or any(f is None for f in found):
                continue
            loops = set().union(*found) - {None}
            if len(loops) <= 1:
                try:
                    s.compute_at(task, host, next(iter(loops)) if loops else s.spatial_loops(host)[0])
                    break
                except pw.ScheduleError:
                    pass
    for task in computes:
        reduce = s.reduce_loops(task) if task not in s.inlined else []
        if reduce and s.loops(task)[-1] == reduce[-1] and s.nest(task).loop(reduce[-1]).extent >= 16:
            last = reduce[-1]
            s.split(task, last, 16).split(task, f"{last}.inner", 8)
            s.unroll(task, f"{last}.inner.outer").vectorize(task, f"{last}.inner.inner")
    return s
