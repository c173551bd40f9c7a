"""ptowsp at two commits side by side: each workload's warm run time and cold build time.

    python benchmarks/commits.py --against <commit> [--rounds 3] [--repeat 10] [--only resnet18,zoo:matmul]

The other commit is checked out with `git worktree add` into a temporary folder (removed at the
end).  Each round runs, for every workload, one process per version in alternating order (the
order rotates every round): the process imports ptowsp from its tree, builds the workload with
the default schedule on cpu with 2 workers into an empty kernel cache (the cold build time), then
times warm runs (median of --repeat) and prints its figures.  The table gives each version's
median over rounds and their ratio; a workload whose two versions disagree in their outputs
(beyond 1e-4 relative) is marked.

Workloads: the zoo's matmul, conv2d, softmax, layernorm, attention, mlp and transformer_block,
and the models benchmarks/export_models.py exported into benchmarks/exported/ (skipped when that
folder is empty).  Used to show a refactoring changes no speed (issue 54); nothing else imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ZOO = ["matmul", "conv2d", "softmax", "layernorm", "attention", "mlp", "transformer_block"]


def child(tree: str, workload: str, repeat: int, outputs: str) -> None:
    """One version's figures for one workload, as a JSON line (run in a fresh process)."""
    sys.path.insert(0, tree)
    os.environ["PTOWSP_CACHE_DIR"] = tempfile.mkdtemp(prefix="ptowsp-commits-")
    import time

    import numpy as np

    import ptowsp as pw
    from ptowsp.workloads import random_inputs, zoo
    assert Path(pw.__file__).resolve().is_relative_to(Path(tree).resolve()), pw.__file__
    if workload.startswith("zoo:"):
        wl = getattr(zoo, workload[4:])()
        inputs = random_inputs(wl)
    else:
        wl = pw.frontend.from_onnx(HERE / "exported" / f"{workload}.onnx")
        data = np.load(HERE / "exported" / f"{workload}.npz")
        inputs = {k.split(":", 1)[1]: data[k] for k in data if k.startswith("input:")}
    start = time.perf_counter()
    prog = pw.build(wl, target="cpu", workers=2)
    build = time.perf_counter() - start
    got = prog(**inputs)
    np.savez(outputs, **{k: np.asarray(v) for k, v in got.items()})
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        prog(**inputs)
        times.append(time.perf_counter() - start)
    print(json.dumps({"build": build, "run": statistics.median(times)}))


def _agree(a: Path, b: Path) -> bool:
    import numpy as np
    x, y = np.load(a), np.load(b)
    return sorted(x) == sorted(y) and all(
        np.allclose(x[k], y[k], rtol=1e-4, atol=1e-4 * max(1.0, float(np.max(np.abs(y[k]), initial=0.0))))
        for k in x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="the commit to compare this tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--only", default="", help="comma-separated workloads (zoo:NAME or an exported model)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tree, workload, repeat, outputs = args.child
        return child(tree, workload, int(repeat), outputs)
    if not args.against:
        parser.error("--against COMMIT is needed")
    workloads = args.only.split(",") if args.only else \
        [f"zoo:{n}" for n in ZOO] + sorted(p.stem for p in (HERE / "exported").glob("*.onnx"))
    scratch = Path(tempfile.mkdtemp(prefix="ptowsp-commits-"))
    other = scratch / "other"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(other), args.against], check=True)
    commit = subprocess.run(["git", "-C", str(other), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    trees = {"this tree": REPO, commit: other}
    figures = {(w, t): [] for w in workloads for t in trees}
    agree: dict[str, bool] = {}
    failed: dict[str, str] = {}
    try:
        for r in range(args.rounds):
            for w in (w for w in workloads if w not in failed):
                order = list(trees) if (r + workloads.index(w)) % 2 == 0 else list(trees)[::-1]
                for t in order:
                    out = scratch / f"{w.replace(':', '_')}-{t.replace(' ', '_')}.npz"
                    done = subprocess.run([sys.executable, __file__, "--child", str(trees[t]), w, str(args.repeat),
                                           str(out)], capture_output=True, text=True)
                    if done.returncode:  # shown and left out of the table
                        failed[w] = f"failed at {t}: {done.stderr.strip().splitlines()[-1]}"
                        print(f"{w} {failed[w]}", flush=True)
                        break
                    figures[w, t].append(json.loads(done.stdout.strip().splitlines()[-1]))
                if w in failed:
                    continue
                agree[w] = _agree(*(scratch / f"{w.replace(':', '_')}-{t.replace(' ', '_')}.npz" for t in trees))
                print(f"round {r + 1}: {w} " + ", ".join(
                    f"{t} {figures[w, t][-1]['run'] * 1e3:.2f} ms / build {figures[w, t][-1]['build']:.2f} s"
                    for t in trees), flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], check=False)
    mine, theirs = trees
    print(f"\n| workload | run ms, this tree | run ms, {theirs} | run {theirs} / this | "
          f"cold build s, this tree | cold build s, {theirs} | outputs agree |\n|" + " --- |" * 7)
    for w in workloads:
        if w in failed:
            print(f"| {w} | {failed[w]} | | | | | |")
            continue
        run = [statistics.median(f["run"] for f in figures[w, t]) for t in trees]
        build = [statistics.median(f["build"] for f in figures[w, t]) for t in trees]
        print(f"| {w} | {run[0] * 1e3:.3f} | {run[1] * 1e3:.3f} | {run[1] / run[0]:.3f}x | {build[0]:.2f} | "
              f"{build[1]:.2f} | {'yes' if agree[w] else 'NO'} |")


if __name__ == "__main__":
    main()
