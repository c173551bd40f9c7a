"""Models as PyTorch exports them (benchmarks/export_models.py): import, cold and cached build times, and
each target's output against onnxruntime's.

For every model in the export folder: `pw.frontend.from_onnx` from another working directory, then
`pw.build(wl, "cpu", workers=2)` in a fresh process with an empty kernel cache (cold) and again in
another fresh process over that cache (cached), each the median of `--repeat` processes; then the
outputs of `pw.reference`, `cpu` and `aicore` against onnxruntime's for the input saved beside the
model (`<name>.npz`, written by the export).  Issue 50's targets: cold builds of ResNet-50,
EfficientNet-B0 and ViT-B/16 <= 10 s each on 2 cores, a cached build <= 1 s.

    sh benchmarks/peers.sh && .bench-venv/bin/python benchmarks/export_models.py
    .venv/bin/python benchmarks/exported_models.py [--dir benchmarks/exported] [--only resnet50] [--no-aicore]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

_BUILD = """
import json, sys, time
t0 = time.perf_counter()
import ptowsp as pw
wl = pw.frontend.from_onnx(sys.argv[1])
t1 = time.perf_counter()
pw.build(wl, "cpu", workers=2)
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "build": t2 - t1, "tasks": len(wl.tasks)}))
"""


def build_in_fresh_process(model: Path, cache: str) -> dict:
    env = {**os.environ, "PTOWSP_CACHE_DIR": cache}
    with tempfile.TemporaryDirectory() as elsewhere:  # not the model's folder
        done = subprocess.run([sys.executable, "-c", _BUILD, str(model.resolve())], env=env, cwd=elsewhere,
                              capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{model.name}: the build failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def error_against(got: dict, want: dict) -> float:
    """The largest difference over every output, relative to onnxruntime's largest magnitude."""
    worst = 0.0
    for value, expected in zip(got.values(), want.values(), strict=True):
        scale = max(float(np.abs(expected).max()), 1e-12)
        worst = max(worst, float(np.abs(np.asarray(value, np.float64) - expected).max()) / scale)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=HERE / "exported")
    parser.add_argument("--only", default="")
    parser.add_argument("--repeat", type=int, default=1, help="fresh processes per build time (median)")
    parser.add_argument("--no-aicore", action="store_true")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    import ptowsp as pw

    names = args.only.split(",") if args.only else sorted(p.stem for p in args.dir.glob("*.onnx"))
    rows = []
    for name in names:
        model = args.dir / f"{name}.onnx"
        cold, cached = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cache:
                cold.append(build_in_fresh_process(model, cache))
                cached.append(build_in_fresh_process(model, cache))
        data = np.load(args.dir / f"{name}.npz")
        feeds = {k.split(":", 1)[1]: data[k] for k in data if k.startswith("input:")}
        want = {k.split(":", 1)[1]: data[k] for k in data if k.startswith("output:")}
        wl = pw.frontend.from_onnx(model)
        errors = {"cpu": error_against(pw.build(wl, "cpu", workers=2)(**feeds), want)}
        if not args.no_aicore:
            errors["aicore"] = error_against(pw.build(wl, "aicore")(**feeds), want)
        if not args.no_reference:
            start = time.perf_counter()
            errors["reference"] = error_against(pw.reference(wl, **feeds), want)
            errors["reference s"] = time.perf_counter() - start
        row = {"model": name, "tasks": cold[0]["tasks"],
               "import s": statistics.median(c["import"] for c in cold),
               "cold build s": statistics.median(c["build"] for c in cold),
               "cached build s": statistics.median(c["build"] for c in cached), **errors}
        rows.append(row)
        print(json.dumps(row), flush=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    print("\n" + " | ".join(columns))
    for row in rows:
        print(" | ".join(f"{row[c]:.3g}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in columns))


if __name__ == "__main__":
    main()
