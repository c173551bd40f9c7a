"""The `ptowsp` command.

    ptowsp trace <script.py | zoo-name> [--target cpu] [--workers N] [--tasks N] --out DIR

A zoo name builds that zoo workload at its default size with every task split
into `--tasks` row blocks (`Schedule.parallelize`), runs it once on random
inputs and checks it against `pw.reference`.  A script is run as `__main__`;
the program it ran last is traced.  Either way DIR receives trace.json
(Chrome trace-event JSON for Perfetto), gantt.png and summary.txt, and the
summary is printed.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import numpy as np

import ptowsp as pw
from ptowsp.backends.build import Built


def _zoo_run(name: str, target: str, workers: int | None, tasks: int) -> Built:
    wl = pw.zoo.ZOO[name]()
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(wl.tensor(n).dtype) for n in wl.inputs}
    prog = pw.build(wl.schedule().parallelize(tasks), target=target, workers=workers)
    out = prog.run(**inputs)
    for key, expected in pw.reference(wl, **inputs).items():
        if not np.allclose(out[key], expected, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(expected).max()))):
            raise SystemExit(f"ptowsp trace: {name} output {key!r} differs from the reference on {target}")
    return prog


def _script_run(path: Path) -> Built:
    Built.last_run = None
    sys.argv = [str(path)]
    runpy.run_path(str(path), run_name="__main__")
    if Built.last_run is None:
        raise SystemExit(f"ptowsp trace: {path} ran no ptowsp program")
    return Built.last_run


def trace_command(args: argparse.Namespace) -> int:
    what = args.what
    if what.endswith(".py") or Path(what).is_file():
        prog = _script_run(Path(what))
    elif what in pw.zoo.ZOO:
        prog = _zoo_run(what, args.target, args.workers, args.tasks)
    else:
        print(f"ptowsp trace: {what!r} is neither a script nor a zoo workload ({', '.join(pw.zoo.ZOO)})",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = prog.trace
    assert trace is not None
    summary = str(trace.summary())
    trace.to_chrome(out / "trace.json")
    trace.plot(out / "gantt.png")
    (out / "summary.txt").write_text(summary + "\n")
    print(f"{prog}: {len(trace.events)} events")
    print(summary)
    print(f"wrote {out / 'trace.json'}, {out / 'gantt.png'}, {out / 'summary.txt'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ptowsp", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="run a script or a zoo workload and write its trace")
    trace.add_argument("what", help="a script (.py) or a zoo workload name")
    trace.add_argument("--target", default="cpu")
    trace.add_argument("--workers", type=int, default=None, help="worker threads (default: one per core)")
    trace.add_argument("--tasks", type=int, default=8, help="row blocks per task for zoo workloads")
    trace.add_argument("--out", default="ptowsp-trace", help="directory for trace.json, gantt.png, summary.txt")
    args = parser.parse_args(argv)
    return trace_command(args)


if __name__ == "__main__":
    raise SystemExit(main())
