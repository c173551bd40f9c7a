"""Where one model's time goes: ptowsp's kernels beside onnxruntime's nodes, grouped by operator kind.

    sh benchmarks/peers.sh && .bench-venv/bin/python benchmarks/export_models.py
    .bench-venv/bin/python benchmarks/breakdown.py benchmarks/exported/mobilenet_v2.onnx [--rounds 5 --runs 10]

ptowsp builds the model with the default schedule on cpu (2 workers); onnxruntime runs it with its
CPU provider, every graph optimization, 2 intra-op threads and its own profiler on
(`SessionOptions.enable_profiling`).  Both run in alternating blocks in this process
(ptowsp.timing.rotating_blocks), and every run's time is split:

- ptowsp: each task instance's time from the run's trace, summed per kernel and divided by the
  workers (a kernel's share of the run's wall time when both workers are busy with it); what is
  left of the run's wall time is "idle and overhead" (dependency waits, dispatch).
- onnxruntime: each node's kernel time from its profile (its node events `<name>_kernel_time`),
  which are wall times of the node on both threads, filed by its operator and input shapes (its
  node names are its own after its fusions); what is left is its executor's overhead.

Each kernel or node is filed under the kind of the ONNX operator it computes (`kind_of`): a ptowsp
kernel under the heaviest node it holds (a Clip whose convolution was computed inside it is a
convolution), a kernel that only moves values (padding, a change to or from the channel-blocked
layout, a transpose, packed panels) and onnxruntime's reorders under "layout".  The figures are medians over runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.te import Expr, Op  # noqa: E402
from ptowsp.timing import rotating_blocks  # noqa: E402

WORKERS = 2
# the kind of a kernel that holds several nodes is the first of these it holds
WEIGHT = ["dense conv", "depthwise conv", "grouped conv", "pointwise conv", "squeeze-excite", "matmul", "softmax",
          "layernorm", "pooling", "elementwise", "quantize", "layout", "other"]
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf",
                "Gelu", "Sqrt", "Pow", "Exp", "Neg", "Where", "Max", "Min", "Cast", "BatchNormalization", "Mish"}
_LAYOUT = {"Reshape", "Transpose", "Flatten", "Concat", "Split", "Slice", "Gather", "Squeeze", "Unsqueeze",
           "Expand", "Identity", "Pad"}


def kind_of(op: str, inputs: list[list | None]) -> str:
    """The kind of one operator (an ONNX node or an onnxruntime kernel) from its type and its inputs' shapes."""
    if op in ("Conv", "FusedConv", "NchwcConv", "QLinearConv", "ConvInteger"):
        padded = [*inputs, None, None, None, None]
        x, w = padded[0] or [], padded[3 if op == "QLinearConv" else 1] or []
        if len(x) == 4 and x[2:] == [1, 1]:
            return "squeeze-excite"  # a convolution of a pooled 1 x 1 map: the excite step's tiny matmuls
        if len(x) == 4 and len(w) == 4 and w[1] != x[1]:  # grouped: each output sees x[1] / groups channels
            return "depthwise conv" if w[1] == 1 else "grouped conv"
        return "pointwise conv" if len(w) == 4 and w[2:] == [1, 1] else "dense conv"
    if op in ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "QLinearMatMul", "MatMulInteger", "QGemm"):
        return "matmul"
    if op == "Softmax":
        return "softmax"
    if op in ("LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"):
        return "layernorm"
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean"):
        return "pooling"
    if op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"):
        return "quantize"
    if op in _LAYOUT or op.startswith("Reorder"):
        return "layout"
    return "elementwise" if op in _ELEMENTWISE else "other"


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


class Graph:
    """The model's nodes by (identifier-safe) name, each node's kind, and its producers."""

    def __init__(self, path: Path):
        model = onnx.load(str(path), load_external_data=False)
        inferred = onnx.shape_inference.infer_shapes(model)
        shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
                  for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
        shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
        self.nodes = {_identifier(n.name or n.output[0]): n for n in model.graph.node}
        self.kinds = {name: kind_of(n.op_type, [shapes.get(i) for i in n.input]) for name, n in self.nodes.items()}
        made_by = {out: name for name, n in self.nodes.items() for out in n.output}
        self.producers = {name: [made_by[i] for i in n.input if i in made_by] for name, n in self.nodes.items()}
        # the importer names a task after its node or its output: either leads a kernel's name
        self._aliases = {_identifier(out): name for name, n in self.nodes.items() for out in n.output}
        self._aliases.update({name: name for name in self.nodes})
        self._by_length = sorted(self._aliases, key=len, reverse=True)  # the longest that fits wins

    def owner(self, label: str) -> tuple[str | None, str]:
        """(the node a kernel belongs to, the rest of its name)."""
        for alias in self._by_length:
            if label == alias or label.startswith(alias + "_"):
                return self._aliases[alias], label[len(alias):]
        return None, label

    def kernel_kinds(self, wl: pw.Workload, kernels: set[str]) -> dict[str, str]:
        """Each ptowsp kernel's kind: the heaviest of its own node and the producers computed inside it
        (nodes with no kernel of their own, transitively); "layout" for one that only moves values (a
        layout change a pass added: padding, channel blocking and unblocking, transposes, panels) and
        computes no node inside it (a convolution's padding that holds its producer is that producer's).
        `wl`: the workload the kernels compute (the program's, after the cpu's passes)."""
        owners = {label: self.owner(label) for label in kernels}
        layout = {label for label in kernels
                  if label in wl.tasks and hasattr(wl.task(label), "body") and moves_only(wl.task(label).value)}
        # a node whose only kernels move values (a convolution's padding) is computed inside another kernel
        stored = {node for label, (node, _) in owners.items() if label not in layout}
        kinds = {}
        for label, (node, _) in owners.items():
            if node is None:
                kinds[label] = "layout" if label in layout else "other"
                continue
            held, todo = {node}, [node]
            while todo:
                for producer in self.producers[todo.pop()]:
                    if producer not in held and producer not in stored:
                        held.add(producer)
                        todo.append(producer)
            if label in layout:  # a padding kernel holds its reader's node only by name: what it computes
                held.discard(node)  # inside (a convolution computed at it, a requantization) is its kind
                held = {n for n in held if self.kinds[n] not in ("layout", "other")}
            kinds[label] = min((self.kinds[n] for n in held), key=WEIGHT.index) if held else "layout"
        return kinds


def moves_only(value: Expr) -> bool:
    """Whether an expression only moves values: loads (at any index), constants, casts, and selections
    whose conditions test indices (padding)."""
    if value.op in (Op.LOAD, Op.CONST):
        return True
    if value.op is Op.CAST:
        return moves_only(value.src[0])
    if value.op is Op.WHERE:
        return moves_only(value.src[1]) and moves_only(value.src[2])
    return False


def ptowsp_split(prog, kinds: dict[str, str], by_kernel: dict[str, list[float]]) -> dict[str, float]:
    """The last run's seconds by kind (task time / workers), and its idle time and overhead; each kernel's
    seconds appended to `by_kernel`."""
    by_kind: dict[str, float] = defaultdict(float)
    run: dict[str, float] = defaultdict(float)
    for event in prog.trace.events:
        if event.id >= 0:
            run[event.name] += event.duration / WORKERS
    for label, seconds in run.items():
        by_kind[kinds.get(label, "other")] += seconds
        by_kernel.setdefault(label, []).append(seconds)
    by_kind["idle and overhead"] = prog.trace.duration - sum(by_kind.values())
    by_kind["total"] = prog.trace.duration
    return by_kind


def onnxruntime_split(profile: Path, skip: int) -> list[dict[str, float]]:
    """Each profiled run's seconds by kind, after the first `skip` runs."""
    events = json.loads(profile.read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[skip:]
    nodes = sorted((e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")),
                   key=lambda e: e["ts"])
    out, k = [], 0
    for run in runs:
        by_kind: dict[str, float] = defaultdict(float)
        end = run["ts"] + run["dur"]
        while k < len(nodes) and nodes[k]["ts"] < run["ts"]:
            k += 1
        while k < len(nodes) and nodes[k]["ts"] < end:
            args = nodes[k].get("args", {})
            shapes = [next(iter(t.values()), None) for t in args.get("input_type_shape", [])]
            kind = kind_of(args.get("op_name", ""), shapes)
            by_kind[kind] += nodes[k]["dur"] * 1e-6
            k += 1
        by_kind["idle and overhead"] = run["dur"] * 1e-6 - sum(by_kind.values())
        by_kind["total"] = run["dur"] * 1e-6
        out.append(by_kind)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=12, help="list this many of ptowsp's slowest kernels")
    args = parser.parse_args()
    import onnxruntime

    graph = Graph(args.model)
    wl = pw.frontend.from_onnx(args.model)
    feeds = {t: np.random.default_rng(0).standard_normal(wl.tensor(t).shape).astype(wl.tensor(t).dtype)
             for t in wl.inputs}
    prog = pw.build(wl, "cpu", workers=WORKERS)
    kinds = graph.kernel_kinds(prog.program.schedule.workload, set(prog.program.kernels))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = WORKERS
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(os.environ.get("TMPDIR", "/tmp")) / "ptowsp-breakdown")
    session = onnxruntime.InferenceSession(str(args.model), options, providers=["CPUExecutionProvider"])
    ort_feeds = {i.name: feeds[_identifier(i.name)] for i in session.get_inputs()}
    ours_out, theirs_out = prog(**feeds), session.run(None, ort_feeds)
    worst = max(float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-12))
                for a, b in zip(ours_out.values(), theirs_out, strict=True))
    ours: list[dict[str, float]] = []
    by_kernel: dict[str, list[float]] = {}
    rotating_blocks([lambda: (prog(**feeds), ours.append(ptowsp_split(prog, kinds, by_kernel))),
                     lambda: session.run(None, ort_feeds)], args.rounds, args.runs)
    theirs = onnxruntime_split(Path(session.end_profiling()), skip=2)  # the check's run and the warm-up

    rows = [k for k in [*WEIGHT, "idle and overhead", "total"] if any(k in r for r in (*ours, *theirs))]
    print(f"{args.model.name}: ptowsp default (cpu, {WORKERS} workers) beside onnxruntime {onnxruntime.__version__} "
          f"(CPU, all optimizations, {WORKERS} threads, profiling on); outputs agree to {worst:.1e}; medians of "
          f"{len(ours)} and {len(theirs)} runs, ms")
    print(f"{'kind':<18} {'ptowsp':>8} {'onnxruntime':>12} {'ptowsp / ort time':>18}")
    for kind in rows:
        a = statistics.median(r.get(kind, 0.0) for r in ours) * 1e3
        b = statistics.median(r.get(kind, 0.0) for r in theirs) * 1e3
        ratio = f"{a / b:.2f}x" if b > 0.005 else "-"
        print(f"{kind:<18} {a:>8.2f} {b:>12.2f} {ratio:>18}")
    top = sorted(by_kernel, key=lambda k: -statistics.median(by_kernel[k]))[:args.top]
    print(f"\nptowsp's {len(top)} slowest kernels (ms, task time / workers):")
    for label in top:
        print(f"  {statistics.median(by_kernel[label]) * 1e3:6.2f}  {kinds.get(label, 'other'):<16} {label}")


if __name__ == "__main__":
    main()
