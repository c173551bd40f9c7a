"""Where the device's time goes for the decoder (pw.zoo.decoder) on the aicore model.

    .venv/bin/python benchmarks/llm_aicore.py [--layers 2] [--preset 910b]

Prefill (batch 1, 2,048 tokens) and decode (batch 32, contexts from 128 to 4,096 tokens, a paged cache
in 16-token blocks) of `--layers` layers of Qwen3-0.6B's shape, float32, each built with the aicore
default for its sizes (the target takes static sizes: `Workload.bind`).  One row per phase: the
makespan in device time, each core class's computing share, the AICPU threads' busy shares, and what
bounds the step (`trace.summary().bounds`, docs/aicore.md "What bounds a run"), for the step as
the orchestrator generates it, as it is captured (`prog.capture`: generated and recorded) and as the
recording replays it (launched once).  The host computes the real numbers too: minutes for two
layers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ptowsp as pw
from ptowsp.workloads.zoo.decoder import DecoderConfig, decoder, rotary_tables

PREFILL_TOKENS, DECODE_BATCH, SHORTEST, LONGEST = 2048, 32, 128, 4096


def weights(c: DecoderConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    wl = decoder(c, "prefill")
    return {name: (0.02 * rng.standard_normal(wl.tensor(name).shape)).astype(np.float32)
            for name in wl.inputs if name.startswith("l")}


def decode_inputs(c: DecoderConfig, rng: np.random.Generator) -> tuple[dict, dict]:
    bs = c.block_size
    pos = np.linspace(SHORTEST, LONGEST - bs, DECODE_BATCH).astype(np.int32) // bs * bs
    per_seq = LONGEST // bs
    pool = DECODE_BATCH * per_seq
    table = rng.permutation(pool).reshape(DECODE_BATCH, per_seq).astype(np.int32)
    cos, sin = rotary_tables(LONGEST, c)
    caches = {f"l{n}_{w}_cache": (0.1 * rng.standard_normal((pool, bs, c.kv_heads, c.head_dim))).astype(np.float32)
              for n in range(c.layers) for w in "KV"}
    x = rng.standard_normal((DECODE_BATCH, c.hidden)).astype(np.float32)
    sizes = {"batch": DECODE_BATCH, "max_blocks": per_seq, "num_blocks": pool, "max_pos": LONGEST}
    return {"X": x, "pos": pos, "block_table": table, "cos": cos, "sin": sin, **caches}, sizes


def rows(label: str, wl: pw.Workload, inputs: dict, device: pw.DeviceModel) -> None:
    """The phase run as generated, then captured and replayed: a row each."""
    start = time.perf_counter()
    prog = pw.build(wl, target="aicore", device=device)
    out = prog.run(**inputs)
    line(f"{label}, generated", prog.trace, start)
    start = time.perf_counter()
    recording = prog.capture(**inputs)
    line(f"{label}, captured", recording.trace, start)
    start = time.perf_counter()
    replayed = recording.replay(**inputs)
    line(f"{label}, replayed", recording.trace, start)
    assert np.isfinite(out["Y"]).all() and np.array_equal(out["Y"], replayed["Y"])


def line(label: str, trace: pw.Trace, start: float) -> None:
    s = trace.summary()
    schedulers = max(v for k, v in s.control.items() if k.startswith("scheduler"))
    top = ", ".join(f"{name} {share:.0%}" for name, share in list(s.bounds.items())[:3])
    print(f"| {label} | {s.tasks} | {s.makespan * 1e3:.3f} ms | {s.classes.get('cube', 0):.1%} | "
          f"{s.classes.get('vector', 0):.1%} | {s.control['orchestrator']:.0%} / {schedulers:.0%} | {s.bound} "
          f"({top}) | {time.perf_counter() - start:.0f} s |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--preset", default="910b")
    args = parser.parse_args()
    c = DecoderConfig(layers=args.layers)
    device = pw.DeviceModel.preset(args.preset)
    rng = np.random.default_rng(0)
    w = weights(c, rng)
    print(f"{args.layers} layers of Qwen3-0.6B's shape on the {args.preset} preset")
    print("| phase | tasks | makespan | cube computing | vector computing | AICPU busy (orchestrator / "
          "busiest scheduler) | bound by (top three) | host |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    cos, sin = rotary_tables(PREFILL_TOKENS, c)
    x = rng.standard_normal((PREFILL_TOKENS, c.hidden)).astype(np.float32)
    rows(f"prefill, batch 1, {PREFILL_TOKENS} tokens", decoder(c, "prefill").bind({"seq": PREFILL_TOKENS}),
        {"X": x, "cos": cos, "sin": sin, **w}, device)
    inputs, sizes = decode_inputs(c, rng)
    rows(f"decode, batch {DECODE_BATCH}, contexts {SHORTEST}-{LONGEST}", decoder(c, "decode").bind(sizes),
        inputs | w, device)


if __name__ == "__main__":
    main()
