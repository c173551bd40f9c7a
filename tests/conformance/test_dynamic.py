"""Conformance of the dynamic zoo workloads: random lengths and routings, every backend.

varlen_attention, decode_step and moe are checked against independent numpy
formulas through pw.reference, then every target against the reference:
numpy and cpu from one build each over all the bindings (symbolic sizes),
aicore per binding (it takes bound workloads only), the cuda target's
kernels per binding on the host emulator, with the default
schedule and a hand schedule whose task grid tiles the domain (and whose
attention output is a tiered kernel).  The
lengths include empty and full sequences; the routings include experts
that get no tokens.  A scatter (rows written back to their tokens) joins
them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu import jit
from ptowsp.backends.cuda import generate
from ptowsp.backends.cuda.emulate import emulate
from ptowsp.workloads import input_sizes, zoo
from ptowsp.workloads.zoo.dynamic import route_top_k
from tests.backends.test_cuda import cuda_default
from tests.conformance.test_conformance import COMPILED, assert_close
from tests.workloads.test_scatter import _routing, _unroute

SEEDS = range(3)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def varlen_formula(p, causal):
    q, k, v, lens = (p[n] for n in ("Q", "K", "V", "lens"))
    out = np.zeros(q.shape)
    for b, n in enumerate(np.clip(lens, 0, q.shape[2])):
        if n:
            s = q[b, :, :n] @ np.swapaxes(k[b, :, :n], -1, -2) / math.sqrt(q.shape[-1])
            if causal:
                s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
            out[b, :, :n] = _softmax(s) @ v[b, :, :n]
    return {"O": out}


def decode_formula(p):
    q, k, v, lens = (p[n] for n in ("q", "K", "V", "lens"))
    out = np.zeros(q.shape)
    for b, n in enumerate(np.clip(lens, 0, k.shape[2])):
        if n:
            weights = _softmax(np.einsum("hd,htd->ht", q[b], k[b, :, :n]) / math.sqrt(q.shape[-1]))
            out[b] = np.einsum("ht,htd->hd", weights, v[b, :, :n])
    return {"O": out}


def moe_formula(p, top_k):
    x, logits = p["X"], p["X"] @ p["W_router"]
    gelu = np.vectorize(lambda z: 0.5 * z * (1 + math.erf(z / math.sqrt(2))))
    out = np.zeros(x.shape)
    for t in range(len(x)):
        chosen = np.argsort(-logits[t], kind="stable")[:top_k]
        for e, gate in zip(chosen, _softmax(logits[t, chosen])):
            out[t] += gate * (gelu(x[t] @ p["W1"][e]) @ p["W2"][e])
    return {"Y": out}


def varlen_inputs(seed):
    rng = np.random.default_rng(seed)
    batch, max_len = 1 + seed * 2, 5 + 7 * seed
    p = {n: rng.standard_normal((batch, 2, max_len, 8)).astype(np.float32) for n in "QKV"}
    lens = rng.integers(0, max_len + 1, batch)
    lens[0] = 0 if seed else max_len  # an empty sequence, a full one alone
    return p | {"lens": lens.astype(np.int32)}


def decode_inputs(seed):
    rng = np.random.default_rng(10 + seed)
    batch, ctx = 2 + seed, 3 + 9 * seed
    p = {"q": rng.standard_normal((batch, 2, 8)).astype(np.float32)}
    p |= {n: rng.standard_normal((batch, 2, ctx, 8)).astype(np.float32) for n in "KV"}
    lens = rng.integers(0, ctx + 1, batch)
    lens[0] = 0
    return p | {"lens": lens.astype(np.int32)}


def moe_inputs(seed):
    rng = np.random.default_rng(20 + seed)
    tokens = (1, 9, 23)[seed]
    p = {"X": rng.standard_normal((tokens, 8)).astype(np.float32),
         "W_router": rng.standard_normal((8, 4)).astype(np.float32),
         "W1": rng.standard_normal((4, 8, 16)).astype(np.float32),
         "W2": rng.standard_normal((4, 16, 8)).astype(np.float32)}
    p["X"][:, 0], p["W_router"][:, 3], p["W_router"][0, 3] = 1.0, 0.0, -100.0  # expert 3 gets no tokens
    return p


def varlen_schedule(wl):
    """Grids that tile the domain; short sequences' rows run a specialized O (a tiered kernel)."""
    s = wl.schedule().tile("S", i=4, j=4).parallel("S", "b", "h", "i.outer", "j.outer")
    for task in ("M", "Z", "O"):
        s.split(task, "i", 4).parallel(task, "b", "h", "i.outer")
    s.specialize("O", "lens[b] <= 6", lambda v: v.split("O", "r", 4).split("O", "x", 4).reorder(
        "O", "b", "h", "i.outer", "i.inner", "r.outer", "r.inner", "x.outer", "x.inner").vectorize("O", "x.inner"))
    return s.tile("E", i=4, j=4).parallel("E", "b", "h", "i.outer", "j.outer")


def decode_schedule(wl):
    s = wl.schedule().split("S", "j", 4).parallel("S", "b", "h", "j.outer")
    s.split("E", "j", 4).parallel("E", "b", "h", "j.outer")
    for task in ("M", "Z", "O"):
        s.parallel(task, "b", "h")
    return s


def moe_schedule(wl):
    s = wl.schedule()
    for task, k in (("H", "dm"), ("G", None), ("Y_expert", "f")):
        s.split(task, "c", 4).split(task, "j", 4)
        if k:
            s.reorder(task, "e", "c.outer", "c.inner", k, "j.outer", "j.inner")
        s.vectorize(task, "j.inner").parallel(task, "e", "c.outer")
    return s.split("Y", "t", 4).parallel("Y", "t.outer")


CASES = {  # zoo function, its arguments, inputs of a seed, formula, hand schedule
    "varlen_attention": ("varlen_attention", {"heads": 2, "head_dim": 8}, varlen_inputs,
                         lambda p: varlen_formula(p, True), varlen_schedule),
    "varlen_attention_full": ("varlen_attention", {"heads": 2, "head_dim": 8, "causal": False}, varlen_inputs,
                              lambda p: varlen_formula(p, False), varlen_schedule),
    "decode_step": ("decode_step", {"heads": 2, "head_dim": 8}, decode_inputs, decode_formula, decode_schedule),
    "moe": ("moe", {"d_model": 8, "d_ff": 16, "experts": 4, "top_k": 2}, moe_inputs, lambda p: moe_formula(p, 2),
            moe_schedule),
}


ZOO_CASES = list(CASES)
CASES["scatter"] = (_unroute, {}, lambda seed: _routing((1, 6, 17)[seed], seed)[0],
                    lambda p: {"out": _scattered(p)},
                    lambda wl: wl.schedule().split("out", "t0", 2).parallel("out", "t0.outer"))


def _scattered(p):
    out = np.zeros(p["y"].shape[1:])
    for e, count in enumerate(p["counts"]):
        out[p["slots"][e, :count]] = 2 * p["y"][e, :count]
    return out


def make(name: str, padded: bool = False) -> pw.Workload:
    fn, arguments, *_ = CASES[name]
    return fn() if callable(fn) else getattr(zoo, fn)(**arguments, padded=padded)


def bindings(name: str, seeds=SEEDS):
    """(seed, inputs, the workload bound to their sizes, the reference's outputs) per seed."""
    wl, inputs = make(name), CASES[name][2]
    for seed in seeds:
        p = inputs(seed)
        yield seed, p, wl.bind(input_sizes(wl, p)), pw.reference(wl, **p)


def _float64(p):
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in p.items()}


@pytest.mark.parametrize("name", CASES)
def test_reference_matches_the_formula(name):
    formula = CASES[name][3]
    for seed, p, bound, got in bindings(name):
        assert_close(got, formula(_float64(p)), bound, 1e-4, f"seed {seed}")


@pytest.mark.parametrize("name", ZOO_CASES)
def test_padded_matches_dynamic(name):
    wl, p = make(name), CASES[name][2](2)
    assert_close(pw.reference(make(name, padded=True), **p), pw.reference(wl, **p), wl.bind(input_sizes(wl, p)), 1e-5)


@pytest.mark.parametrize("target", ["numpy", *[t for t in COMPILED if t not in ("aicore", "cuda")]])
@pytest.mark.parametrize("name", CASES)
def test_one_build_serves_every_binding(name, target):
    """numpy and cpu: default and hand schedule, built once, every seed (aicore and cuda take bound
    workloads only: below)."""
    wl = make(name)
    builds = [pw.build(wl, target=target), pw.build(CASES[name][4](wl), target=target, workers=2)]
    before = jit.COMPILATIONS
    for seed, p, bound, expected in bindings(name):
        for prog in builds:
            assert_close(prog.run(**p), expected, bound, 1e-4, f"seed {seed} on {target} under\n{prog.schedule}")
    assert jit.COMPILATIONS == before


@pytest.mark.parametrize("target", [t for t in COMPILED if t in ("aicore", "cuda")])
@pytest.mark.parametrize("name", CASES)
def test_per_binding(name, target):
    """The targets that take bound workloads only: a build per binding, default and hand schedule
    (cuda refuses a specialized hand schedule, saying so)."""
    for seed, p, bound, expected in bindings(name):
        for s in (bound.schedule(), CASES[name][4](bound)):
            if target == "cuda" and s.variants:
                with pytest.raises(pw.BuildError, match="specialized .* which the cuda target does not take"):
                    pw.build(s, target=target)
                continue
            assert_close(pw.build(s, target=target).run(**p), expected, bound, 1e-4, f"seed {seed} under\n{s}")


def test_varlen_tiles_outside_the_domain_are_never_generated():
    wl = zoo.varlen_attention(heads=2, head_dim=8)
    prog = pw.build(varlen_schedule(wl), target="cpu", workers=2)
    p = varlen_inputs(2)
    prog.run(**p)
    counts = {}
    for e in prog.trace.events:
        task = e.name.split("@")[0]  # O@1: O's specialized kernel
        counts[task] = counts.get(task, 0) + 1
    max_len, lens = p["Q"].shape[2], np.clip(p["lens"], 0, None)
    row_tiles = sum(math.ceil(n / 4) for n in lens) * 2  # per head
    # a 4x4 tile of S has work when its first row is a real row and its first key is at or before its last row
    pairs = sum(1 for n in lens for i0 in range(0, max_len, 4) for j0 in range(0, max_len, 4)
                if i0 < n and j0 <= min(i0 + 3, n - 1)) * 2
    assert counts["O"] == counts["M"] == counts["Z"] == row_tiles
    assert counts["S"] == counts["E"] == pairs
    assert pairs < len(lens) * 2 * math.ceil(max_len / 4) ** 2 / 2  # well under the padded grid


def test_moe_skips_the_slots_of_every_expert_past_its_tokens():
    wl = zoo.moe(d_model=8, d_ff=16, experts=4, top_k=2)
    prog = pw.build(moe_schedule(wl), target="cpu", workers=2)
    p = moe_inputs(2)
    prog.run(**p)
    counts, *_ = route_top_k(p["X"] @ p["W_router"], 2)
    assert counts[3] == 0 and counts.sum() == 2 * len(p["X"])
    tiles = sum(math.ceil(int(c) / 4) for c in counts)
    ran = [e for e in prog.trace.events if e.name == "H"]
    assert len(ran) == tiles
    assert prog.trace.statistics["skipped"] == 3 * (4 * math.ceil(len(p["X"]) / 4) - tiles)


@pytest.mark.parametrize("name", CASES)
def test_emulated_cuda_per_binding(name):
    """The cuda target's kernels (it takes bound workloads; every tile runs and writes its zeros), run
    thread by thread on the host by the emulator: no GPU needed."""
    for seed, p, bound, expected in bindings(name, SEEDS[:2]):  # the emulator runs ~1e5 statements a second
        assert_close(emulate(generate(cuda_default(bound)), p), expected, bound, 1e-4,
                     f"seed {seed} on the emulated cuda target")
