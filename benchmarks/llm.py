"""The decoder (pw.zoo.decoder) on the cpu target beside torch eager and onnxruntime, in one process.

    sh benchmarks/peers.sh && .bench-venv/bin/python benchmarks/llm.py [--layers 4] [--rounds 5] [--repeat 5]

Three cases, each with the same random weights on every side: a decode step at batch 1 and at batch 8
(ragged contexts: sequence b holds `--context` x (b + 1) / batch tokens, rounded to blocks), and a
128-token prefill.  The layers have Qwen3-0.6B's shape (hidden 1024, 16 query and 8 KV heads of 128,
SwiGLU 3072); `--layers` of them (the model has 28: every figure scales with the count).

- ptowsp: `pw.build(decoder(config, phase, weights=W), "cpu", workers=2)`, one build per phase
  serving every batch and context length; the weights constants of the build, as they are
  initializers in onnxruntime's model (each projection's stored as panels of its kernel's tile,
  packed once when it is built); the KV cache paged (16-token blocks, read through block tables).
- torch eager: the same model written here as a torch module from its definition, 2 threads, under
  `inference_mode`; its cache contiguous per sequence and padded to the longest context, with an
  additive mask (as HF transformers' eager attention runs a ragged batch).
- onnxruntime: that module exported by `torch.onnx.export(..., dynamo=True)` for each case's shapes,
  CPU provider, 2 intra-op threads, every graph optimization.

Every side's hidden states are checked against ptowsp's first.  Medians of `--repeat` warm runs per
block over `--rounds` alternating blocks (ptowsp.timing.side_by_side); ratio = the faster peer's time
over ptowsp's (above 1: ptowsp is faster).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from timing import MIN_BLOCK, side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.workloads.zoo.decoder import DecoderConfig, decoder, rotary_tables  # noqa: E402

THREADS = 2
MAX_POS = 4096


def random_weights(c: DecoderConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    wl = decoder(c, "prefill")
    out = {}
    for name in wl.inputs:
        if name.startswith("l"):
            shape = wl.tensor(name).shape
            scale = 1.0 / np.sqrt(shape[-2]) if len(shape) > 1 else 0.1
            out[name] = ((1.0 if len(shape) == 1 else 0.0) + scale * rng.standard_normal(shape)).astype(np.float32)
    return out


def torch_model(c: DecoderConfig, weights: dict[str, np.ndarray]):
    """The decoder as a torch module: forward(x, cos, sin, k_cache, v_cache, mask) -> hidden states.

    x: (rows, hidden); cos, sin: (rows, head_dim) at each row's position; k_cache, v_cache:
    (layers, batch, kv_heads, cached, head_dim); mask: additive, (batch, 1, rows_per_seq, cached + rows_per_seq).
    Decode: a row per sequence.  Prefill: batch 1, the rows are the prompt."""
    import torch

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, value in weights.items():
                self.register_buffer(name, torch.from_numpy(value))

        def rms(self, x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + c.eps) * w

        @staticmethod
        def rope(x, cos, sin):
            half = x.shape[-1] // 2
            return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

        def forward(self, x, cos, sin, k_cache, v_cache, mask):
            batch = k_cache.shape[1]
            rows = x.shape[0] // batch  # tokens per sequence: 1 when decoding
            group = c.heads // c.kv_heads
            for n in range(c.layers):
                w = {k[len(f"l{n}_"):]: v for k, v in self._buffers.items() if k.startswith(f"l{n}_")}
                h = self.rms(x, w["ln1_w"])
                q = (h @ w["Wq"]).view(batch, rows, c.heads, c.head_dim).transpose(1, 2)
                k = (h @ w["Wk"]).view(batch, rows, c.kv_heads, c.head_dim).transpose(1, 2)
                v = (h @ w["Wv"]).view(batch, rows, c.kv_heads, c.head_dim).transpose(1, 2)
                angle = cos.view(batch, 1, rows, -1), sin.view(batch, 1, rows, -1)
                q = self.rope(self.rms(q, w["q_norm"]), *angle)
                k = self.rope(self.rms(k, w["k_norm"]), *angle)
                keys = torch.cat([k_cache[n], k], 2).repeat_interleave(group, 1)
                values = torch.cat([v_cache[n], v], 2).repeat_interleave(group, 1)
                scores = q @ keys.transpose(-1, -2) / (c.head_dim ** 0.5) + mask
                o = (torch.softmax(scores, -1) @ values).transpose(1, 2).reshape(batch * rows, c.heads * c.head_dim)
                x = x + o @ w["Wo"]
                h = self.rms(x, w["ln2_w"])
                x = x + (torch.nn.functional.silu(h @ w["W_gate"]) * (h @ w["W_up"])) @ w["W_down"]
            return x

    return Decoder().eval()


def decode_case(c: DecoderConfig, batch: int, context: int, rng: np.random.Generator) -> dict:
    """One decode step's inputs for ptowsp (paged) and the peers (padded), with the same cached values."""
    bs = c.block_size
    lens = [max(bs, context * (b + 1) // batch // bs * bs) for b in range(batch)]
    longest, per_seq = max(lens), max(lens) // bs + 1
    pool = batch * per_seq
    table = rng.permutation(pool).reshape(batch, per_seq).astype(np.int32)
    cached = {w: rng.standard_normal((c.layers, batch, c.kv_heads, longest, c.head_dim)).astype(np.float32)
              for w in "KV"}
    caches = {}
    for w in "KV":
        paged = np.zeros((c.layers, pool, bs, c.kv_heads, c.head_dim), np.float32)
        for b, n in enumerate(lens):
            for t0 in range(0, n, bs):
                paged[:, table[b, t0 // bs]] = cached[w][:, b, :, t0:t0 + bs].transpose(0, 2, 1, 3)
        caches |= {f"l{n}_{w}_cache": paged[n] for n in range(c.layers)}
    pos = np.array(lens, np.int32)
    cos, sin = rotary_tables(MAX_POS, c)
    x = rng.standard_normal((batch, c.hidden)).astype(np.float32)
    mask = np.zeros((batch, 1, 1, longest + 1), np.float32)
    for b, n in enumerate(lens):
        mask[b, 0, 0, n:longest] = -np.inf  # padding between this sequence's cache and its new token
    ours = {"X": x, "pos": pos, "block_table": table, "cos": cos, "sin": sin, **caches}
    theirs = (x, cos[pos], sin[pos], cached["K"], cached["V"], mask)
    return {"ours": ours, "theirs": theirs, "label": f"decode, batch {batch}, contexts {min(lens)}-{longest}"}


def prefill_case(c: DecoderConfig, seq: int, rng: np.random.Generator) -> dict:
    cos, sin = rotary_tables(seq, c)
    x = rng.standard_normal((seq, c.hidden)).astype(np.float32)
    empty = np.zeros((c.layers, 1, c.kv_heads, 0, c.head_dim), np.float32)
    mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)[None, None]
    return {"ours": {"X": x, "cos": cos, "sin": sin}, "theirs": (x, cos, sin, empty, empty, mask),
            "label": f"prefill, {seq} tokens"}


def ort_runner(module, args: tuple, folder: Path, name: str):
    import onnxruntime as ort
    import torch

    path = folder / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, tuple(torch.from_numpy(a) for a in args), str(path), dynamo=True, verbose=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), args)}
    return lambda: session.run(None, feeds)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--context", type=int, default=1024, help="the longest decode context")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(THREADS)
    c = DecoderConfig(layers=args.layers)
    weights = random_weights(c)
    module = torch_model(c, weights)
    rng = np.random.default_rng(1)
    programs = {phase: pw.build(decoder(c, phase, weights=weights), target="cpu", workers=THREADS)
                for phase in ("decode", "prefill")}
    cases = [("decode", decode_case(c, 1, args.context, rng)), ("decode", decode_case(c, 8, args.context, rng)),
             ("prefill", prefill_case(c, 128, rng))]
    print(f"{args.layers} layers of Qwen3-0.6B's shape; medians of {args.repeat} runs x {args.rounds} rounds")
    print("| case | ptowsp | torch eager | onnxruntime | faster peer / ptowsp |\n| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for k, (phase, case) in enumerate(cases):
            prog, ours = programs[phase], case["ours"]
            want = prog.run(**ours)["Y"]
            tensors = tuple(torch.from_numpy(a) for a in case["theirs"])

            def eager():
                with torch.inference_mode():
                    return module(*tensors)

            ort_run = ort_runner(module, case["theirs"], Path(folder), f"case{k}")
            for side, got in (("torch", eager().numpy()), ("onnxruntime", ort_run())):
                err = float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))
                assert err < 1e-3, f"{case['label']}: {side} differs from ptowsp by {err:.2e}"
            seconds = side_by_side([lambda: prog.run(**ours), eager, ort_run], args.repeat, rounds=args.rounds,
                                   min_block=MIN_BLOCK)
            ms = [f"{s * 1e3:.2f} ms" for s in seconds]
            print(f"| {case['label']} | {ms[0]} | {ms[1]} | {ms[2]} | {min(seconds[1:]) / seconds[0]:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
