"""zoo.decoder (workloads/zoo/decoder.py) against a numpy decoder written here, independently:
paged KV cache read through block tables, a ragged decode batch, causal prefill, dense and MoE."""

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.workloads.zoo.decoder import DecoderConfig, decoder, rotary_tables, write_new_tokens
from tests.tolerance import assert_sums_close

TINY = DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, mlp=96, block_size=4)
TINY_MOE = DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, mlp=32, block_size=4, experts=4,
                         top_k=2)
MAX_POS = 64


def weights(c: DecoderConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 1)).astype(np.float32)

    out = {}
    for n in range(c.layers):
        p = f"l{n}_"
        out |= {f"{p}ln1_w": 1 + 0.1 * w(c.hidden), f"{p}ln2_w": 1 + 0.1 * w(c.hidden),
                f"{p}q_norm": 1 + 0.1 * w(c.head_dim), f"{p}k_norm": 1 + 0.1 * w(c.head_dim),
                f"{p}Wq": w(c.hidden, c.heads * c.head_dim), f"{p}Wk": w(c.hidden, c.kv_heads * c.head_dim),
                f"{p}Wv": w(c.hidden, c.kv_heads * c.head_dim), f"{p}Wo": w(c.heads * c.head_dim, c.hidden)}
        if c.experts:
            out |= {f"{p}W_router": w(c.hidden, c.experts), f"{p}W_gate": w(c.experts, c.hidden, c.mlp),
                    f"{p}W_up": w(c.experts, c.hidden, c.mlp), f"{p}W_down": w(c.experts, c.mlp, c.hidden)}
        else:
            out |= {f"{p}W_gate": w(c.hidden, c.mlp), f"{p}W_up": w(c.hidden, c.mlp), f"{p}W_down": w(c.mlp, c.hidden)}
    return out


# -- the numpy decoder: written from the model's definition, not from the workload --------------
def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


def silu(x):
    return x / (1 + np.exp(-x))


def softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def mlp(c, W, p, h):
    if not c.experts:
        return (silu(h @ W[f"{p}W_gate"]) * (h @ W[f"{p}W_up"])) @ W[f"{p}W_down"]
    out = np.zeros_like(h)
    for t, row in enumerate(h):
        logits = row @ W[f"{p}W_router"]
        top = np.argsort(-logits, kind="stable")[:c.top_k]
        for gate, e in zip(softmax(logits[top]), top):
            out[t] += gate * (silu(row @ W[f"{p}W_gate"][e]) * (row @ W[f"{p}W_up"][e])) @ W[f"{p}W_down"][e]
    return out


def numpy_layers(c, W, x, positions, cos, sin, attend):
    """x: (rows, hidden) at `positions`; attend(n, q, k, v) -> (rows, heads, head_dim)."""
    new = {}
    for n in range(c.layers):
        p = f"l{n}_"
        h = rms(x, W[f"{p}ln1_w"], c.eps)
        q = (h @ W[f"{p}Wq"]).reshape(len(x), c.heads, c.head_dim)
        k = (h @ W[f"{p}Wk"]).reshape(len(x), c.kv_heads, c.head_dim)
        v = (h @ W[f"{p}Wv"]).reshape(len(x), c.kv_heads, c.head_dim)
        angle = cos[positions][:, None, :], sin[positions][:, None, :]
        q = rope(rms(q, W[f"{p}q_norm"], c.eps), *angle)
        k = rope(rms(k, W[f"{p}k_norm"], c.eps), *angle)
        new[f"{p}K_new"], new[f"{p}V_new"] = k, v
        x = x + attend(n, q, k, v).reshape(len(x), -1) @ W[f"{p}Wo"]
        x = x + mlp(c, W, p, rms(x, W[f"{p}ln2_w"], c.eps))
    return x, new


def numpy_decode(c, W, x, pos, table, caches, cos, sin):
    group = c.heads // c.kv_heads

    def attend(n, q, k, v):
        out = np.zeros_like(q)
        for b, p in enumerate(pos):
            where = [(table[b, t // c.block_size], t % c.block_size) for t in range(p)]
            keys = np.stack([caches[f"l{n}_K_cache"][blk, off] for blk, off in where] + [k[b]])
            values = np.stack([caches[f"l{n}_V_cache"][blk, off] for blk, off in where] + [v[b]])
            for h in range(c.heads):
                out[b, h] = softmax(keys[:, h // group] @ q[b, h] / np.sqrt(c.head_dim)) @ values[:, h // group]
        return out

    return numpy_layers(c, W, x, pos, cos, sin, attend)


def numpy_prefill(c, W, x, cos, sin):
    group = c.heads // c.kv_heads

    def attend(n, q, k, v):
        out = np.zeros_like(q)
        for i in range(len(x)):
            for h in range(c.heads):
                w = softmax(k[:i + 1, h // group] @ q[i, h] / np.sqrt(c.head_dim))
                out[i, h] = w @ v[:i + 1, h // group]
        return out

    return numpy_layers(c, W, x, np.arange(len(x)), cos, sin, attend)


# -- inputs -----------------------------------------------------------------------------------
def decode_inputs(c, W, pos, blocks_per_seq, pool, rng):
    """A ragged batch: sequence b has pos[b] tokens cached, in pool blocks given by a random table."""
    batch = len(pos)
    table = rng.permutation(pool)[:batch * blocks_per_seq].reshape(batch, blocks_per_seq).astype(np.int32)
    caches = {f"l{n}_{w}_cache": rng.standard_normal((pool, c.block_size, c.kv_heads, c.head_dim)).astype(np.float32)
              for n in range(c.layers) for w in "KV"}
    cos, sin = rotary_tables(MAX_POS, c)
    x = rng.standard_normal((batch, c.hidden)).astype(np.float32)
    return {"X": x, "pos": np.asarray(pos, np.int32), "block_table": table, "cos": cos, "sin": sin, **caches, **W}


def check(out, want_y, want_new, terms):
    assert_sums_close(out["Y"], want_y, terms)
    for name, value in want_new.items():
        assert_sums_close(out[name], value, terms)


@pytest.mark.parametrize("config", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_one_decode_build_serves_ragged_batches_through_block_tables(config):
    rng = np.random.default_rng(0)
    W = weights(config, rng)
    wl = decoder(config, "decode")
    assert set(wl.sizes) == {"batch", "max_blocks", "max_pos", "num_blocks"}
    builds = {target: pw.build(wl, target=target) for target in ("numpy", "cpu")}  # one build each
    for pos, blocks in (([0, 5, 13], 4), ([7], 2), ([3, 30, 1, 16, 9], 8)):
        inputs = decode_inputs(config, W, pos, blocks, pool=48, rng=rng)
        caches = {k: v for k, v in inputs.items() if k.endswith("_cache")}
        want_y, want_new = numpy_decode(config, W, inputs["X"], inputs["pos"], inputs["block_table"], caches,
                                        inputs["cos"], inputs["sin"])
        check(pw.reference(wl, **inputs), want_y, want_new, 256)
        for built in builds.values():
            check(built.run(**inputs), want_y, want_new, 256)


def test_prefill_is_causal_attention_over_the_prompt():
    rng = np.random.default_rng(1)
    W = weights(TINY, rng)
    wl = decoder(TINY, "prefill")
    cos, sin = rotary_tables(MAX_POS, TINY)
    prog = pw.build(wl, target="cpu")
    for seq in (1, 9):
        x = rng.standard_normal((seq, TINY.hidden)).astype(np.float32)
        want_y, want_new = numpy_prefill(TINY, W, x, cos, sin)
        check(prog.run(X=x, cos=cos[:seq], sin=sin[:seq], **W), want_y, want_new, 256)


def test_decoding_after_prefill_continues_the_sequence():
    """Prefill 6 tokens, write their keys and values into blocks, decode the 7th: the same as a 7-token
    prefill's last row."""
    rng = np.random.default_rng(2)
    W = weights(TINY, rng)
    cos, sin = rotary_tables(MAX_POS, TINY)
    x = rng.standard_normal((7, TINY.hidden)).astype(np.float32)
    prefill = pw.build(decoder(TINY, "prefill"), target="cpu")
    whole = prefill.run(X=x, cos=cos[:7], sin=sin[:7], **W)
    prompt = prefill.run(X=x[:6], cos=cos[:6], sin=sin[:6], **W)
    table = np.array([[5, 2]], np.int32)
    caches = {f"l{n}_{w}_cache": np.zeros((8, TINY.block_size, TINY.kv_heads, TINY.head_dim), np.float32)
              for n in range(TINY.layers) for w in "KV"}
    for t in range(6):  # the prompt's keys and values, one position at a time
        write_new_tokens(caches, {k: v[t:t + 1] for k, v in prompt.items() if k.endswith("_new")}, table,
                         np.array([t], np.int32), TINY)
    step = pw.build(decoder(TINY, "decode"), target="cpu").run(
        X=x[6:], pos=np.array([6], np.int32), block_table=table, cos=cos, sin=sin, **caches, **W)
    assert_sums_close(step["Y"], whole["Y"][6:], 256)


@pytest.mark.parametrize("config", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_weights_given_to_the_build_are_constants_stored_as_their_kernels_read_them(config):
    """`decoder(..., weights=W)`: the parameters are constants (a run passes only data), the dense
    projections' weights stored as panels of their register tiles (packed once, at build time), and
    the steps equal the numpy decoder's, decode and prefill."""
    rng = np.random.default_rng(4)
    W = weights(config, rng)
    step = pw.build(decoder(config, "decode", weights=W), target="cpu")
    assert set(W) <= set(step.workload.constants) and not set(W) & set(step.workload.inputs)
    if not config.experts:
        assert {"l0_Wq", "l0_W_gate", "l1_W_down"} <= set(step.schedule.layouts)
    inputs = decode_inputs(config, W, [0, 5, 13], 4, pool=48, rng=rng)
    caches = {k: v for k, v in inputs.items() if k.endswith("_cache")}
    want = numpy_decode(config, W, inputs["X"], inputs["pos"], inputs["block_table"], caches, inputs["cos"],
                        inputs["sin"])
    check(step.run(**{k: v for k, v in inputs.items() if k not in W}), *want, 256)
    cos, sin = rotary_tables(MAX_POS, config)
    x = rng.standard_normal((9, config.hidden)).astype(np.float32)
    prefill = pw.build(decoder(config, "prefill", weights=W), target="cpu")
    check(prefill.run(X=x, cos=cos[:9], sin=sin[:9]), *numpy_prefill(config, W, x, cos, sin), 256)


def test_weights_that_do_not_fit_the_decoder_are_refused_by_name():
    W = weights(TINY, np.random.default_rng(5))
    with pytest.raises(pw.WorkloadError, match="no 'l1_Wo'"):
        decoder(TINY, "decode", weights={k: v for k, v in W.items() if k != "l1_Wo"})
    with pytest.raises(pw.ShapeError, match=r"weights\['l0_Wq'\] has shape \(64, 32\), expected \(64, 64\)"):
        decoder(TINY, "decode", weights={**W, "l0_Wq": W["l0_Wq"][:, :32]})
    with pytest.raises(pw.WorkloadError, match="'X', which are not parameters"):
        decoder(TINY, "prefill", weights={**W, "X": np.zeros((1, 64), np.float32)})


def test_a_bad_config_is_refused_with_what_is_wrong():
    with pytest.raises(pw.ShapeError, match="6 query heads do not share 4 KV heads"):
        DecoderConfig(heads=6, kv_heads=4)
    with pytest.raises(pw.ShapeError, match="phase must be"):
        decoder(TINY, "train")


@pytest.mark.parametrize("config", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_the_decode_step_on_the_device_model(config):
    """aicore takes static sizes only (docs/aicore.md): the step bound to one batch's sizes."""
    rng = np.random.default_rng(3)
    W = weights(config, rng)
    inputs = decode_inputs(config, W, [0, 5, 13], 4, pool=48, rng=rng)
    wl = decoder(config, "decode").bind({"batch": 3, "max_blocks": 4, "max_pos": MAX_POS, "num_blocks": 48})
    prog = pw.build(wl, target="aicore")
    caches = {k: v for k, v in inputs.items() if k.endswith("_cache")}
    check(prog.run(**inputs), *numpy_decode(config, W, inputs["X"], inputs["pos"], inputs["block_table"], caches,
                                            inputs["cos"], inputs["sin"]), 256)
    assert prog.trace.makespan > 0 and {e.core for e in prog.trace.events if e.id >= 0} >= {"cube", "vector"}
