"""Layer builders: each adds tasks to an existing workload and returns the result tensor.

The zoo's workloads and larger models (the transformer block) are written
with these, so each formula lives in one place.  Task names get the given
prefix, so one workload can hold several layers of the same kind.
"""

from __future__ import annotations

import math

from ptowsp.errors import ShapeError
from ptowsp.te import Expr, Tensor, cast, erf, exp, reduce_axis, reduce_max, reduce_sum, rsqrt, where
from ptowsp.workloads.workload import Workload


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def matmul(wl: Workload, name: str, a: Tensor, b: Tensor, accumulate: str | None = None) -> Tensor:
    """name[i, j] = sum(a[i, k] * b[k, j], k); with `accumulate`, each operand is cast to that dtype
    first (float16 inputs summed in float32, int8 in int32: the tensor cores' and VNNI's contractions)."""
    (m, ka), (kb, n) = a.shape, b.shape
    _need(ka == kb, f"matmul {name}: {a.name} is {a.shape} but {b.name} is {b.shape}; inner sizes differ")
    k = reduce_axis(ka, "k")
    if accumulate is None:
        return wl.compute(name, (m, n), lambda i, j: reduce_sum(a[i, k] * b[k, j], k))
    return wl.compute(name, (m, n), lambda i, j: reduce_sum(cast(a[i, k], accumulate) * cast(b[k, j], accumulate), k))


def bias_add(wl: Workload, name: str, x: Tensor, bias: Tensor) -> Tensor:
    """name[i, j] = x[i, j] + bias[j]."""
    _need(bias.shape == x.shape[-1:], f"{name}: bias {bias.name}{bias.shape} does not match {x.name}{x.shape}")
    return wl.compute(name, x.shape, lambda i, j: x[i, j] + bias[j])


def residual_add(wl: Workload, name: str, x: Tensor, y: Tensor) -> Tensor:
    """name[i, j] = x[i, j] + y[i, j]."""
    _need(x.shape == y.shape, f"{name}: {x.name}{x.shape} and {y.name}{y.shape} differ in shape")
    return wl.compute(name, x.shape, lambda i, j: x[i, j] + y[i, j])


def gelu_of(v: Expr) -> Expr:
    """Exact GELU of one value: 0.5 * v * (1 + erf(v / sqrt(2)))."""
    return 0.5 * v * (1.0 + erf(v * (1.0 / math.sqrt(2.0))))


def gelu(wl: Workload, name: str, x: Tensor) -> Tensor:
    """name[i, j] = gelu_of(x[i, j])."""
    return wl.compute(name, x.shape, lambda i, j: gelu_of(x[i, j]))


def softmax_rows(wl: Workload, name: str, x: Tensor) -> Tensor:
    """Numerically stable softmax over the last axis of a 2-d tensor (tasks name_max, _exp, _sum, name)."""
    rows, cols = x.shape
    k = reduce_axis(cols, "k")
    mx = wl.compute(f"{name}_max", (rows,), lambda i: reduce_max(x[i, k], k))
    e = wl.compute(f"{name}_exp", (rows, cols), lambda i, j: exp(x[i, j] - mx[i]))
    s = wl.compute(f"{name}_sum", (rows,), lambda i: reduce_sum(e[i, k], k))
    return wl.compute(name, (rows, cols), lambda i, j: e[i, j] / s[i])


def layernorm_rows(wl: Workload, name: str, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance)."""
    rows, cols = x.shape
    _need(gamma.shape == (cols,) and beta.shape == (cols,), f"{name}: gamma and beta must have shape ({cols},)")
    k = reduce_axis(cols, "k")
    mean = wl.compute(f"{name}_mean", (rows,), lambda i: reduce_sum(x[i, k], k) / cols)
    var = wl.compute(
        f"{name}_var", (rows,), lambda i: reduce_sum((x[i, k] - mean[i]) * (x[i, k] - mean[i]), k) / cols
    )
    return wl.compute(
        name, (rows, cols), lambda i, j: (x[i, j] - mean[i]) * rsqrt(var[i] + eps) * gamma[j] + beta[j]
    )


def rmsnorm_rows(wl: Workload, name: str, x: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis."""
    rows, cols = x.shape
    _need(gamma.shape == (cols,), f"{name}: gamma must have shape ({cols},)")
    k = reduce_axis(cols, "k")
    ms = wl.compute(f"{name}_ms", (rows,), lambda i: reduce_sum(x[i, k] * x[i, k], k) / cols)
    return wl.compute(name, (rows, cols), lambda i, j: x[i, j] * rsqrt(ms[i] + eps) * gamma[j])


def multi_head_attention(wl: Workload, name: str, q: Tensor, k: Tensor, v: Tensor, heads: int,
                         causal: bool = False) -> Tensor:
    """Attention over (seq, heads * head_dim) activations; head h owns columns h*hd .. h*hd+hd-1.

    scores[h, i, j] = sum(q[i, h*hd + d] * k[j, h*hd + d], d) / sqrt(hd), softmax over j
    (masked to j <= i when causal), out[i, c] = sum(p[c // hd, i, j] * v[j, c], j).
    """
    seq, width = q.shape
    _need(k.shape == q.shape == v.shape, f"{name}: q, k, v must share one shape, got {q.shape}, {k.shape}, {v.shape}")
    _need(width % heads == 0, f"{name}: width {width} is not divisible by {heads} heads")
    hd = width // heads
    d = reduce_axis(hd, "d")
    scale = 1.0 / math.sqrt(hd)
    scores = wl.compute(
        f"{name}_scores", (heads, seq, seq),
        lambda h, i, j: reduce_sum(q[i, h * hd + d] * k[j, h * hd + d], d) * scale,
    )
    if causal:
        scores = wl.compute(
            f"{name}_masked", (heads, seq, seq), lambda h, i, j: where(j <= i, scores[h, i, j], float("-inf"))
        )
    r = reduce_axis(seq, "r")
    mx = wl.compute(f"{name}_max", (heads, seq), lambda h, i: reduce_max(scores[h, i, r], r))
    e = wl.compute(f"{name}_exp", (heads, seq, seq), lambda h, i, j: exp(scores[h, i, j] - mx[h, i]))
    s = wl.compute(f"{name}_sum", (heads, seq), lambda h, i: reduce_sum(e[h, i, r], r))
    p = wl.compute(f"{name}_probs", (heads, seq, seq), lambda h, i, j: e[h, i, j] / s[h, i])
    return wl.compute(name, (seq, width), lambda i, c: reduce_sum(p[c // hd, i, r] * v[r, c], r))

