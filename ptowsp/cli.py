"""The `ptowsp` command.

    ptowsp trace <script.py | zoo-name> [--target cpu] [--workers N] [--tasks N] --out DIR
    ptowsp tune <script.py | zoo-name> [--target cpu] [--trials N] [--log FILE] [--seed S] [--plot PNG]

A zoo name builds that zoo workload at its default size (symbolic sizes bound to 64) with every task split
into `--tasks` row blocks (`Schedule.parallelize`), runs it once on random
inputs and checks it against `pw.reference`.  A script is run as `__main__`;
the program it ran last is traced.  Either way DIR receives trace.json
(Chrome trace-event JSON for Perfetto), gantt.png and summary.txt, and the
summary is printed.

`tune` runs the AutoScheduler on the zoo workload (default size) or on the
workload of the program a script ran last, appending every trial to the log
(and resuming from it), and prints the best schedule beside the default one.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

import ptowsp as pw
from ptowsp.backends.build import Built
from ptowsp.workloads import matches, random_inputs


class CommandError(Exception):
    """What the command line was asked to do cannot be done: printed as one line, exit status 2."""


ZOO_SIZE = 64  # what a zoo workload's symbolic sizes are bound to on the command line


def _zoo(name: str) -> pw.Workload:
    """A zoo workload at its default size, its symbolic sizes (the dynamic ones) bound to ZOO_SIZE."""
    wl = pw.zoo.ZOO[name]()
    return wl.bind(dict.fromkeys(wl.sizes, ZOO_SIZE)) if wl.sizes else wl


def _zoo_run(name: str, target: str, workers: int | None, tasks: int) -> Built:
    wl = _zoo(name)
    inputs = random_inputs(wl)
    prog = pw.build(wl.schedule().parallelize(tasks), target=target, workers=workers)
    out = prog.run(**inputs)
    for key, expected in pw.reference(wl, **inputs).items():
        if not matches(out[key], expected):
            raise CommandError(f"ptowsp trace: {name} output {key!r} differs from the reference on {target}")
    return prog


def _script_run(path: Path) -> Built:
    Built.last_run = None
    sys.argv = [str(path)]
    runpy.run_path(str(path), run_name="__main__")
    if Built.last_run is None:
        raise CommandError(f"ptowsp trace: {path} ran no ptowsp program")
    return Built.last_run


def _is_script(what: str) -> bool:
    """Zoo names win: only a path ending in .py or naming a directory is run as a script, so a file
    that happens to share a zoo workload's name in the current directory is never executed."""
    return what.endswith(".py") or "/" in what or os.sep in what


def _chosen(what: str, command: str) -> Path | str:
    """The script's path or the zoo name `what` names; CommandError with the choices otherwise."""
    if what in pw.zoo.ZOO and not _is_script(what):
        return what
    if _is_script(what):
        path = Path(what)
        if not path.is_file():
            raise CommandError(f"ptowsp {command}: no script {what!r} (a script is named by a path ending in .py)")
        return path
    raise CommandError(f"ptowsp {command}: {what!r} is not a zoo workload ({', '.join(pw.zoo.ZOO)}); "
                       "name a script by a path ending in .py, e.g. ./model.py")


def _workload(what: str) -> pw.Workload:
    chosen = _chosen(what, "tune")
    return _script_run(chosen).workload if isinstance(chosen, Path) else _zoo(chosen)


def tune_command(args: argparse.Namespace) -> int:
    wl = _workload(args.what)
    res = pw.AutoScheduler.search(wl, args.target, num_trials=args.trials, log_file=args.log, seed=args.seed,
                                  workers=args.workers, progress=True)
    default = next((r.seconds for r in res.history if r.trial == 0 and r.seconds is not None), None)
    print(f"{res}; {res.wall_seconds:.1f} s, {res.overhead:.0%} of it outside measurement")
    if default is not None and res.resumed == 0:
        print(f"default schedule {default * 1e3:.3f} ms, tuned {res.best_seconds * 1e3:.3f} ms "
              f"({default / res.best_seconds:.2f}x)")
    print(res.schedule)
    print(f"trials appended to {args.log}; replay with pw.autoschedule.best({args.log!r}, wl, {args.target!r})")
    if args.plot:
        print(f"tuning curve: {res.plot(args.plot)}")
    return 0


def trace_command(args: argparse.Namespace) -> int:
    chosen = _chosen(args.what, "trace")
    prog = _script_run(chosen) if isinstance(chosen, Path) else _zoo_run(chosen, args.target, args.workers, args.tasks)
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


def _command(commands, name: str, purpose: str) -> argparse.ArgumentParser:
    """A subcommand taking a script or zoo workload, a target and a worker count."""
    command = commands.add_parser(name, help=purpose)
    command.add_argument("what", help="a script (.py) or a zoo workload name")
    command.add_argument("--target", default="cpu")
    command.add_argument("--workers", type=int, default=None, help="worker threads (default: one per core)")
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ptowsp", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    trace = _command(commands, "trace", "run a script or a zoo workload and write its trace")
    trace.add_argument("--tasks", type=int, default=8, help="row blocks per task for zoo workloads")
    trace.add_argument("--out", default="ptowsp-trace", help="directory for trace.json, gantt.png, summary.txt")
    tune = _command(commands, "tune", "tune a script's or a zoo workload's schedule with the AutoScheduler")
    tune.add_argument("--trials", type=int, default=64, help="measured trials in all (those in the log count)")
    tune.add_argument("--log", default="tune.jsonl", help="JSON-lines log: appended to, resumed from")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--plot", default=None, help="write the tuning curve (best time vs trial) to this PNG")
    args = parser.parse_args(argv)
    try:
        return tune_command(args) if args.command == "tune" else trace_command(args)
    except CommandError as e:
        print(e, file=sys.stderr)
        return 2
    except pw.PtowspError as e:
        print(f"ptowsp {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
