"""`make demo`: a transformer block from the zoo on 2 workers, checked against plain numpy.

The block (layernorm -> multi-head causal attention -> residual -> layernorm
-> GELU MLP -> residual) is described once as a ptowsp workload, scheduled
with every task split into a grid of row blocks, compiled for the best
target on this machine (the LLVM `cpu` target where it is available, else
the numpy reference), run by the CSP runtime on 2 worker threads, and
compared with `numpy_block`, written below from the formulas alone, without
ptowsp.  It prints the run's trace summary and writes trace.json (open it in
Perfetto) and gantt.png next to where it runs.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections import Counter

import numpy as np

import ptowsp as pw

SEQ, D_MODEL, HEADS, D_FF = 128, 256, 8, 1024
WORKERS = 2


def numpy_block(p: dict[str, np.ndarray], heads: int, eps: float = 1e-5) -> np.ndarray:
    """The same block in float64 numpy, straight from the formulas."""
    p = {k: v.astype(np.float64) for k, v in p.items()}

    def layernorm(z, gamma, beta):
        mu = z.mean(axis=-1, keepdims=True)
        var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
        return (z - mu) / np.sqrt(var + eps) * gamma + beta

    x = p["x"]
    seq, width = x.shape
    hd = width // heads
    a = layernorm(x, p["ln1_gamma"], p["ln1_beta"])
    q, k, v = (
        (a @ p[w]).reshape(seq, heads, hd).transpose(1, 0, 2) for w in ("Wq", "Wk", "Wv")
    )
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    scores = np.where(np.tril(np.ones((seq, seq), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    ctx = (probs @ v).transpose(1, 0, 2).reshape(seq, width)
    h = x + ctx @ p["Wo"]
    f = layernorm(h, p["ln2_gamma"], p["ln2_beta"]) @ p["W1"] + p["b1"]
    erf = np.vectorize(math.erf)
    f = 0.5 * f * (1 + erf(f / math.sqrt(2)))
    return h + f @ p["W2"] + p["b2"]


def main() -> None:
    wl = pw.zoo.transformer_block(seq=SEQ, d_model=D_MODEL, heads=HEADS, d_ff=D_FF)
    rng = np.random.default_rng(0)
    inputs = {}
    for name in wl.inputs:
        shape = wl.tensor(name).shape
        scale = 1.0 if name in ("x", "ln1_gamma", "ln2_gamma") else 1.0 / math.sqrt(shape[0])
        inputs[name] = (rng.standard_normal(shape) * scale).astype(np.float32)

    categories = Counter(wl.category(t).value for t in wl.tasks)
    print(f"ptowsp {pw.__version__} demo: {wl.name} (seq={SEQ}, d_model={D_MODEL}, heads={HEADS}, d_ff={D_FF})")
    print(f"  {len(wl.tasks)} tasks: " + ", ".join(f"{n} {c}" for c, n in sorted(categories.items())))
    target = next((t for t in ("cpu", "numpy") if t in pw.targets()))
    schedule = wl.schedule().parallelize(tasks=8).dispatch("work_stealing")
    start = time.perf_counter()
    prog = pw.build(schedule, target=target, workers=WORKERS)
    built = time.perf_counter() - start
    print(f"  target: {target} (of {', '.join(pw.targets())}), {WORKERS} workers; built in {built * 1e3:.0f} ms")

    prog.run(**inputs)  # the first run warms caches and thread start-up
    start = time.perf_counter()
    out = prog.run(**inputs)["y"]
    elapsed = time.perf_counter() - start
    expected = numpy_block(inputs, HEADS)

    error = float(np.max(np.abs(out - expected)))
    scale = float(np.max(np.abs(expected)))
    ok = np.allclose(out, expected, rtol=1e-4, atol=1e-4 * scale)
    print(f"  ran in {elapsed * 1e3:.1f} ms; output y {out.shape} {out.dtype}")
    print(f"  max |ptowsp - numpy| = {error:.2e} (output scale {scale:.2f}, tolerance 1e-4 relative)")
    print("  a few tasks as written:")
    for name in ("ln1_mean", "attn_scores", "attn", "ff_gelu"):
        print(f"    {wl.task(name)}")
    print("  trace summary:")
    print(textwrap.indent(str(prog.trace.summary()), "    "))
    print(f"  wrote {prog.trace.to_chrome('trace.json')} (open in Perfetto) and {prog.trace.plot('gantt.png')}")
    print("  result: " + ("MATCHES the independent numpy implementation" if ok else "MISMATCH"))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
