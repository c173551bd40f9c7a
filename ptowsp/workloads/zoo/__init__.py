"""Standard workloads, each a function of its sizes returning a ready `Workload`.

Every workload here is checked against an independent numpy formula in
tests/workloads/test_zoo.py.  Layer builders that add the same formulas to a
workload of your own live in `ptowsp.workloads.zoo.layers`.
"""

from __future__ import annotations

import math

from ptowsp.errors import ShapeError
from ptowsp.te import exp, reduce_axis, reduce_max, reduce_sum, sigmoid, tanh, where
from ptowsp.workloads.workload import Workload
from ptowsp.workloads.zoo import layers
from ptowsp.workloads.zoo.camera import camera_pipe
from ptowsp.workloads.zoo.decoder import QWEN3_0_6B, DecoderConfig, decoder
from ptowsp.workloads.zoo.dynamic import decode_step, moe, varlen_attention
from ptowsp.workloads.zoo.histograms import bilateral_grid
from ptowsp.workloads.zoo.images import blur, quantized_conv2d, unsharp
from ptowsp.workloads.zoo.recurrences import cumsum, iir_blur, lstm

__all__ = [
    "attention", "batch_matmul", "bilateral_grid", "blur", "camera_pipe", "conv2d", "cumsum", "decode_step", "decoder",
    "DecoderConfig", "QWEN3_0_6B",
    "elementwise_chain", "iir_blur", "layernorm", "lstm", "matmul", "mlp", "moe", "quantized_conv2d", "rmsnorm",
    "softmax", "transformer_block", "unsharp", "varlen_attention", "ZOO",
]


def matmul(m: int = 256, n: int = 256, k: int = 256, dtype: str = "float32",
           accumulate: str | None = None) -> Workload:
    """C[i, j] = sum(A[i, k] * B[k, j], k), A: (m, k), B: (k, n); with `accumulate`, the products of
    A and B cast to that dtype (float16 inputs, float32 results)."""
    wl = Workload("matmul")
    a, b = wl.input("A", (m, k), dtype), wl.input("B", (k, n), dtype)
    wl.output(layers.matmul(wl, "C", a, b, accumulate))
    return wl


def batch_matmul(batch: int = 8, m: int = 128, n: int = 128, k: int = 128, dtype: str = "float32") -> Workload:
    """C[b, i, j] = sum(A[b, i, k] * B[b, k, j], k)."""
    wl = Workload("batch_matmul")
    a, b = wl.input("A", (batch, m, k), dtype), wl.input("B", (batch, k, n), dtype)
    r = reduce_axis(k, "k")
    wl.output(wl.compute("C", (batch, m, n), lambda bb, i, j: reduce_sum(a[bb, i, r] * b[bb, r, j], r)))
    return wl


def softmax(rows: int = 256, cols: int = 256) -> Workload:
    """Y[i, j] = exp(X[i, j] - max_k X[i, k]) / sum_k exp(X[i, k] - max_k X[i, k])."""
    wl = Workload("softmax")
    wl.output(layers.softmax_rows(wl, "Y", wl.input("X", (rows, cols))))
    return wl


def layernorm(rows: int = 256, cols: int = 256, eps: float = 1e-5) -> Workload:
    """Y[i, j] = (X[i, j] - mean_i) / sqrt(var_i + eps) * gamma[j] + beta[j] (biased variance)."""
    wl = Workload("layernorm")
    x, g, b = wl.input("X", (rows, cols)), wl.input("gamma", (cols,)), wl.input("beta", (cols,))
    wl.output(layers.layernorm_rows(wl, "Y", x, g, b, eps))
    return wl


def rmsnorm(rows: int = 256, cols: int = 256, eps: float = 1e-6) -> Workload:
    """Y[i, j] = X[i, j] / sqrt(mean_k X[i, k]^2 + eps) * gamma[j]."""
    wl = Workload("rmsnorm")
    x, g = wl.input("X", (rows, cols)), wl.input("gamma", (cols,))
    wl.output(layers.rmsnorm_rows(wl, "Y", x, g, eps))
    return wl


def attention(batch: int = 2, heads: int = 4, seq: int = 64, head_dim: int = 32, causal: bool = False) -> Workload:
    """O = softmax(Q K^T / sqrt(head_dim) [+ causal mask]) V per batch and head.

    Q, K, V, O: (batch, heads, seq, head_dim).  S[b, h, i, j] = sum(Q[b, h, i, d] *
    K[b, h, j, d], d) / sqrt(head_dim); with causal=True, j > i is masked to -inf.
    """
    wl = Workload("attention")
    shape = (batch, heads, seq, head_dim)
    q, k, v = (wl.input(n, shape) for n in ("Q", "K", "V"))
    d, r = reduce_axis(head_dim, "d"), reduce_axis(seq, "r")
    scale = 1.0 / math.sqrt(head_dim)
    full = (batch, heads, seq, seq)
    s = wl.compute("S", full, lambda b, h, i, j: reduce_sum(q[b, h, i, d] * k[b, h, j, d], d) * scale)
    if causal:
        s = wl.compute("S_masked", full, lambda b, h, i, j: where(j <= i, s[b, h, i, j], float("-inf")))
    m = wl.compute("M", full[:3], lambda b, h, i: reduce_max(s[b, h, i, r], r))
    e = wl.compute("E", full, lambda b, h, i, j: exp(s[b, h, i, j] - m[b, h, i]))
    z = wl.compute("Z", full[:3], lambda b, h, i: reduce_sum(e[b, h, i, r], r))
    p = wl.compute("P", full, lambda b, h, i, j: e[b, h, i, j] / z[b, h, i])
    wl.output(wl.compute("O", shape, lambda b, h, i, j: reduce_sum(p[b, h, i, r] * v[b, h, r, j], r)))
    return wl


def mlp(batch: int = 128, d_in: int = 256, d_hidden: int = 512, d_out: int = 256) -> Workload:
    """Y = gelu(X W1 + b1) W2 + b2 with exact GELU 0.5 x (1 + erf(x / sqrt 2))."""
    wl = Workload("mlp")
    x = wl.input("X", (batch, d_in))
    w1, b1 = wl.input("W1", (d_in, d_hidden)), wl.input("b1", (d_hidden,))
    w2, b2 = wl.input("W2", (d_hidden, d_out)), wl.input("b2", (d_out,))
    h = layers.bias_add(wl, "H_bias", layers.matmul(wl, "H", x, w1), b1)
    g = layers.gelu(wl, "G", h)
    wl.output(layers.bias_add(wl, "Y", layers.matmul(wl, "Y_mm", g, w2), b2))
    return wl


def conv2d(batch: int = 1, in_channels: int = 16, height: int = 32, width: int = 32, out_channels: int = 32,
           kernel: int = 3, stride: int = 1, padding: int = 1) -> Workload:
    """Y[n, o, y, x] = sum(Xpad[n, c, y*stride + r, x*stride + s] * W[o, c, r, s], (c, r, s)), NCHW.

    Xpad is X with `padding` zeros on each side of H and W, read through a
    pw.where guard rather than materialised.
    """
    if min(batch, in_channels, height, width, out_channels, kernel, stride) < 1 or padding < 0:
        raise ShapeError("conv2d sizes must be positive and padding non-negative")
    out_h = (height + 2 * padding - kernel) // stride + 1
    out_w = (width + 2 * padding - kernel) // stride + 1
    if out_h < 1 or out_w < 1:
        raise ShapeError(f"conv2d: kernel {kernel} does not fit a {height}x{width} input with padding {padding}")
    wl = Workload("conv2d")
    x = wl.input("X", (batch, in_channels, height, width))
    w = wl.input("W", (out_channels, in_channels, kernel, kernel))
    c, r, s = reduce_axis(in_channels, "c"), reduce_axis(kernel, "r"), reduce_axis(kernel, "s")

    def window(out, tap):  # input coordinate read by output position `out` at kernel tap `tap`
        pos = (out * stride if stride > 1 else out) + tap
        return pos - padding if padding else pos

    def conv(n, o, y, xx):
        iy, ix = window(y, r), window(xx, s)
        inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
        return reduce_sum(where(inside, x[n, c, iy, ix], 0.0) * w[o, c, r, s], (c, r, s))

    wl.output(wl.compute("Y", (batch, out_channels, out_h, out_w), conv))
    return wl


def elementwise_chain(shape: tuple[int, ...] = (256, 256), length: int = 4) -> Workload:
    """T0 = X; T(n+1) = f_n(T(n)) cycling f over x*1.5+0.25, tanh(x), x*sigmoid(x), exp(-x*x); Y = last."""
    if length < 1:
        raise ShapeError(f"elementwise_chain needs length >= 1, got {length}")
    if len(shape) != 2:
        raise ShapeError(f"elementwise_chain takes a 2-d shape, got {shape}")
    steps = [lambda v: v * 1.5 + 0.25, tanh, lambda v: v * sigmoid(v), lambda v: exp(-(v * v))]
    wl = Workload("elementwise_chain")
    t = wl.input("X", shape)
    for n in range(length):
        f, src = steps[n % len(steps)], t
        t = wl.compute("Y" if n == length - 1 else f"T{n + 1}", shape, lambda i, j, f=f, src=src: f(src[i, j]))
    wl.output(t)
    return wl


def transformer_block(seq: int = 64, d_model: int = 128, heads: int = 4, d_ff: int = 256,
                      causal: bool = True, eps: float = 1e-5) -> Workload:
    """Pre-norm decoder block: h = x + Wo·attn(ln1(x)); y = h + mlp(ln2(h)) with GELU.

    attn is multi-head scaled dot-product attention over q = ln1(x) Wq,
    k = ln1(x) Wk, v = ln1(x) Wv; mlp(z) = gelu(z W1 + b1) W2 + b2.
    """
    wl = Workload("transformer_block")
    x = wl.input("x", (seq, d_model))
    g1, be1 = wl.input("ln1_gamma", (d_model,)), wl.input("ln1_beta", (d_model,))
    wq, wk, wv, wo = (wl.input(n, (d_model, d_model)) for n in ("Wq", "Wk", "Wv", "Wo"))
    g2, be2 = wl.input("ln2_gamma", (d_model,)), wl.input("ln2_beta", (d_model,))
    w1, b1 = wl.input("W1", (d_model, d_ff)), wl.input("b1", (d_ff,))
    w2, b2 = wl.input("W2", (d_ff, d_model)), wl.input("b2", (d_model,))

    ln1 = layers.layernorm_rows(wl, "ln1", x, g1, be1, eps)
    q, k, v = (layers.matmul(wl, n, ln1, w) for n, w in (("query", wq), ("key", wk), ("value", wv)))
    ctx = layers.multi_head_attention(wl, "attn", q, k, v, heads, causal)
    h = layers.residual_add(wl, "h", x, layers.matmul(wl, "attn_out", ctx, wo))
    ln2 = layers.layernorm_rows(wl, "ln2", h, g2, be2, eps)
    f = layers.gelu(wl, "ff_gelu", layers.bias_add(wl, "ff1", layers.matmul(wl, "ff1_mm", ln2, w1), b1))
    f2 = layers.bias_add(wl, "ff2", layers.matmul(wl, "ff2_mm", f, w2), b2)
    wl.output(layers.residual_add(wl, "y", h, f2))
    return wl


ZOO = {
    fn.__name__: fn
    for fn in (matmul, batch_matmul, softmax, layernorm, rmsnorm, attention, mlp, conv2d,
               elementwise_chain, transformer_block, varlen_attention, moe, decode_step, bilateral_grid, blur,
               quantized_conv2d, camera_pipe, cumsum, iir_blur, lstm, unsharp)
}
