"""`python -m tests.onnx_backend [--only PATTERN] [--jobs 2] [--show KINDS] [--write-expected]`: the ONNX
backend suite as its test runs it (suite.judge: reference, then cpu and a sample on aicore), in worker
processes; prints each outcome's count per suite and target, and the cases of the kinds asked for."""

from __future__ import annotations

import os

os.environ.setdefault("PTOWSP_ONNX_SUITE", "full")  # every case on every target it runs on, as the expectations need

import argparse  # noqa: E402
import collections  # noqa: E402
import fnmatch  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402

from tests.onnx_backend.suite import cases, judge, operators, peer_passes, reason, write_expected  # noqa: E402
from tests.onnx_backend.table import write_table  # noqa: E402


def _one(name):
    return name, judge(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="*", help="fnmatch patterns of case names, comma-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--show", default="wrong,crashed", help="outcome kinds whose cases to list")
    parser.add_argument("--json", help="write {case: {target: [kind, detail]}} here")
    parser.add_argument("--write-expected", action="store_true", help="rewrite expected.toml from this run")
    args = parser.parse_args()
    names = [n for n in cases() if any(fnmatch.fnmatch(n, p) for p in args.only.split(","))]
    results = {}
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for name, found in pool.map(_one, names, chunksize=4):
            results[name] = found
    counts = collections.Counter((cases()[n].suite, t, o.kind) for n, f in results.items() for t, o in f.items())
    for suite, target in sorted({(s, t) for s, t, _ in counts}):
        row = {k: c for (s, t, k), c in counts.items() if (s, t) == (suite, target)}
        print(f"{suite:18} {target:10} {sum(row.values()):5} cases: "
              + ", ".join(f"{k} {c}" for k, c in sorted(row.items())))
    _against_the_peer(results)
    show = set(args.show.split(","))
    for name, found in sorted(results.items()):
        for target, o in found.items():
            if o.kind in show:
                print(f"{o.kind:8} {target:9} {name}: {o.detail[:300]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({n: {t: [o.kind, o.detail] for t, o in f_.items()} for n, f_ in results.items()}, f,
                      indent=0, sort_keys=True)
    if args.write_expected:
        if args.only != "*":
            raise SystemExit("--write-expected needs the whole suite (no --only)")
        write_expected({t: {n: reason(f[t]) for n, f in results.items() if t in f and f[t].kind != "pass"}
                        for t in ("reference", "cpu", "aicore")})
        write_table(results)


def _against_the_peer(results) -> None:
    """ptowsp's passes (on every target a case runs on) among the node cases onnxruntime passes:
    per case, and per operator (an operator passes when every such case using it does); then the same
    without the cases the expectation file puts out of scope (strings, sequences, ai.onnx.ml)."""
    peer = peer_passes() & {n for n in results if cases()[n].suite == "node"}
    if not peer:
        return
    ours = {n for n in peer if all(o.kind == "pass" for o in results[n].values())}
    out_of_scope = {n for n in peer - ours if any(reason(o).startswith("out of scope")
                                                   for o in results[n].values() if o.kind != "pass")}
    for label, counted in (("", peer), (f"leaving out the {len(out_of_scope)} out of scope: ", peer - out_of_scope)):
        passed = counted & ours
        print(f"{label}node cases onnxruntime passes: {len(counted)}; ptowsp passes {len(passed)} of them "
              f"({len(passed) / len(counted):.1%})")
        by_op: dict[str, list[bool]] = collections.defaultdict(list)
        for n in counted:
            for o in operators(n):
                by_op[o].append(n in ours)
        whole = sum(all(v) for v in by_op.values())
        print(f"{label}operators in those cases: {len(by_op)}; ptowsp passes every case of {whole} "
              f"({whole / len(by_op):.1%}), at least one of {sum(any(v) for v in by_op.values())}; missing: "
              f"{', '.join(sorted(o for o, v in by_op.items() if not all(v)))}")


if __name__ == "__main__":
    main()
