"""The ONNX backend suite (tests/onnx_backend/suite.py) on onnxruntime: which cases it passes.

    sh benchmarks/peers.sh
    .bench-venv/bin/python benchmarks/onnx_suite_peer.py [--write]

Each case runs on onnxruntime's CPU provider (all graph optimizations) and is judged exactly as
ptowsp's runs are (suite.compare: dtype, shape, values at the case's rtol/atol; float16/bfloat16
within 2 units of the last place count as rounding).  Prints the counts per suite and ptowsp's
passes among the cases onnxruntime passes (the issue's measure, per case and per operator);
`--write` keeps the list of onnxruntime's passes in tests/onnx_backend/onnxruntime_passes.txt,
which `python -m tests.onnx_backend` reads to print the same measure without onnxruntime.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.onnx_backend.suite import PEER_PASSES, cases, compare  # noqa: E402


def _ort(name: str) -> tuple[str, str]:
    import onnxruntime as ort

    case = cases()[name]
    try:
        model, data = case.model_and_data()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for inputs, expected in data:
            got = session.run(None, dict(zip(names, inputs, strict=False)))
            problem = compare(list(got), expected, case.rtol, case.atol)
            if problem:
                return name, "wrong"
    except Exception:  # noqa: BLE001 - onnxruntime refuses or fails in many ways; each is a miss
        return name, "fails"
    return name, "pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"write {PEER_PASSES.relative_to(ROOT)}")
    args = parser.parse_args()
    names = sorted(cases())
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        results = dict(pool.map(_ort, names, chunksize=8))
    counts = collections.Counter((cases()[n].suite, k) for n, k in results.items())
    for suite in sorted({s for s, _ in counts}):
        print(f"{suite:18} " + ", ".join(f"{k} {c}" for (s, k), c in sorted(counts.items()) if s == suite))
    if args.write:
        passed = sorted(n for n, k in results.items() if k == "pass")
        PEER_PASSES.write_text("# the cases of tests/onnx_backend that onnxruntime 1.32 (CPU) passes: "
                               "benchmarks/onnx_suite_peer.py --write\n" + "\n".join(passed) + "\n")


if __name__ == "__main__":
    main()
