"""Whole models imported from ONNX: ResNet-18 and a BERT-base encoder layer beside onnxruntime and torch eager.

Both models are built with onnx.helper with random weights (ptowsp/frontend/models.py; nothing is
downloaded): ResNet-18 at batch 1, 3x224x224; a BERT-base encoder layer at seq 128, hidden 768, 12
heads, d_ff 3072; float32.  ptowsp imports the ONNX model (`pw.frontend.from_onnx`) and builds it
with the default schedule on cpu with 2 workers; onnxruntime runs the same model (CPU execution
provider, every graph optimization, 2 threads); torch eager runs the same weights through
torch.nn.functional (2 threads).  Every output is checked against onnxruntime's first.  Medians of
`--repeat` warm runs (and at least 0.2 s of them: timing.MIN_BLOCK) in alternating blocks
(timing.side_by_side).  With `--aicore` the models also
run on the aicore target: device-time makespan and cube/vector utilisation.  With `--tuned N`
ptowsp also tunes each model for N trials first (a whole-model search: kernel by kernel,
autoschedule/model_search.py; logged to `--log-dir`, resumed from there) and times the tuned
schedule beside the rest.

Targets (issue 31): ResNet-18 default >= 0.8x onnxruntime (tuned >= 1.1x), BERT layer tuned >= 1.0x
onnxruntime, both >= 1.5x torch eager; the zoo's transformer block (seq 128, d_model 256, 8 heads,
d_ff 1024) default >= 1.0x torch.compile (last table).

Peers live in a separate venv (the package never imports them):

    sh benchmarks/peers.sh   # the benchmark venv, .bench-venv/
    .bench-venv/bin/python benchmarks/models.py [--repeat 10] [--aicore] [--tuned 400]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from timing import MIN_BLOCK, side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.frontend.models import bert_layer, resnet18  # noqa: E402


def weights(model) -> dict[str, np.ndarray]:
    return {init.name: np.array(numpy_helper.to_array(init)) for init in model.graph.initializer}  # writable


def torch_resnet18(model):
    """ResNet-18 in torch eager with the ONNX model's weights (the same graph as ptowsp/frontend/models.py)."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    w = {k: torch.from_numpy(v) for k, v in weights(model).items()}

    def conv_bn(x, name, stride, pad):
        y = F.conv2d(x, w[f"{name}_w"], stride=stride, padding=pad)
        return F.batch_norm(y, w[f"{name}_m"], w[f"{name}_v"], w[f"{name}_g"], w[f"{name}_b"], eps=1e-5)

    def run(x):
        with torch.no_grad():
            y = F.max_pool2d(F.relu(conv_bn(x, "stem", 2, 3)), 3, 2, 1)
            channels = w["stem_w"].shape[0]
            for stage in range(4):
                for block in range(2):
                    tag, stride = f"s{stage}b{block}", 2 if block == 0 and stage > 0 else 1
                    a = F.relu(conv_bn(y, f"{tag}a", stride, 1))
                    b = conv_bn(a, f"{tag}b", 1, 1)
                    out = w[f"{tag}a_w"].shape[0]
                    skip = y if stride == 1 and channels == out else conv_bn(y, f"{tag}p", stride, 0)
                    y, channels = F.relu(b + skip), out
            return F.linear(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1), w["fc_w"], w["fc_b"])
    return run


def torch_bert(model, heads: int = 12):
    import torch
    import torch.nn.functional as F  # noqa: N812

    w = {k: torch.from_numpy(v) for k, v in weights(model).items()}

    def run(x):
        with torch.no_grad():
            b, s, h = x.shape
            d = h // heads
            q, k, v = ((x @ w[f"w{n}"] + w[f"b{n}"]).view(b, s, heads, d).transpose(1, 2) for n in "qkv")
            p = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
            c = (p @ v).transpose(1, 2).reshape(b, s, h)
            h1 = F.layer_norm(c @ w["wo"] + w["bo"] + x, (h,), w["g1"], w["be1"], eps=1e-12)
            f = h1 @ w["w1"] + w["b1"]
            g = f * 0.5 * (1.0 + torch.erf(f / 2 ** 0.5))
            return F.layer_norm(g @ w["w2"] + w["b2"] + h1, (h,), w["g2"], w["be2"], eps=1e-12)
    return run


def torch_block(inputs: dict[str, np.ndarray], heads: int, eps: float = 1e-5):
    """The zoo's transformer block (pre-norm, causal attention, exact GELU) in torch, on `inputs`."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    seq, width = t["x"].shape
    hd = width // heads
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()

    def run(x):
        with torch.no_grad():
            a = F.layer_norm(x, (width,), t["ln1_gamma"], t["ln1_beta"], eps)
            q, k, v = ((a @ t[w]).view(seq, heads, hd).transpose(0, 1) for w in ("Wq", "Wk", "Wv"))
            scores = (q @ k.transpose(1, 2)) / hd ** 0.5
            p = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            h = x + (p @ v).transpose(0, 1).reshape(seq, width) @ t["Wo"]
            b = F.layer_norm(h, (width,), t["ln2_gamma"], t["ln2_beta"], eps)
            return h + F.gelu(b @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]

    return run


def transformer_block(repeat: int) -> None:
    """The zoo's transformer block (seq 128, d_model 256, 8 heads, d_ff 1024) beside torch eager and
    torch.compile (issue 31's target: default >= 1.0x torch.compile)."""
    wl = pw.zoo.transformer_block(128, 256, 8, 1024)
    inputs = pw.workloads.random_inputs(wl)
    prog = pw.build(wl, "cpu", workers=2)
    want = pw.reference(wl, **inputs)["y"]
    atol = 1e-4 * float(np.abs(want).max())
    np.testing.assert_allclose(prog.run(**inputs)["y"], want, rtol=1e-3, atol=atol)
    rows = {"ptowsp default (cpu, 2 workers)": lambda: prog.run(**inputs)}
    try:
        import torch

        torch.set_num_threads(2)
        eager = torch_block(inputs, 8)
        x = torch.from_numpy(inputs["x"])
        np.testing.assert_allclose(eager(x).numpy(), want, rtol=1e-3, atol=atol)
        rows["torch eager"] = lambda: eager(x)
        compiled = torch.compile(eager)
        np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-3, atol=atol)
        rows["torch.compile"] = lambda: compiled(x)
    except ImportError:
        print("torch is not installed: its rows are left out")
    seconds = side_by_side(list(rows.values()), repeat, min_block=MIN_BLOCK)
    print(f"\nzoo transformer block (seq 128, d_model 256, 8 heads, d_ff 1024): median of >= {repeat} warm runs (>= {MIN_BLOCK} s) x 3 "
          "alternating blocks; outputs checked against pw.reference")
    print(f"{'contender':42} {'ms':>8} {'ptowsp default vs it':>21}")
    for label, t in zip(rows, seconds, strict=True):
        print(f"{label:42} {t * 1e3:8.3f} {t / seconds[0]:20.2f}x")


def onnxruntime_session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 2
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare(name: str, model, x: np.ndarray, output: str, torch_run, args) -> None:
    repeat, aicore = args.repeat, args.aicore
    start = time.perf_counter()
    wl = pw.frontend.from_onnx(model)
    imported = time.perf_counter() - start
    start = time.perf_counter()
    prog = pw.build(wl, "cpu", workers=2)
    built = time.perf_counter() - start
    session = onnxruntime_session(model)
    want = session.run(None, {"x": x})[0]
    got = prog.run(x=x)[output]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)
    rows = {"ptowsp default (cpu, 2 workers)": lambda: prog.run(x=x)}
    if args.tuned:
        start = time.perf_counter()
        os.makedirs(args.log_dir, exist_ok=True)
        log = os.path.join(args.log_dir, f"{wl.name}.jsonl")
        res = pw.AutoScheduler.search(wl, "cpu", num_trials=args.tuned, log_file=log, seed=0, workers=2,
                                      confirm=2, progress=True)
        tuning = time.perf_counter() - start
        print(f"\n{res}: {tuning:.0f} s of tuning ({res.measure_seconds:.0f} s measuring), log {log}")
        print(res.table())
        res.plot(os.path.join(args.log_dir, f"{wl.name}.png"))
        tuned = pw.build(res.schedule, "cpu", workers=2)
        np.testing.assert_allclose(tuned.run(x=x)[output], want, rtol=1e-3, atol=1e-4 * float(np.abs(want).max()))
        rows[f"ptowsp tuned ({args.tuned} trials, {tuning:.0f} s)"] = lambda: tuned.run(x=x)
    rows["onnxruntime (CPU EP, all optimizations)"] = lambda: session.run(None, {"x": x})
    try:
        import torch

        torch.set_num_threads(2)
        run = torch_run(model)
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), want, rtol=1e-3, atol=1e-4 * scale)
        rows["torch eager"] = lambda: run(torch.from_numpy(x))
    except ImportError:
        print("torch is not installed: its row is left out")
    seconds = side_by_side(list(rows.values()), repeat, min_block=MIN_BLOCK)
    print(f"\n{name}: imported in {imported:.1f} s ({len(wl.tasks)} tasks), built in {built:.1f} s; median of "
          f">= {repeat} warm runs (>= {MIN_BLOCK} s) x 3 alternating blocks; outputs checked against onnxruntime")
    best = min(seconds[:2]) if args.tuned else seconds[0]
    print(f"{'contender':42} {'ms':>8} {'ptowsp default vs it':>21}" + (f" {'tuned vs it':>12}" if args.tuned else ""))
    for label, t in zip(rows, seconds, strict=True):
        print(f"{label:42} {t * 1e3:8.2f} {t / seconds[0]:20.2f}x" + (f" {t / best:11.2f}x" if args.tuned else ""))
    if aicore:
        start = time.perf_counter()
        device = pw.build(wl, "aicore")
        device.run(x=x)
        summary = device.trace.summary()
        print(f"aicore (device model): makespan {summary.makespan * 1e3:.3f} ms, cube {summary.classes['cube']:.1%}, "
              f"vector {summary.classes['vector']:.1%} computing; {time.perf_counter() - start:.0f} s of host time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--aicore", action="store_true", help="also run both models on the aicore device model")
    parser.add_argument("--tuned", type=int, default=0, help="tune each model for this many trials first")
    parser.add_argument("--log-dir", default=".", help="where the tuning logs and curves go (resumed from)")
    parser.add_argument("--only", choices=("resnet18", "bert", "block"), default=None, help="one model")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    image, tokens = rng.standard_normal((1, 3, 224, 224)), rng.standard_normal((1, 128, 768))
    if args.only in (None, "resnet18"):
        compare("ResNet-18, batch 1, 3x224x224", resnet18(), image.astype(np.float32), "logits", torch_resnet18, args)
    if args.only in (None, "bert"):
        compare("BERT-base encoder layer, seq 128", bert_layer(), tokens.astype(np.float32), "y", torch_bert, args)
    if args.only in (None, "block"):
        transformer_block(args.repeat)


if __name__ == "__main__":
    main()
