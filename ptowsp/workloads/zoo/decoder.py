"""A Qwen3-style decoder as one dynamic task graph: prefill and decode over a paged KV cache.

Each layer: RMSNorm, grouped-query attention (per-head RMSNorm of q and k, rotary embeddings from
cos/sin tables), a SwiGLU MLP or a mixture of experts (top-k routing, DeepSeek/Qwen3-MoE style),
residual adds.  Sizes are names bound at run time, so one build serves every batch, context
length and routing:

- **decode** (`phase="decode"`): one new token per sequence, `batch` of them, each with its own
  context length `pos[b]` (a ragged batch).  The KV cache is paged: blocks of `block_size` tokens
  in a pool per layer (`l{n}_K_cache`, `l{n}_V_cache`: (num_blocks, block_size, kv_heads,
  head_dim)), and `block_table[b, i]` (int32) names the pool block that holds tokens
  i * block_size .. of sequence b.  Attention reads keys and values through the table for the
  positions before `pos[b]` and the new token's own for position `pos[b]`;
- **prefill** (`phase="prefill"`): the `seq` tokens of one prompt from position 0, causal (its
  `cos`/`sin` are the prompt's `seq` rows of the tables).

Both return the new tokens' keys and values (`l{n}_K_new`, `l{n}_V_new`: after k's norm and
rotation) beside the hidden states `Y`: ptowsp never writes into an input, so the caller's cache
takes them (`write_new_tokens`), as a serving engine's cache manager does.  The MoE's experts
each run over their own tokens only (a domain over the router's counts: the task count follows
the routing).  docs/llm.md walks through it; tests/workloads/test_decoder.py checks it against
a numpy decoder written independently.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ptowsp.errors import ShapeError, WorkloadError
from ptowsp.te import Expr, Tensor, exp, maximum, reduce_axis, reduce_max, reduce_sum, rsqrt, sigmoid, where
from ptowsp.workloads.workload import Workload
from ptowsp.workloads.zoo import layers
from ptowsp.workloads.zoo.dynamic import route_top_k


@dataclass(frozen=True)
class DecoderConfig:
    """A decoder's shape: Qwen3-0.6B's by default (`QWEN3_0_6B` adds its 28 layers)."""

    layers: int = 2
    hidden: int = 1024
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 3072  # a dense layer's SwiGLU width, or each expert's
    experts: int = 0  # 0: dense MLP; else a mixture of this many experts
    top_k: int = 2
    block_size: int = 16  # tokens per KV cache block
    eps: float = 1e-6
    rope_theta: float = 1e6

    def __post_init__(self):
        if self.heads % self.kv_heads:
            raise ShapeError(f"decoder: {self.heads} query heads do not share {self.kv_heads} KV heads evenly")
        if self.head_dim % 2:
            raise ShapeError(f"decoder: rotary embeddings need an even head_dim, got {self.head_dim}")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise ShapeError(f"decoder: top_k must be between 1 and the {self.experts} experts, got {self.top_k}")


QWEN3_0_6B = DecoderConfig(layers=28)


def rotary_tables(positions: int, config: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (positions, head_dim): the rotary angles of every position (the `cos`/`sin` inputs)."""
    half = config.head_dim // 2
    inv = config.rope_theta ** (-np.arange(half, dtype=np.float64) * 2 / config.head_dim)
    angles = np.arange(positions, dtype=np.float64)[:, None] * np.concatenate([inv, inv])[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def decoder(config: DecoderConfig = DecoderConfig(), phase: str = "decode",
            weights: Mapping[str, np.ndarray] | None = None) -> Workload:
    """The decoder's `phase` ("decode" or "prefill") as a workload (see the module docstring).

    `weights`: {name: array} of every parameter (`l0_Wq`, `l0_ln1_w`, ...), made constants of the
    workload, as a model's initializers are: the build then stores each projection's weights in the
    layout its kernel reads (panels of its register tile's columns, packed once), and a run passes
    only the data.  Without, the parameters are inputs of every run (one build for any weights)."""
    if phase not in ("decode", "prefill"):
        raise ShapeError(f"decoder: phase must be 'decode' or 'prefill', got {phase!r}")
    c = config
    wl = Workload(f"decoder_{phase}")
    param = _Parameters(wl, weights)
    rows = "batch" if phase == "decode" else "seq"
    x = wl.input("X", (rows, c.hidden))
    positions = "max_pos" if phase == "decode" else x.shape[0]  # a prompt's rotary rows: its positions
    cos, sin = wl.input("cos", (positions, c.head_dim)), wl.input("sin", (positions, c.head_dim))
    if phase == "decode":
        pos = wl.input("pos", (x.shape[0],), "int32")
        table = wl.input("block_table", (x.shape[0], "max_blocks"), "int32")

        def position(b) -> Expr:
            return pos[b]
    else:
        pos = table = None

        def position(i) -> Expr:
            return i

    for n in range(c.layers):
        p = f"l{n}_"
        h = layers.rmsnorm_rows(wl, f"{p}ln1", x, param(f"{p}ln1_w", (c.hidden,)), c.eps)
        q = layers.matmul(wl, f"{p}q", h, param(f"{p}Wq", (c.hidden, c.heads * c.head_dim)))
        k = layers.matmul(wl, f"{p}k", h, param(f"{p}Wk", (c.hidden, c.kv_heads * c.head_dim)))
        v = layers.matmul(wl, f"{p}v", h, param(f"{p}Wv", (c.hidden, c.kv_heads * c.head_dim)))
        q = _norm_rotate(wl, f"{p}q", q, c.heads, param(f"{p}q_norm", (c.head_dim,)), cos, sin, position, c)
        k = _norm_rotate(wl, f"{p}k", k, c.kv_heads, param(f"{p}k_norm", (c.head_dim,)), cos, sin, position, c)
        wl.output(wl.compute(f"{p}K_new", k.shape, lambda t, g, d: k[t, g, d]))
        wl.output(wl.compute(f"{p}V_new", k.shape, lambda t, g, d: v[t, g * c.head_dim + d]))
        if phase == "decode":
            kc, vc = (wl.input(f"{p}{w}_cache", ("num_blocks", c.block_size, c.kv_heads, c.head_dim))
                      for w in ("K", "V"))
            o = _paged_attention(wl, p, q, k, v, kc, vc, pos, table, c)
        else:
            o = _causal_attention(wl, p, q, k, v, c)
        attended = layers.matmul(wl, f"{p}o_proj", o, param(f"{p}Wo", (c.heads * c.head_dim, c.hidden)))
        x = layers.residual_add(wl, f"{p}attn_res", x, attended)
        h = layers.rmsnorm_rows(wl, f"{p}ln2", x, param(f"{p}ln2_w", (c.hidden,)), c.eps)
        mixed = _experts(wl, param, p, h, c) if c.experts else _swiglu(wl, param, p, h, c)
        x = layers.residual_add(wl, f"{p}mlp_res" if n < c.layers - 1 else "Y", x, mixed)
    wl.output(x)
    param.check_all_used()
    return wl


class _Parameters:
    """Declares the decoder's parameters: constants of the workload when `weights` has them (each
    checked against its shape), inputs otherwise."""

    def __init__(self, wl: Workload, weights: Mapping[str, np.ndarray] | None):
        self.wl, self.weights, self.declared = wl, weights, set()

    def __call__(self, name: str, shape: tuple[int, ...]) -> Tensor:
        self.declared.add(name)
        if self.weights is None:
            return self.wl.input(name, shape)
        if name not in self.weights:
            raise WorkloadError(f"decoder: weights has no {name!r} (shape {shape}); it needs every parameter")
        array = np.asarray(self.weights[name])
        if array.shape != shape:
            raise ShapeError(f"decoder: weights[{name!r}] has shape {array.shape}, expected {shape}")
        return self.wl.constant(name, array, "float32")

    def check_all_used(self) -> None:
        unknown = sorted(set(self.weights or ()) - self.declared)
        if unknown:
            raise WorkloadError(f"decoder: weights names {', '.join(map(repr, unknown[:5]))}, which are not "
                                "parameters of this decoder (data such as X or the caches are run inputs)")


def _norm_rotate(wl: Workload, name: str, x: Tensor, heads: int, gamma: Tensor, cos: Tensor, sin: Tensor,
                 position: Callable[[Expr], Expr], c: DecoderConfig) -> Tensor:
    """Qwen3's per-head RMSNorm of q or k (x: (rows, heads * head_dim), head h in columns h * head_dim ..),
    then the rotary embedding at each row's position, as (rows, heads, head_dim):
    x * cos + rotate_half(x) * sin, rotate_half(x)[d] = -x[d + half] (d < half), x[d - half] (else)."""
    half, hd, d = c.head_dim // 2, c.head_dim, reduce_axis(c.head_dim, "d")
    ms = wl.compute(f"{name}_ms", (x.shape[0], heads),
                    lambda t, h: reduce_sum(x[t, h * hd + d] * x[t, h * hd + d], d) / hd)

    def normed(t, h, i):
        return x[t, h * hd + i] * rsqrt(ms[t, h] + c.eps) * gamma[i]

    def rotated_half(t, h, i):
        partner = normed(t, h, (i + half) % c.head_dim)
        return where(i < half, -partner, partner)

    return wl.compute(f"{name}_rot", (x.shape[0], heads, hd), lambda t, h, i: (
        normed(t, h, i) * cos[position(t), i] + rotated_half(t, h, i) * sin[position(t), i]))


def _paged_attention(wl: Workload, p: str, q: Tensor, k: Tensor, v: Tensor, kc: Tensor, vc: Tensor, pos: Tensor,
                     table: Tensor, c: DecoderConfig) -> Tensor:
    """o[b, h * head_dim + i]: the new token of sequence b attends to positions 0 .. pos[b]: those
    before pos[b] read from the pool through the block table (scores over them a domain, so no
    tile past a sequence's context is computed), pos[b] itself the new token's key and value.
    Heads lead each task's loops: a decode batch may be a single sequence, and the task grid then
    still has the heads to share out."""
    batch, group, bs, hd = q.shape[0], c.heads // c.kv_heads, c.block_size, c.head_dim
    context, scale = table.shape[1] * bs, 1.0 / math.sqrt(hd)
    d, t = reduce_axis(hd, "d"), reduce_axis(context, "t")

    def cached(b, t) -> Expr:
        return t < pos[b]

    s = wl.compute(f"{p}scores", (c.heads, batch, context), lambda h, b, j: reduce_sum(
        q[b, h, d] * kc[table[b, j // bs], j % bs, h // group, d], d) * scale, domain=lambda h, b, j: cached(b, j))
    s_new = wl.compute(f"{p}score_new", (c.heads, batch),
                       lambda h, b: reduce_sum(q[b, h, d] * k[b, h // group, d], d) * scale)
    m = wl.compute(f"{p}att_max", (c.heads, batch), lambda h, b: maximum(
        reduce_max(where(cached(b, t), s[h, b, t], float("-inf")), t), s_new[h, b]))
    e = wl.compute(f"{p}att_exp", s.shape, lambda h, b, j: where(cached(b, j), exp(s[h, b, j] - m[h, b]), 0.0))
    e_new = wl.compute(f"{p}att_exp_new", m.shape, lambda h, b: exp(s_new[h, b] - m[h, b]))
    z = wl.compute(f"{p}att_sum", m.shape, lambda h, b: reduce_sum(e[h, b, t], t) + e_new[h, b])
    o = wl.compute(f"{p}attn_heads", (c.heads, batch, hd), lambda h, b, i: (reduce_sum(
        where(cached(b, t), e[h, b, t] * vc[table[b, t // bs], t % bs, h // group, i], 0.0), t)
        + e_new[h, b] * v[b, h // group * hd + i]) / z[h, b])
    return wl.compute(f"{p}attn", (batch, c.heads * hd), lambda b, x: o[x // hd, b, x % hd])


def _causal_attention(wl: Workload, p: str, q: Tensor, k: Tensor, v: Tensor, c: DecoderConfig) -> Tensor:
    """o[i, h * head_dim + x]: prompt token i attends to tokens 0 .. i of the prompt (scores as (head, i, j))."""
    seq, group, hd = q.shape[0], c.heads // c.kv_heads, c.head_dim
    d, t, j = reduce_axis(hd, "d"), reduce_axis(seq, "t"), reduce_axis(seq, "j")

    def seen(h, i, j) -> Expr:
        return j <= i

    s = wl.compute(f"{p}scores", (c.heads, seq, seq), lambda h, i, j: reduce_sum(
        q[i, h, d] * k[j, h // group, d], d) * (1.0 / math.sqrt(hd)), domain=seen)
    m = wl.compute(f"{p}att_max", s.shape[:2],
                   lambda h, i: reduce_max(where(seen(h, i, t), s[h, i, t], float("-inf")), t))
    e = wl.compute(f"{p}att_exp", s.shape, lambda h, i, j: where(seen(h, i, j), exp(s[h, i, j] - m[h, i]), 0.0))
    z = wl.compute(f"{p}att_sum", s.shape[:2], lambda h, i: reduce_sum(e[h, i, t], t))
    return wl.compute(f"{p}attn", (seq, c.heads * hd), lambda i, x: reduce_sum(
        where(seen(x // hd, i, j), e[x // hd, i, j] * v[j, x // hd // group * hd + x % hd], 0.0), j) / z[x // hd, i])


def _swiglu(wl: Workload, param: _Parameters, p: str, h: Tensor, c: DecoderConfig) -> Tensor:
    """down(silu(h . W_gate) * (h . W_up))."""
    gate = layers.matmul(wl, f"{p}gate", h, param(f"{p}W_gate", (c.hidden, c.mlp)))
    up = layers.matmul(wl, f"{p}up", h, param(f"{p}W_up", (c.hidden, c.mlp)))
    act = wl.compute(f"{p}act", gate.shape, lambda t, f: gate[t, f] * sigmoid(gate[t, f]) * up[t, f])
    return layers.matmul(wl, f"{p}down", act, param(f"{p}W_down", (c.mlp, c.hidden)))


def _experts(wl: Workload, param: _Parameters, p: str, h: Tensor, c: DecoderConfig) -> Tensor:
    """A mixture of SwiGLU experts: the router (host code, `route_top_k`) groups the tokens by expert,
    each expert runs over its own tokens only (slot s < counts[e]), and each token sums its top_k
    experts' outputs weighted by its gates (softmax over its top_k logits)."""
    tokens, experts = h.shape[0], c.experts
    logits = layers.matmul(wl, f"{p}router_logits", h, param(f"{p}W_router", (c.hidden, experts)))
    counts, slots, choice_expert, choice_slot, gate = wl.opaque(
        f"{p}router", functools.partial(route_top_k, top_k=c.top_k), [logits],
        [(f"{p}counts", (experts,), "int32"), (f"{p}slots", (experts, tokens), "int32"),
         (f"{p}choice_expert", (tokens, c.top_k), "int32"), (f"{p}choice_slot", (tokens, c.top_k), "int32"),
         (f"{p}gate", (tokens, c.top_k), "float32")])
    w_gate, w_up = (param(f"{p}{w}", (experts, c.hidden, c.mlp)) for w in ("W_gate", "W_up"))
    w_down = param(f"{p}W_down", (experts, c.mlp, c.hidden))
    r, f, kk = reduce_axis(c.hidden, "c"), reduce_axis(c.mlp, "f"), reduce_axis(c.top_k, "kk")

    def routed(e, s, j):
        return s < counts[e]

    group = (experts, tokens, c.mlp)
    g = wl.compute(f"{p}expert_gate", group, lambda e, s, j: reduce_sum(h[slots[e, s], r] * w_gate[e, r, j], r),
                   domain=routed)
    u = wl.compute(f"{p}expert_up", group, lambda e, s, j: reduce_sum(h[slots[e, s], r] * w_up[e, r, j], r),
                   domain=routed)
    a = wl.compute(f"{p}expert_act", group, lambda e, s, j: g[e, s, j] * sigmoid(g[e, s, j]) * u[e, s, j],
                   domain=routed)
    y = wl.compute(f"{p}expert_down", (experts, tokens, c.hidden),
                   lambda e, s, j: reduce_sum(a[e, s, f] * w_down[e, f, j], f), domain=routed)
    return wl.compute(f"{p}moe", (tokens, c.hidden), lambda t, j: reduce_sum(
        gate[t, kk] * y[choice_expert[t, kk], choice_slot[t, kk], j], kk))


def write_new_tokens(caches: dict[str, np.ndarray], outputs: dict[str, np.ndarray], block_table: np.ndarray,
                     pos: np.ndarray, config: DecoderConfig) -> None:
    """Write each sequence's new key and value (a decode step's `l{n}_K_new`/`V_new`) into its cache
    block, in place: `caches` maps `l{n}_K_cache`/`l{n}_V_cache` to the caller's pools."""
    bs = config.block_size
    rows = np.arange(len(pos))
    blocks, offsets = block_table[rows, pos // bs], pos % bs
    for n in range(config.layers):
        for w in ("K", "V"):
            caches[f"l{n}_{w}_cache"][blocks, offsets] = outputs[f"l{n}_{w}_new"]
