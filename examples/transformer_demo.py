"""`make demo`: a transformer block written once, compiled by ptowsp, timed beside numpy and torch.

The block (layernorm -> causal multi-head attention -> residual -> layernorm
-> GELU MLP -> residual) comes from the zoo as a ptowsp workload: 24 tasks,
each a tensor expression.  The demo

1. builds it for the `cpu` target with the default schedule (`pw.build(wl)`:
   fusion by category, tiling, vector code, a task grid for the CSP runtime),
   and, given `--log FILE`, with the best schedule of that tuning log
   (`pw.autoschedule.best`);
2. times them beside the same block written in plain numpy float32 and, when
   `import torch` works, torch eager on the CPU: the median of warm runs, the
   contenders alternating in blocks so that noise from other processes hits
   all of them alike; every result is checked against `pw.reference`;
3. writes the Chrome trace and Gantt chart of a warm ptowsp run to demo-out/
   and prints the trace's summary.

    .venv/bin/python examples/transformer_demo.py [--rounds 5] [--runs 20] [--out demo-out] [--log FILE]

No tuning log ships with the demo.  The AutoScheduler tunes the block as one
workload (90 knobs); 256 trials (7 minutes on 2 cores) found nothing
measurably faster than the default schedule, which is the search's first
trial.  To compare a search of your own (a log is tied to the workload's
fingerprint, a digest of its definition: the demo says so and skips the row
when the log holds no records of this block):

    .venv/bin/ptowsp tune examples/transformer_demo.py --trials 64 --log tune.jsonl
    .venv/bin/python examples/transformer_demo.py --log tune.jsonl
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ptowsp as pw
from ptowsp.backends import Built
from ptowsp.timing import rotating_blocks

SIZES = {"seq": 128, "d_model": 256, "heads": 8, "d_ff": 1024}
EPS = 1e-5
RTOL = 1e-4  # relative to the output's largest magnitude: float32 sums of up to 1024 products
BLAS_SPIN_SECONDS = 0.3  # how long OpenBLAS's idle threads spin before they sleep (THREAD_TIMEOUT: 2^28 cycles), and some


@dataclass
class Row:
    """One contender of the table; `seconds` is None when it did not run, and `why` says why."""

    name: str
    what: str
    run: Callable[[], np.ndarray] | None = None
    seconds: float | None = None  # the median of its timed runs
    fastest: float | None = None  # the fastest of them: far below the median when the machine was busy
    error: float | None = None  # max |result - reference| / max(1, max |reference|)
    why: str = ""

    @property
    def ok(self) -> bool | None:
        return None if self.error is None else self.error <= RTOL


# -- the contenders -------------------------------------------------------------------------------
def erf(x: np.ndarray) -> np.ndarray:
    """erf in float32 numpy (which has none): Abramowitz & Stegun 7.1.26, |error| < 1.5e-7."""
    t = 1.0 / (1.0 + np.float32(0.3275911) * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def numpy_block(p: dict[str, np.ndarray], heads: int, eps: float = EPS) -> np.ndarray:
    """The block in plain numpy float32, as one would write it: BLAS matmuls, batched attention."""

    def layernorm(z, gamma, beta):
        mu = z.mean(axis=-1, keepdims=True)
        var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
        return (z - mu) / np.sqrt(var + eps) * gamma + beta

    x = p["x"]
    seq, width = x.shape
    hd = width // heads
    a = layernorm(x, p["ln1_gamma"], p["ln1_beta"])
    q, k, v = ((a @ p[w]).reshape(seq, heads, hd).transpose(1, 0, 2) for w in ("Wq", "Wk", "Wv"))
    scores = (q @ k.transpose(0, 2, 1)) * np.float32(1 / math.sqrt(hd))
    scores = np.where(np.tri(seq, dtype=bool), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    ctx = (probs @ v).transpose(1, 0, 2).reshape(seq, width)
    h = x + ctx @ p["Wo"]
    f = layernorm(h, p["ln2_gamma"], p["ln2_beta"]) @ p["W1"] + p["b1"]
    f = 0.5 * f * (1.0 + erf(f * np.float32(1 / math.sqrt(2))))
    return h + f @ p["W2"] + p["b2"]


def torch_row(p: dict[str, np.ndarray], heads: int, eps: float = EPS) -> Row:
    """torch eager on the CPU, when it is installed (ptowsp never requires it)."""
    try:
        import torch
        import torch.nn.functional as F
    except ModuleNotFoundError:
        return Row("torch eager", "", why="not installed: pip install torch to compare")
    except Exception as e:  # installed but broken (a missing shared library): the table says so
        return Row("torch eager", "", why=f"import torch failed: {type(e).__name__}: {e}")
    t = {name: torch.from_numpy(value) for name, value in p.items()}
    seq, width = p["x"].shape
    hd = width // heads

    def run() -> np.ndarray:
        with torch.inference_mode():
            x = t["x"]
            a = F.layer_norm(x, (width,), t["ln1_gamma"], t["ln1_beta"], eps)
            q, k, v = ((a @ t[w]).view(seq, heads, hd).transpose(0, 1) for w in ("Wq", "Wk", "Wv"))
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(seq, width)
            h = x + ctx @ t["Wo"]
            f = F.gelu(F.layer_norm(h, (width,), t["ln2_gamma"], t["ln2_beta"], eps) @ t["W1"] + t["b1"])
            return (h + f @ t["W2"] + t["b2"]).numpy()

    return Row("torch eager", f"torch {torch.__version__}, {torch.get_num_threads()} threads", run)


def tuned_row(wl: pw.Workload, log: Path | None, inputs: dict[str, np.ndarray],
              workers: int | None) -> tuple[Row, Built | None]:
    """The best schedule in the tuning log, built; a row that says why not when there is none."""
    row = Row("ptowsp tuned", f"pw.autoschedule.best({_shown(log)!r}, wl, 'cpu')" if log else "")
    if log is None:
        row.why = ("none ships with the demo: 256 AutoScheduler trials of the whole block (90 knobs, "
                   "7 min on 2 cores) found nothing measurably faster than the default; --log FILE "
                   "compares a search of your own")
        return row, None
    if not log.is_file():
        row.why = f"no tuning log at {_shown(log)}"
        return row, None
    try:
        schedule = pw.autoschedule.best(log, wl, "cpu")
    except pw.ScheduleError as e:
        row.why = f"the log has no usable records of this definition (a log is tied to the workload's fingerprint): {e}"
        return row, None
    try:
        prog = pw.build(schedule, target="cpu", workers=workers)
    except pw.PtowspError as e:
        row.why = f"the logged schedule no longer builds: {type(e).__name__}: {e}"
        return row, None
    row.run = lambda: prog.run(**inputs)["y"]
    return row, prog


# -- timing and checking --------------------------------------------------------------------------
def time_side_by_side(rows: Sequence[Row], rounds: int, runs: int, warmup: int = 3) -> None:
    """Set each row's `seconds` (the median) and `fastest` over rounds x runs warm runs, the
    contenders in blocks whose order rotates every round (ptowsp.timing.rotating_blocks)."""
    live = [r for r in rows if r.run is not None]
    for row, times in zip(live, rotating_blocks([r.run for r in live], rounds, runs, warmup), strict=True):
        row.seconds, row.fastest = statistics.median(times), min(times)


def check(rows: Sequence[Row], expected: np.ndarray) -> None:
    """Set each row's `error` against the reference's output."""
    scale = max(1.0, float(np.max(np.abs(expected))))
    for row in rows:
        if row.run is not None:
            got = np.asarray(row.run(), dtype=np.float64)
            row.error = float(np.max(np.abs(got - expected))) / scale if got.shape == expected.shape else math.inf


def table(rows: Sequence[Row], baseline: Row) -> str:
    """The side-by-side table: time, speed-up over `baseline`, and the check against pw.reference.
    A contender that did not run gets its reason instead of numbers."""
    header = ("contender", "what runs", "time", f"vs {baseline.name.split()[0]}", "result")
    cells = {}
    for r in rows:
        if r.seconds is not None:
            speedup = f"{baseline.seconds / r.seconds:.2f}x" if baseline.seconds else "-"
            result = f"{'ok' if r.ok else 'MISMATCH'} ({r.error:.0e})"
            cells[r.name] = (r.name, r.what, f"{r.seconds * 1e3:.2f} ms", speedup, result)
    width = [max(len(line[i]) for line in [header, *cells.values()]) for i in range(5)]
    width[0] = max(width[0], *(len(r.name) for r in rows))

    def line(values: Sequence[str]) -> str:
        name, what, took, speedup, result = values
        return f"  {name:<{width[0]}}  {what:<{width[1]}}  {took:>{width[2]}}  {speedup:>{width[3]}}  {result}"

    out = [line(header)]
    for r in rows:
        if r.name in cells:
            out.append(line(cells[r.name]))
        else:
            reason = textwrap.wrap(f"no row: {r.why}", max(40, 100 - width[0]))
            out += [f"  {name:<{width[0]}}  {text}" for name, text in zip([r.name] + [""] * len(reason), reason)]
    return "\n".join(out)


def _shown(path: Path) -> str:
    """The path relative to the working directory when it is below it (shorter in the table)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def make_inputs(wl: pw.Workload, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 inputs with weights scaled by 1/sqrt(fan-in), so activations stay near 1."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name in wl.inputs:
        shape = wl.tensor(name).shape
        scale = 1.0 if name in ("x", "ln1_gamma", "ln2_gamma") else 1.0 / math.sqrt(shape[0])
        inputs[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return inputs


# -- the demo -------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per contender (default 5)")
    parser.add_argument("--runs", type=int, default=20, help="warm runs per block (default 20)")
    parser.add_argument("--workers", type=int, default=None, help="ptowsp worker threads (default: one per core)")
    parser.add_argument("--log", type=Path, default=None, help="a tuning log: adds its best schedule to the table")
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="where the trace goes (default demo-out)")
    args = parser.parse_args(argv)

    if "cpu" not in pw.targets():
        raise SystemExit(f"the demo needs the cpu target; this machine has {', '.join(pw.targets())}")
    wl = pw.zoo.transformer_block(**SIZES, eps=EPS)
    inputs = make_inputs(wl)
    categories = Counter(wl.category(t).value for t in wl.tasks)
    print(f"ptowsp {pw.__version__}: {wl.name} seq={SIZES['seq']} d_model={SIZES['d_model']} "
          f"heads={SIZES['heads']} d_ff={SIZES['d_ff']}, float32")
    print(f"  {len(wl.tasks)} tasks: " + ", ".join(f"{n} {c}" for c, n in sorted(categories.items())))

    start = time.perf_counter()
    default = pw.build(wl, target="cpu", workers=args.workers)
    default.run(**inputs)
    workers = len(default.options.workers)
    kernels = len({e.name for e in default.trace.events if e.id >= 0})
    print(f"  default schedule: fused into {kernels} kernels, {default.trace.summary().tasks} task instances "
          f"on {workers} workers; built and run once in {time.perf_counter() - start:.1f} s")

    heads = SIZES["heads"]
    rows = [Row("ptowsp default", f"pw.build(wl, target='cpu'), {workers} workers",
                lambda: default.run(**inputs)["y"])]
    tuned, _ = tuned_row(wl, args.log, inputs, args.workers)
    numpy_row = Row("numpy float32", "numpy_block() in this file: BLAS matmuls, A&S erf",
                    lambda: numpy_block(inputs, heads))
    rows += [tuned, numpy_row, torch_row(inputs, heads)]

    start = time.perf_counter()
    expected = pw.reference(wl, **inputs)["y"].astype(np.float64)
    reference_seconds = time.perf_counter() - start
    check(rows, expected)
    time_side_by_side(rows, args.rounds, args.runs)

    print(f"\ntime: the median of {args.rounds} alternating blocks x {args.runs} warm runs; "
          "vs numpy: higher is faster")
    print(f"result: max |out - pw.reference| / max(1, max |reference|), ok below {RTOL:.0e}")
    print(table(rows, numpy_row))
    noisy = [r for r in rows if r.seconds and r.seconds > 1.5 * r.fastest]
    if noisy:
        warning = (f"NOISY: {', '.join(f'{r.name} {r.fastest * 1e3:.2f} ms at best' for r in noisy)}: other "
                   "processes shared the cores, so the medians and speed-ups above are uncertain")
        print(textwrap.fill(warning, 100, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
    print(f"  pw.reference, the golden model that checks them, is no contender: it evaluates each task as a\n"
          f"  numpy expression over whole tensors, without BLAS ({reference_seconds * 1e3:.0f} ms, once)")

    args.out.mkdir(parents=True, exist_ok=True)
    # OpenBLAS's threads busy-wait for about 0.1 s after numpy's last matmul, on the cores the run's
    # workers are pinned to: the traced runs wait for them to sleep (docs/runtime.md, "The native loop")
    time.sleep(BLAS_SPIN_SECONDS)
    traces = []
    for _ in range(5):  # warm runs: the one of median length is written
        default.run(**inputs)
        traces.append(default.trace)
    trace = sorted(traces, key=lambda t: t.makespan)[len(traces) // 2]
    print(f"\ntrace of a warm run of ptowsp default (the median of {len(traces)} by makespan):")
    print(textwrap.indent(str(trace.summary()), "    "))
    chrome, gantt = trace.to_chrome(args.out / "trace.json"), trace.plot(args.out / "gantt.png")
    print(f"  wrote {chrome} (open in https://ui.perfetto.dev) and {gantt}")
    return rows


if __name__ == "__main__":
    # run as a script, options come from the command line; run by `ptowsp trace` or `ptowsp tune`
    # (which run it as __main__ and then read the program it ran last), the defaults hold
    own = Path(sys.argv[0]).resolve() == Path(__file__).resolve()
    if any(row.ok is False for row in main(sys.argv[1:] if own else [])):
        raise SystemExit("a contender's result does not match pw.reference")
