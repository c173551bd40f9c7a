"""The `ptowsp` command: look at, run, time, trace and tune a workload from the shell.

    ptowsp show  WORKLOAD               the task graph, categories, fusion and default schedule
    ptowsp bench WORKLOAD               the default schedule beside plain numpy, timed side by side
    ptowsp trace WORKLOAD --out DIR     trace.json, gantt.png and summary.txt of a warm run
    ptowsp tune  WORKLOAD --log FILE    the AutoScheduler, resuming from and appending to FILE (an
                                        .onnx model: kernel by kernel, then timed beside onnxruntime;
                                        --cluster ADDRESS: measured on a dask cluster's workers)
    ptowsp run   WORKLOAD               run once checked, then time warm runs (beside onnxruntime
                                        for an .onnx model, when it is installed)
    ptowsp --version

WORKLOAD is a zoo name (built at its default size, symbolic sizes bound to
64), an ONNX model named by a path ending in .onnx (imported, never run as
code; `--shape x=1,3,224,224` binds a symbolic input dimension), or a
script named by a path ending in .py: a script is run as `__main__` and the
program it ran last is the one used.  Zoo names win, so a file that happens
to be called `softmax` is never executed.  A typed
ptowsp error is printed as one line (`ptowsp trace: error: ScheduleError:
...`) with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import sys
from pathlib import Path

import numpy as np

import ptowsp as pw
from ptowsp.autoschedule.model_search import ModelSearchResult
from ptowsp.backends.base import backend
from ptowsp.backends.build import Built
from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.timing import readable_seconds, side_by_side
from ptowsp.workloads import matches, random_inputs


class CommandError(Exception):
    """What the command line was asked to do cannot be done: printed as one line, exit status 2."""


ZOO_SIZE = 64  # what a zoo workload's symbolic sizes are bound to on the command line
MODEL_SIZE = 8  # what an ONNX model's symbolic dimensions left unbound by --shape are, on the command line
CHECK_RTOL = 1e-3  # how far a checked output may be from the reference's (or onnxruntime's), of the largest
QUANTIZED_RTOL = 0.02  # a quantized model's: its values round to steps, and float sums in another order
# (or one fused multiply-add) move a value across a rounding boundary now and then, a step at a time
_QUANTIZING = {"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
               "MatMulInteger"}


def _zoo(name: str) -> pw.Workload:
    """A zoo workload at its default size, its symbolic sizes (the dynamic ones) bound to ZOO_SIZE."""
    wl = pw.zoo.ZOO[name]()
    return wl.bind(dict.fromkeys(wl.sizes, ZOO_SIZE)) if wl.sizes else wl


def _checked(prog: Built, wl: pw.Workload, inputs: dict, command: str, rtol: float = CHECK_RTOL) -> None:
    out = prog.run(**inputs)
    for key, expected in pw.reference(wl, **inputs).items():
        if not matches(out[key], expected, rtol):
            raise CommandError(f"ptowsp {command}: {wl.name} output {key!r} differs from the reference on "
                               f"{prog.target}")


def _zoo_build(chosen: str | Path, args: argparse.Namespace) -> tuple[Built, dict]:
    """The zoo workload or ONNX model built with its default schedule (or parallelize(--tasks)), checked once."""
    wl = _model(chosen, args) if isinstance(chosen, Path) else _zoo(chosen)
    what = wl if getattr(args, "tasks", None) is None else wl.schedule().parallelize(args.tasks)
    prog = pw.build(what, target=args.target, workers=args.workers)
    inputs = random_inputs(wl)
    _checked(prog, wl, inputs, args.command, tolerance(chosen))
    return prog, inputs


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


def _is_model(chosen: object) -> bool:
    return isinstance(chosen, Path) and chosen.suffix == ".onnx"


def tolerance(chosen: object) -> float:
    """The check's relative tolerance for a zoo workload or model: QUANTIZED_RTOL where the model quantizes."""
    if not _is_model(chosen):
        return CHECK_RTOL
    import onnx  # (the frontend's dependency, loaded on first use)

    graph = onnx.load(str(chosen), load_external_data=False).graph  # the nodes only: data, never run
    return QUANTIZED_RTOL if any(n.op_type in _QUANTIZING for n in graph.node) else CHECK_RTOL


def _model(path: Path, args: argparse.Namespace) -> pw.Workload:
    """The ONNX model at `path` as a workload (imported as data), its inputs' shapes bound by --shape."""
    shapes = {}
    for given in getattr(args, "shape", None) or []:
        name, _, dims = given.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise CommandError(f"ptowsp {args.command}: --shape {given!r}: expected NAME=D1,D2,... "
                               "(integers)") from None
    wl = pw.frontend.from_onnx(path, shapes=shapes)
    if wl.sizes:  # the command line runs, tunes and traces one shape: the symbolic dimensions --shape left
        print(f"{path.name}: symbolic dimensions {', '.join(wl.sizes)} bound to {MODEL_SIZE} for this command "
              "(--shape NAME=D1,D2,... chooses them)", file=sys.stderr)
        wl = wl.bind(dict.fromkeys(wl.sizes, MODEL_SIZE))
    return wl


def _chosen(what: str, command: str) -> Path | str:
    """The script's or model's path, or the zoo name `what` names; CommandError with the choices otherwise."""
    if what in pw.zoo.ZOO and not _is_script(what):
        return what
    if what.endswith(".onnx"):
        path = Path(what)
        if not path.is_file():
            raise CommandError(f"ptowsp {command}: no ONNX model {what!r}")
        return path
    if _is_script(what):
        path = Path(what)
        if not path.is_file():
            raise CommandError(f"ptowsp {command}: no script {what!r} (a script is named by a path ending in .py)")
        return path
    raise CommandError(f"ptowsp {command}: {what!r} is not a zoo workload ({', '.join(pw.zoo.ZOO)}); "
                       "name a script by a path ending in .py, e.g. ./model.py")


def _workload(what: str, args: argparse.Namespace) -> pw.Workload:
    chosen = _chosen(what, args.command)
    if _is_model(chosen):
        return _model(chosen, args)
    return _script_run(chosen).workload if isinstance(chosen, Path) else _zoo(chosen)


def tune_command(args: argparse.Namespace) -> int:
    chosen = _chosen(args.what, args.command)
    wl = _workload(args.what, args)
    resources = _resources(args.resources) if args.resources else None
    if resources and not args.cluster:
        raise CommandError("ptowsp tune: --resources choose workers of a cluster: give --cluster ADDRESS too")
    cluster = contextlib.nullcontext() if not args.cluster else \
        pw.autoschedule.DaskRunner(args.cluster, resources, target=args.target, workers=args.workers)
    with cluster as runner:  # with --cluster, the search runs here and the trials on the cluster's workers
        res = pw.AutoScheduler.search(wl, args.target, num_trials=args.trials, log_file=args.log, seed=args.seed,
                                      workers=args.workers, progress=True, runner=runner)
        if runner is not None:
            stats = runner.statistics()
            print(f"measured on the dask cluster at {runner.address}: {stats.trials} measurements on "
                  f"{len(stats.by_worker)} workers, {stats.retried} tried again on another worker")
    if isinstance(res, ModelSearchResult):  # a model tuned kernel by kernel
        print(f"{res}; {res.wall_seconds:.1f} s")
        print(res.table())
    else:
        default = next((r.seconds for r in res.history if r.trial == 0 and r.seconds is not None), None)
        print(f"{res}; {res.wall_seconds:.1f} s, {res.overhead:.0%} of it outside measurement")
        if default is not None and res.resumed == 0:
            print(f"default schedule {default * 1e3:.3f} ms, tuned {res.best_seconds * 1e3:.3f} ms "
                  f"({default / res.best_seconds:.2f}x)")
        print(res.schedule)
    print(f"trials appended to {args.log}; replay with pw.autoschedule.best({args.log!r}, wl, {args.target!r})")
    if args.plot:
        print(f"tuning curve: {res.plot(args.plot)}")
    if _is_model(chosen):  # the model's time, default and tuned, beside onnxruntime's
        inputs = random_inputs(wl)
        default = pw.build(wl, target=args.target, workers=args.workers)
        tuned = pw.build(res.schedule, target=args.target, workers=args.workers)
        _checked(tuned, wl, inputs, args.command)
        _side_by_side({f"ptowsp default ({args.target})": default, f"ptowsp tuned ({args.target})": tuned},
                      chosen, inputs, args)
    return 0


def _resources(text: str) -> dict[str, float]:
    """`--resources "cpu-avx512=1 other=2"` (as `dask worker --resources` takes them; commas work too)."""
    resources = {}
    for item in text.replace(",", " ").split():
        name, _, amount = item.partition("=")
        try:
            resources[name] = float(amount)
        except ValueError:
            raise CommandError(f"ptowsp tune: --resources {text!r}: expected NAME=N pairs, e.g. "
                               "\"cpu-avx512=1\"") from None
    return resources


def trace_command(args: argparse.Namespace) -> int:
    chosen = _chosen(args.what, "trace")
    if isinstance(chosen, Path) and not _is_model(chosen):
        prog = _script_run(chosen)  # the script's own last run: warm if it ran its program before
        trace = prog.trace
    else:
        prog, inputs = _zoo_build(chosen, args)
        traces = []
        for _ in range(args.runs):
            prog.run(**inputs)
            traces.append(prog.trace)
        trace = sorted(traces, key=lambda t: t.makespan)[len(traces) // 2]  # the median run's
    assert trace is not None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = str(trace.summary())
    trace.to_chrome(out / "trace.json")
    trace.plot(out / "gantt.png")
    (out / "summary.txt").write_text(summary + "\n")
    runs = "" if isinstance(chosen, Path) and not _is_model(chosen) else \
        f" (the median of {args.runs} runs after the checking one)"
    print(f"{prog}: {len(trace.events)} events{runs}")
    print(summary)
    print(f"wrote {out / 'trace.json'}, {out / 'gantt.png'}, {out / 'summary.txt'}")
    return 0


def bench_command(args: argparse.Namespace) -> int:
    chosen = _chosen(args.what, "bench")
    if isinstance(chosen, Path) and not _is_model(chosen):
        prog = _script_run(chosen)
        wl = prog.workload
        inputs = random_inputs(wl)
        _checked(prog, wl, inputs, "bench")
    else:
        prog, inputs = _zoo_build(chosen, args)
        wl = prog.workload
    contenders = {f"ptowsp default ({args.target})": lambda: prog.run(**inputs),
                  "numpy (pw.reference)": lambda: pw.reference(wl, **inputs)}
    seconds = side_by_side(list(contenders.values()), repeat=args.runs, rounds=3, min_block=0.05)
    numpy_seconds = seconds[-1]
    print(f"{wl.name} on {args.target}, {len(prog.options.workers)} workers: median of warm runs, "
          "3 alternating blocks; results checked against pw.reference")
    width = max(map(len, contenders))
    print(f"{'':{width}}  {'time':>10}  {'speed-up vs numpy':>17}")
    for name, t in zip(contenders, seconds, strict=True):
        print(f"{name:{width}}  {readable_seconds(t):>10}  {numpy_seconds / t:>16.2f}x")
    return 0


def show_command(args: argparse.Namespace) -> int:
    wl = _workload(args.what, args)
    found = backend(args.target)
    workers = len(found.cores(args.workers, None))
    schedule = default_schedule(found.default_workload(wl), vector_bytes=found.vector_bytes, workers=workers,
                                choose=found.schedule_choices(None), cube=found.cube_tiler(None))
    print("\n".join(_overview(wl, schedule, args.target, workers)))
    print("\ntask graph (producer -> consumers):")
    for task in wl.tasks:
        consumers = sorted(wl.graph.successors(task))
        print(f"  {task} [{wl.category(task).name}] -> {', '.join(consumers) or '(output)'}")
    print(f"\ndefault schedule on {args.target} with {workers} workers:")
    print(schedule)
    if args.verbose:
        print("\nthe workload, constants included:")
        print(wl)
    return 0


def _overview(wl: pw.Workload, schedule: pw.Schedule, target: str, workers: int) -> list[str]:
    """What a person asks of a model first: its inputs and outputs, what it is made of, the kernels it
    becomes and what was folded into them; the constants counted, not listed (--verbose lists them)."""
    def described(name: str) -> str:
        t = wl.tensor(name)
        return f"{name}[{', '.join(map(str, t.shape))}] {t.dtype}"

    weights = sum(a.nbytes for a in wl.constants.values())
    categories: dict[str, int] = {}
    for task in wl.tasks:
        categories[wl.category(task).name] = categories.get(wl.category(task).name, 0) + 1
    lines = [f"workload {wl.name}", *(f"  input {described(n)}" for n in wl.inputs),
             *(f"  output {described(n)}" for n in wl.outputs),
             f"  constants: {len(wl.constants)} ({weights / 2**20:.2f} MiB; --verbose lists them)",
             f"  tasks: {len(wl.tasks)} ({', '.join(f'{n} {k}' for k, n in sorted(categories.items()))})"]
    made = schedule.workload  # the target's graph passes may have rewritten it (blocked convolutions...)
    placed = schedule.compute_at_locations  # task -> (the task it is computed inside, the loop)
    at_build = set(fold.fold_constants(made))  # tasks of constants alone (weight layouts): computed once, at build
    kernels = [t for t in made.tasks if t not in schedule.inlined and t not in placed and t not in at_build]
    lines.append(f"\n{len(kernels)} kernel{'s' * (len(kernels) != 1)} on {target} with {workers} workers (the "
                 f"default schedule; {len(at_build)} more tasks computed at build time from constants):")
    for kernel in kernels:
        inside = [t for t, (consumer, _) in placed.items() if consumer == kernel]
        inside += [t for t in schedule.inlined if kernel in made.graph.successors(t)]
        lines.append(f"  {kernel} [{made.category(kernel).name}]" + (f" <- {', '.join(sorted(inside))}" if inside
                                                                       else ""))
    return lines


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's layout and shows every option's default."""


def _command(commands, name: str, purpose: str, targets: list[str]) -> argparse.ArgumentParser:
    """A subcommand taking a script or zoo workload, a target and a worker count."""
    command = commands.add_parser(name, help=purpose, description=purpose, formatter_class=_HelpFormatter)
    command.add_argument("what", metavar="WORKLOAD",
                         help=f"a zoo workload ({', '.join(pw.zoo.ZOO)}), an ONNX model (a path ending in .onnx) "
                              "or a script named by a path ending in .py")
    command.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                         help="an ONNX model's input shape (binds its symbolic dimensions); repeatable")
    command.add_argument("--target", default="cpu", choices=targets, help="where it runs (pw.targets())")
    command.add_argument("--workers", type=_positive, default=None,
                         help="worker threads; None: one per core")
    return command


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def run_command(args: argparse.Namespace) -> int:
    """Run once checked against pw.reference, then time warm runs; beside onnxruntime for a model."""
    chosen = _chosen(args.what, "run")
    if isinstance(chosen, Path) and not _is_model(chosen):
        raise CommandError("ptowsp run: takes a zoo workload or an .onnx model (a script runs itself: python it)")
    prog, inputs = _zoo_build(chosen, args)
    _side_by_side({f"ptowsp default ({args.target})": prog}, chosen, inputs, args)
    return 0


def _side_by_side(programs: dict[str, Built], chosen: Path | str, inputs: dict, args: argparse.Namespace) -> None:
    """Time the programs (and onnxruntime, for a model) in alternating blocks; print one table."""
    contenders = {name: (lambda p=p: p.run(**inputs)) for name, p in programs.items()}
    first = next(iter(programs.values()))
    checked = "pw.reference"
    session = onnxruntime_session(chosen) if _is_model(chosen) else None
    if session is not None:  # its inputs are the model's, in the order the workload declares them
        feeds = dict(zip((i.name for i in session.get_inputs()), (inputs[n] for n in first.workload.inputs)))
        theirs = session.run(None, feeds)
        checked += f" and onnxruntime ({_against_onnxruntime(first, inputs, theirs, tolerance(chosen))})"
        contenders["onnxruntime (CPU, all graph optimizations)"] = lambda: session.run(None, feeds)
    elif _is_model(chosen):
        print("onnxruntime is not installed: its row is left out and its outputs unchecked "
              "(pip install onnxruntime to compare)")
    seconds = side_by_side(list(contenders.values()), repeat=args.runs, rounds=3, min_block=0.05)
    print(f"{first.workload.name} on {args.target}, {len(first.options.workers)} workers: median of warm runs, "
          f"3 alternating blocks; checked against {checked}")
    width = max(map(len, contenders))
    for name, t in zip(contenders, seconds, strict=True):
        print(f"{name:{width}}  {readable_seconds(t):>10}  {seconds[0] / t:>6.2f}x ptowsp's default")


def _against_onnxruntime(prog: Built, inputs: dict, theirs: list, rtol: float = CHECK_RTOL) -> str:
    """The largest error of ptowsp's outputs against onnxruntime's on the same inputs, relative to the
    largest output; CommandError where one differs by more than `rtol` of it."""
    ours = prog.run(**inputs)
    worst = 0.0
    for name, want in zip(prog.workload.outputs, theirs, strict=True):
        got, want = ours[name].astype(np.float64), np.asarray(want, np.float64).reshape(ours[name].shape)
        scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
        error = float(np.max(np.abs(got - want), initial=0.0)) / scale
        if not error <= rtol:  # (NaN too)
            raise CommandError(f"ptowsp run: output {name!r} differs from onnxruntime's: largest error "
                               f"{error * scale:.3g} against outputs of at most {scale:.3g}")
        worst = max(worst, error)
    return f"largest error {worst:.1e} of the largest output"


def onnxruntime_session(path: Path):
    """An onnxruntime session for the model (2 threads, every graph optimization), or None without it."""
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 2
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


COMMANDS = {"show": show_command, "bench": bench_command, "trace": trace_command, "tune": tune_command,
            "run": run_command}


def parser() -> argparse.ArgumentParser:
    targets = pw.targets()
    top = argparse.ArgumentParser(prog="ptowsp", description=__doc__, formatter_class=_HelpFormatter,
                                  epilog=f"zoo workloads: {', '.join(pw.zoo.ZOO)}\ntargets here: {', '.join(targets)}")
    top.add_argument("--version", action="version", version=f"ptowsp {pw.__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = _command(commands, "show", "print the model, the kernels it becomes, the task graph and the default "
                                      "schedule", targets)
    show.add_argument("--verbose", action="store_true", help="list the constants (weights) too")
    bench = _command(commands, "bench", "time the default schedule beside plain numpy, side by side", targets)
    bench.add_argument("--runs", type=_positive, default=10, help="timed runs per block (3 alternating blocks)")
    trace = _command(commands, "trace", "run a workload warm and write its trace, Gantt chart and summary",
                     targets)
    trace.add_argument("--runs", type=_positive, default=5,
                       help="warm runs after the checking one; the median run's trace is written")
    trace.add_argument("--tasks", type=_positive, default=None,
                       help="schedule zoo workloads with parallelize(TASKS) instead of the default schedule")
    trace.add_argument("--out", default="ptowsp-trace", help="directory for trace.json, gantt.png, summary.txt")
    run = _command(commands, "run", "run a workload or ONNX model checked, then time it (beside onnxruntime)",
                   targets)
    run.add_argument("--runs", type=_positive, default=10, help="timed runs per block (3 alternating blocks)")
    tune = _command(commands, "tune", "tune a workload's schedule with the AutoScheduler", targets)
    tune.add_argument("--trials", type=_positive, default=64, help="measured trials in all (those in the log count)")
    tune.add_argument("--log", default="tune.jsonl", help="JSON-lines log: appended to, resumed from")
    tune.add_argument("--seed", type=int, default=0, help="seed of the search")
    tune.add_argument("--plot", default=None, help="write the tuning curve (best time vs trial) to this PNG")
    tune.add_argument("--runs", type=_positive, default=10,
                      help="an .onnx model: timed runs per block of the default, tuned and onnxruntime")
    tune.add_argument("--cluster", default=None, metavar="ADDRESS",
                      help="measure on the workers of the dask cluster whose scheduler is at ADDRESS "
                           "(pip install 'ptowsp[distributed]'; docs/autoschedule.md)")
    tune.add_argument("--resources", default=None, metavar='"NAME=N ..."',
                      help="with --cluster: use only workers offering these dask resources (dask worker "
                           '--resources "cpu-avx512=1")')
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CommandError as e:
        print(e, file=sys.stderr)
        return 2
    except pw.PtowspError as e:
        print(f"ptowsp {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
