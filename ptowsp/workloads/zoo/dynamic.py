"""Dynamic workloads of LLM inference: work that changes with the data.

Each takes its batch-like sizes as names (bound at run time, one compile for
every shape) or as integers, and `padded=True` gives the baseline that
padding implementations run: the same formulas with every domain turned
into a mask inside the body, so every row and every expert slot is
computed and then zeroed.  docs/dynamic.md walks through all three.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import numpy as np

from ptowsp.errors import ShapeError
from ptowsp.te import exp, reduce_axis, reduce_max, reduce_sum, where
from ptowsp.te.sizes import Extent
from ptowsp.workloads.workload import Workload
from ptowsp.workloads.zoo import layers

__all__ = ["decode_step", "moe", "route_top_k", "varlen_attention"]


def _compute(wl: Workload, padded: bool) -> Callable[..., object]:
    """wl.compute with a domain, or (padded) with the domain as a mask: where(domain, body, 0)."""

    def compute(name: str, shape: tuple[Extent, ...], fn: Callable[..., object], domain: Callable[..., object]):
        if not padded:
            return wl.compute(name, shape, fn, domain=domain)

        def masked(*loops):
            return where(domain(*loops), fn(*loops), 0.0)

        masked.__signature__ = inspect.signature(fn)  # the loop names come from fn's parameters
        return wl.compute(name, shape, masked)

    return compute


def varlen_attention(batch: Extent = "batch", heads: int = 4, max_len: Extent = "max_len", head_dim: int = 32,
                     causal: bool = True, padded: bool = False) -> Workload:
    """O[b, h, i, :] = sum_j softmax_j(S[b, h, i, :])[j] V[b, h, j, :] for i < lens[b], else 0.

    Q, K, V, O: (batch, heads, max_len, head_dim), sequences padded to
    max_len; lens: (batch,) int32.  S[b, h, i, j] = Q[b, h, i, :] . K[b, h, j, :]
    / sqrt(head_dim) over the keys j < lens[b] (and j <= i when causal).
    Tasks S, M (row max), E (exponentials), Z (row sum), O, each with a
    domain, so tiles of padding are never generated.
    """
    wl = Workload("varlen_attention")
    shape = (batch, heads, max_len, head_dim)
    q, k, v = (wl.input(n, shape) for n in ("Q", "K", "V"))
    lens = wl.input("lens", (shape[0],), "int32")
    batch, max_len = q.shape[0], q.shape[2]
    d, r = reduce_axis(head_dim, "d"), reduce_axis(max_len, "r")
    scale = 1.0 / math.sqrt(head_dim)
    compute = _compute(wl, padded)

    def key(b, i, j):  # key j is seen by query row i of sequence b
        return (j <= i) if causal else (j < lens[b])

    def row(b, h, i):
        return i < lens[b]

    def pair(b, h, i, j):
        return (i < lens[b]) & key(b, i, j)

    full, rows = (batch, heads, max_len, max_len), (batch, heads, max_len)
    s = compute("S", full, lambda b, h, i, j: reduce_sum(q[b, h, i, d] * k[b, h, j, d], d) * scale, pair)
    m = compute("M", rows, lambda b, h, i: reduce_max(where(key(b, i, r), s[b, h, i, r], float("-inf")), r), row)
    e = compute("E", full, lambda b, h, i, j: exp(s[b, h, i, j] - m[b, h, i]), pair)
    z = compute("Z", rows, lambda b, h, i: reduce_sum(e[b, h, i, r], r), row)
    o = compute("O", shape, lambda b, h, i, x: reduce_sum(e[b, h, i, r] * v[b, h, r, x], r) / z[b, h, i],
                lambda b, h, i, x: row(b, h, i))
    wl.output(o)
    return wl


def decode_step(batch: Extent = "batch", heads: int = 4, max_ctx: Extent = "max_ctx", head_dim: int = 32,
                padded: bool = False) -> Workload:
    """O[b, h, :] = sum_t softmax_t(q[b, h, :] . K[b, h, t, :] / sqrt(head_dim))[t] V[b, h, t, :], t < lens[b].

    One new token per sequence attends to its KV cache: q, O: (batch, heads,
    head_dim); K, V: (batch, heads, max_ctx, head_dim) with lens[b] (int32)
    entries filled; a sequence with lens[b] = 0 gets O = 0.  Caches grow
    every step, so max_ctx is a size and one compile serves them all.
    """
    wl = Workload("decode_step")
    q = wl.input("q", (batch, heads, head_dim))
    k, v = (wl.input(n, (batch, heads, max_ctx, head_dim)) for n in ("K", "V"))
    lens = wl.input("lens", (q.shape[0],), "int32")
    batch, max_ctx = q.shape[0], k.shape[2]
    d, t = reduce_axis(head_dim, "d"), reduce_axis(max_ctx, "t")
    scale = 1.0 / math.sqrt(head_dim)
    compute = _compute(wl, padded)

    def filled(b, h, j):
        return j < lens[b]

    def any_filled(b, h, x=None):
        return lens[b] > 0

    heads_of = (batch, heads)
    s = compute("S", (batch, heads, max_ctx), lambda b, h, j: reduce_sum(q[b, h, d] * k[b, h, j, d], d) * scale,
                filled)
    m = compute("M", heads_of, lambda b, h: reduce_max(where(t < lens[b], s[b, h, t], float("-inf")), t),
                any_filled)
    e = compute("E", (batch, heads, max_ctx), lambda b, h, j: exp(s[b, h, j] - m[b, h]), filled)
    z = compute("Z", heads_of, lambda b, h: reduce_sum(e[b, h, t], t), any_filled)
    o = compute("O", (batch, heads, head_dim), lambda b, h, x: reduce_sum(e[b, h, t] * v[b, h, t, x], t) / z[b, h],
                any_filled)
    wl.output(o)
    return wl


def route_top_k(logits: np.ndarray, top_k: int) -> tuple[np.ndarray, ...]:
    """The moe router (host code): each token's top_k experts by logit (ties to the lower expert),
    gates softmax over those logits, and the per-expert token groups.

    Returns counts (experts,), slots (experts, tokens): the tokens of each
    expert in token order, then padding 0; choice_expert and choice_slot
    (tokens, top_k): where each choice of a token sits; gate (tokens, top_k).
    """
    tokens, experts = logits.shape
    choice = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    top = np.take_along_axis(logits, choice, axis=1).astype(np.float64)
    gate = np.exp(top - top.max(axis=1, keepdims=True)) if tokens else top
    gate = gate / gate.sum(axis=1, keepdims=True) if tokens else gate
    counts = np.zeros(experts, np.int32)
    slots = np.zeros((experts, tokens), np.int32)
    choice_slot = np.zeros((tokens, top_k), np.int32)
    for e in range(experts):
        token, which = np.nonzero(choice == e)  # row-major: in token order
        counts[e] = len(token)
        slots[e, :len(token)] = token
        choice_slot[token, which] = np.arange(len(token))
    return counts, slots, choice.astype(np.int32), choice_slot, gate.astype(np.float32)


def moe(tokens: Extent = "tokens", d_model: int = 64, d_ff: int = 128, experts: int = 8, top_k: int = 2,
        padded: bool = False) -> Workload:
    """Y[t, :] = sum_k gate[t, k] * mlp_e(X[t, :]), e = the k-th expert of token t; mlp_e(x) = gelu(x W1[e]) W2[e].

    X, Y: (tokens, d_model); W_router: (d_model, experts); W1: (experts,
    d_model, d_ff); W2: (experts, d_ff, d_model).  An opaque router
    (`route_top_k`) groups the tokens by expert; each expert's MLP runs over
    its own tokens only (slot c < counts[e], gathered through slots[e, c]),
    and Y gathers each token's top_k results back.
    """
    if not 1 <= top_k <= experts:
        raise ShapeError(f"moe: top_k must be between 1 and the {experts} experts, got {top_k}")
    wl = Workload("moe")
    x = wl.input("X", (tokens, d_model))
    w_router = wl.input("W_router", (d_model, experts))
    w1 = wl.input("W1", (experts, d_model, d_ff))
    w2 = wl.input("W2", (experts, d_ff, d_model))
    tokens = x.shape[0]
    logits = layers.matmul(wl, "logits", x, w_router)
    counts, slots, choice_expert, choice_slot, gate = wl.opaque(
        "router", functools.partial(route_top_k, top_k=top_k), [logits],  # picklable: tuning sends it
        [("counts", (experts,), "int32"), ("slots", (experts, tokens), "int32"),
         ("choice_expert", (tokens, top_k), "int32"), ("choice_slot", (tokens, top_k), "int32"),
         ("gate", (tokens, top_k), "float32")])
    compute = _compute(wl, padded)

    def routed(e, c, f):
        return c < counts[e]

    dm, f, kk = reduce_axis(d_model, "dm"), reduce_axis(d_ff, "f"), reduce_axis(top_k, "kk")
    group = (experts, tokens)
    h = compute("H", (*group, d_ff), lambda e, c, j: reduce_sum(x[slots[e, c], dm] * w1[e, dm, j], dm), routed)
    g = compute("G", (*group, d_ff), lambda e, c, j: layers.gelu_of(h[e, c, j]), routed)
    y = compute("Y_expert", (*group, d_model), lambda e, c, j: reduce_sum(g[e, c, f] * w2[e, f, j], f), routed)
    wl.output(wl.compute("Y", (tokens, d_model), lambda t, j: reduce_sum(
        gate[t, kk] * y[choice_expert[t, kk], choice_slot[t, kk], j], kk)))
    return wl
