"""Every exported model's speed: ptowsp's default schedule beside onnxruntime and torch eager, in one process.

    sh benchmarks/peers.sh && .bench-venv/bin/python benchmarks/export_models.py
    .bench-venv/bin/python benchmarks/exported_speed.py [--dir benchmarks/exported] [--only resnet18,vit_b_16]
        [--levels host,x86-64-v3] [--rounds 5] [--repeat 5] [--tuned 64 --log-dir tuning]
    .bench-venv/bin/python benchmarks/avx2_peers.py benchmarks/exported_speed.py --levels x86-64-v3   # all AVX2

For each model of the export folder (benchmarks/export_models.py: torchvision classifiers, ViT-B/16, a
BERT-base encoder, a GPT-2 style block, ResNet-50 int8), on the input saved beside it:

- ptowsp: `pw.frontend.from_onnx`, then `pw.build(wl, "cpu", workers=2)` once per CPU level in
  `--levels` (`host`: this machine's widest vectors; `x86-64-v3`: AVX2 and FMA, as on a machine
  without AVX-512; set through PTOWSP_CPU for each build, so both programs live in this process);
- onnxruntime: CPU provider, every graph optimization, 2 intra-op threads (on this machine's ISA:
  its kernels pick the widest vectors the CPU has, whichever ptowsp level is beside it; run the
  script under benchmarks/avx2_peers.py to put onnxruntime and torch on their AVX2 kernels);
- torch eager: the exported module rebuilt from the same seed (`export_models.make`), 2 threads,
  under `torch.inference_mode()` (not for the int8 model, which onnxruntime quantized).

With `--tuned N`, each model is first tuned on this machine's level (`AutoScheduler.search`, a
whole-model search: N trials per tuning task, autoschedule/model_search.py; logged to `--log-dir`
and resumed from there) and the tuned program joins the sides as one more column.

Every output is checked against onnxruntime's first.  The times are medians of `--repeat` warm runs
per block over `--rounds` blocks that alternate between the sides (ptowsp.timing.side_by_side); the
ratio is onnxruntime's time over ptowsp's (above 1: ptowsp is faster).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from export_models import make  # noqa: E402 - (before torch: importing torch drops this folder from sys.path)
from timing import MIN_BLOCK, side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402

HERE = Path(__file__).resolve().parent
THREADS = 2
NO_TORCH = {"resnet50_int8"}  # onnxruntime's quantization: no torch module computes it


def _ort_session(model: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def _torch_runner(name: str, feeds: dict[str, np.ndarray]):
    """The module export_models.py exported, rebuilt from its seed, run on the same input."""
    import torch

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    module, _ = make(name, tiny=False)
    module.eval()
    args = [torch.from_numpy(np.ascontiguousarray(v)) for v in feeds.values()]

    def run():
        with torch.inference_mode():
            return module(*args)

    return run


def _build(wl: pw.Workload, level: str):
    previous = os.environ.get("PTOWSP_CPU")
    os.environ["PTOWSP_CPU"] = level
    try:
        return pw.build(wl, "cpu", workers=THREADS)
    finally:
        if previous is None:
            os.environ.pop("PTOWSP_CPU", None)
        else:
            os.environ["PTOWSP_CPU"] = previous


def _tuned(name: str, wl: pw.Workload, trials_per_task: int, log_dir: Path):
    """`wl` tuned on this machine's level for `trials_per_task` trials per tuning task."""
    from ptowsp.autoschedule.tasks import extract
    from ptowsp.backends import backend

    cpu = backend("cpu")
    tasks = extract(cpu.default_workload(wl), vector_bytes=cpu.vector_bytes, workers=THREADS)
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    log = log_dir / f"{name}.jsonl"
    result = pw.AutoScheduler.search(wl, "cpu", num_trials=trials_per_task * len(tasks), split=True, seed=0,
                                     workers=THREADS, log_file=log)
    print(f"{name}: {len(tasks)} tuning tasks, {trials_per_task * len(tasks)} trials, "
          f"{time.perf_counter() - start:.0f} s; {result}", flush=True)
    return pw.build(pw.autoschedule.best(log, wl, "cpu"), "cpu", workers=THREADS)  # the log's fastest end to end


def _error(got: dict[str, np.ndarray], want: list[np.ndarray], names: list[str]) -> float:
    return max(float(np.max(np.abs(got[n].astype(np.float64) - w) / (np.max(np.abs(w)) + 1e-30)))
               for n, w in zip(names, want, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=HERE / "exported")
    parser.add_argument("--only", default="", help="comma-separated model names (default: every one)")
    parser.add_argument("--levels", default="host,x86-64-v3", help="PTOWSP_CPU levels to build ptowsp for")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--tuned", type=int, default=0, help="tune each model first: this many trials per task")
    parser.add_argument("--log-dir", type=Path, default=Path("tuning"), help="tuning logs (resumed from)")
    args = parser.parse_args()
    levels = args.levels.split(",")
    names = args.only.split(",") if args.only else sorted(p.stem for p in args.dir.glob("*.onnx"))
    rows = []
    for name in names:
        model = args.dir / f"{name}.onnx"
        data = np.load(args.dir / f"{name}.npz")
        feeds = {k.split(":", 1)[1]: data[k] for k in data if k.startswith("input:")}
        session = _ort_session(model)
        outputs = [o.name for o in session.get_outputs()]
        want = session.run(None, feeds)
        wl = pw.frontend.from_onnx(model)
        programs = {level: _build(wl, level) for level in levels}
        if args.tuned:
            programs["tuned"] = _tuned(name, wl, args.tuned, args.log_dir)
        errors = [_error(p(**feeds), want, outputs) for p in programs.values()]
        sides = [lambda p=p: p(**feeds) for p in programs.values()] + [lambda: session.run(None, feeds)]
        if not args.no_torch and name not in NO_TORCH:
            sides.append(_torch_runner(name, feeds))
        seconds = side_by_side(sides, args.repeat, rounds=args.rounds, min_block=MIN_BLOCK)
        ours, ort = seconds[:len(programs)], seconds[len(programs)]
        torch_ms = f"{seconds[-1] * 1e3:.2f}" if len(seconds) > len(programs) + 1 else "-"
        row = [name, *(f"{s * 1e3:.2f}" for s in ours), f"{ort * 1e3:.2f}", torch_ms,
               *(f"{ort / s:.2f}x" for s in ours), f"{max(errors):.1e}"]
        rows.append(row)
        print(" | ".join(row), flush=True)
    columns = levels + (["tuned"] if args.tuned else [])
    header = ["model", *(f"ptowsp {lv} ms" for lv in columns), "onnxruntime ms", "torch eager ms",
              *(f"onnxruntime / ptowsp {lv}" for lv in columns), "error vs onnxruntime"]
    print(f"\npeers' ISA: {os.environ.get('PTOWSP_PEERS_ISA', 'this machine')}")
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
