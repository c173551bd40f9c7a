"""A trace as a Gantt chart that a person reads without its author.

- One lane per row that did something.  Rows where nothing ran and nothing
  waited (the cpu target's orchestrator row) are named under the axis instead
  of being drawn empty.
- One colour per task.  Its instances, its specialised variants (`y@1`: the
  same task's other kernel) and its load/store stages (thin bars) share the
  colour, so a task reads as one thing.  Colours go out in order of first
  start, so tasks that are neighbours in time differ most.  The control
  threads' work (AICPU schedule, orchestrate) is grey.
- A legend entry for every task, in columns under the chart however many
  there are, then what the other marks mean.  A bar wide enough for it
  carries its task's name.
- Time runs from the run's start to its end, in s, ms or µs by the makespan.
  Start-up (before the first task begins) and wind-down (after the last one
  ends) are shaded: on a short run they can be most of the makespan.
- Waits are hatched grey.

It draws on a `matplotlib.figure.Figure`, never pyplot, so neither importing
ptowsp nor plotting switches the user's matplotlib backend (Jupyter's inline
plots keep working).  It stays readable at 10,000 instances: one
`broken_barh` call per (lane, task, stage).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.colors
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ptowsp.errors import InputError
from ptowsp.runtime.report import task_of, time_unit, writing

if TYPE_CHECKING:
    from ptowsp.runtime.trace import Event, Trace

WAITING, STARTUP, WINDDOWN, STAGE = "waiting", "start-up", "wind-down", "load / store stage"
_CONTROL = ("#4d4d4d", "#8c8c8c", "#b3b3b3")  # greys for the control threads' work
_WAIT_COLOUR = "#e0e0e0"
_PHASE_COLOURS = {STARTUP: ("#fff2b3", "#b38f00"), WINDDOWN: ("#dce8f5", "#4a77a8")}  # fill, edge


def palette(count: int) -> list[tuple[float, ...]]:
    """`count` distinct colours: tab10's strong ones, tab20's light ones, tab20b's dark and light ones,
    then evenly spaced hues.  Greys are left out: they mean waiting and control work."""
    strong = [c for k, c in enumerate(matplotlib.colormaps["tab10"].colors) if k != 7]
    light = [c for k, c in enumerate(matplotlib.colormaps["tab20"].colors) if k % 2 and k != 15]
    tab20b = matplotlib.colormaps["tab20b"].colors
    colours = [*strong, *light, *tab20b[0::4], *tab20b[2::4]]
    golden = 0.618033988749895
    extra = [matplotlib.colors.hsv_to_rgb(((k * golden) % 1.0, 0.55 + 0.3 * (k % 2), 0.85 - 0.25 * (k % 3 == 2)))
             for k in range(max(0, count - len(colours)))]
    return [tuple(c) for c in (colours + [tuple(x) for x in extra])[:count]]


def figure(trace: Trace, *, width: float = 14.0, dpi: int = 120, waits: bool = True) -> Figure:
    """The chart as a Figure (not attached to pyplot: save it, or show it in a notebook cell)."""
    lanes = len(trace.workers) if trace.lanes is None else trace.lanes
    shown = _rows_shown(trace, waits)
    row_of = {row: k for k, row in enumerate(shown)}
    makespan = trace.duration or max((e.end for e in trace.events), default=0.0) or 1.0
    scale, unit = time_unit(makespan, micro="µs")
    task_events = [e for e in trace.events if e.worker < lanes]
    tasks, colour, controls = _colours(trace, lanes, task_events)
    phases = _phases(task_events, makespan)
    waited = [w for w in trace.waits if w.worker in row_of] if waits else []
    handles = _legend(colour, controls, any(task_of(e.name)[1] for e in task_events), bool(waited), phases)
    # legend columns as wide as the longest entry allows (about 5 points a character, 30 for the patch)
    ncol = max(1, min(len(handles), int(width * 72 // (5.0 * max(len(h.get_label()) for h in handles) + 30))))
    lane_height = max(0.14, min(0.45, 10.0 / max(1, len(shown))))
    height = 1.4 + lane_height * len(shown) + 0.24 * math.ceil(len(handles) / ncol)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()

    for phase, (begin, end) in phases.items():
        face, edge = _PHASE_COLOURS[phase]
        ax.axvspan(begin / scale, end / scale, facecolor=face, edgecolor="none", zorder=0)
        ax.axvline((end if phase == STARTUP else begin) / scale, color=edge, linewidth=0.8, linestyle="--", zorder=1)
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for w in waited:
        spans[row_of[w.worker]].append((w.start / scale, max((w.end - w.start) / scale, 1e-9)))
    for row, xs in spans.items():
        ax.broken_barh(xs, (row - 0.3, 0.6), facecolors=_WAIT_COLOUR, edgecolor="#b0b0b0", linewidth=0,
                       hatch="///", zorder=2)
    _draw_bars(ax, trace.events, row_of, lanes, colour, controls, scale)
    _label_bars(ax, task_events, row_of, colour, scale, makespan / scale, width)

    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([_lane_name(trace, row) for row in shown],
                       fontsize=min(10.0, max(6.0, lane_height * 72 * 0.6)))
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, makespan / scale)
    hidden = [_lane_name(trace, row) for row in range(len(trace.workers)) if row not in row_of]
    clock = ", device clock" if trace.clock == "device" else ""
    ax.set_xlabel(f"time since the run's start ({unit}{clock})"
                  + (f"\nnot drawn, nothing ran or waited there: {_listed(hidden)}" if hidden else ""))
    ax.set_title(_title(trace, len(tasks), makespan))
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize="small", frameon=False)
    return fig


def _listed(names: list[str], most: int = 6) -> str:
    """A few lane names in full; more as how many, from the first to the last (one line under the
    axis: a device's 50 idle cores by name ran off both edges of the figure)."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{len(names)} lanes, {names[0]} to {names[-1]}"


def _colours(trace: Trace, lanes: int, task_events: list[Event]) -> tuple[list[str], dict, dict]:
    """The tasks in order of first start, a colour for each, and a grey for each control-thread activity."""
    first_start: dict[str, float] = {}
    for e in task_events:
        task = task_of(e.name)[0]
        first_start[task] = min(first_start.get(task, math.inf), e.start)
    tasks = sorted(first_start, key=lambda t: (first_start[t], t))
    names = sorted({e.name for e in trace.events if e.worker >= lanes})
    return tasks, dict(zip(tasks, palette(len(tasks)))), {n: _CONTROL[k % len(_CONTROL)] for k, n in enumerate(names)}


def _legend(colour: dict, controls: dict, staged: bool, waited: bool, phases: dict) -> list:
    """An entry per task, then what the other marks mean: stages, control work, waiting, phases."""
    handles: list = [Patch(facecolor=c, label=task) for task, c in colour.items()]
    if staged:
        handles.append(Line2D([], [], color="#555555", linewidth=3, label=STAGE))
    handles += [Patch(facecolor=c, label=f"{name} (control thread)") for name, c in controls.items()]
    if waited:
        handles.append(Patch(facecolor=_WAIT_COLOUR, edgecolor="#b0b0b0", hatch="///", label=WAITING))
    for phase, (begin, end) in phases.items():
        face, edge = _PHASE_COLOURS[phase]
        when = "before the first task" if phase == STARTUP else "after the last task"
        handles.append(Patch(facecolor=face, edgecolor=edge, label=f"{phase}: {_seconds(end - begin)} {when}"))
    return handles


def plot(trace: Trace, path: Path, **options) -> Path:
    """Write `figure(trace, **options)` to `path` (".png" added when it has no suffix)."""
    if not path.suffix:  # matplotlib would add ".png" itself, and the path returned would not exist
        path = path.with_name(path.name + ".png")
    fig = figure(trace, **options)
    with writing(path, "plot"):
        try:
            fig.savefig(path)
        except ValueError as e:  # matplotlib: a suffix it has no writer for
            raise InputError(f"trace.plot: cannot write {str(path)!r}: {e}") from e
    return path


def _phases(task_events: list[Event], makespan: float) -> dict[str, tuple[float, float]]:
    """Start-up (the run's start to the first task's) and wind-down (the last task's end to the run's
    end), each when longer than a thousandth of the run."""
    if not task_events:
        return {}
    spans = {STARTUP: (0.0, min(e.start for e in task_events)), WINDDOWN: (max(e.end for e in task_events), makespan)}
    return {phase: (a, b) for phase, (a, b) in spans.items() if b - a > 1e-3 * makespan}


def _seconds(seconds: float) -> str:
    scale, unit = time_unit(seconds, micro="µs")
    return f"{seconds / scale:.3g} {unit}"


def _rows_shown(trace: Trace, waits: bool) -> list[int]:
    """Rows where something ran (or waited, when waits are drawn), in the trace's order."""
    used = {e.worker for e in trace.events} | ({w.worker for w in trace.waits} if waits else set())
    return [row for row in range(len(trace.workers)) if row in used]


def _lane_name(trace: Trace, row: int) -> str:
    name, core = trace.workers[row]
    return name if core is None else f"{name} ({core})"


def _title(trace: Trace, tasks: int, makespan: float) -> str:
    instances = sum(e.id >= 0 for e in trace.events)
    run = {None: "", True: ", cold run (the first after build)", False: ", warm run"}[trace.cold]
    counts = f"{instances} instances of {tasks} task{'s' * (tasks != 1)}" if instances else f"{tasks} tasks"
    summary = trace.summary() if trace.clock == "device" else None
    bound = f", bound by the {summary.bound} ({summary.bounds[summary.bound]:.0%} busy)" if summary and summary.bound else ""
    return f"{trace.title}: {counts}, makespan {_seconds(makespan)}{run}{bound}"


def _draw_bars(ax, events: list[Event], row_of: dict[int, int], lanes: int, colour: dict, controls: dict,
               scale: float) -> None:
    """One broken_barh per (lane, task, stage): a stage is a thin bar of its task's colour."""
    bars: dict[tuple[int, object, bool], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        task, stage = task_of(e.name)
        fill = colour[task] if e.worker < lanes else controls[e.name]
        thin = stage is not None and e.worker < lanes
        bars[(row_of[e.worker], fill, thin)].append((e.start / scale, max(e.duration / scale, 1e-9)))
    for (row, fill, thin), xs in bars.items():
        height = 0.3 if thin else 0.8
        ax.broken_barh(xs, (row - height / 2, height), facecolors=fill, edgecolor="none", zorder=3)


def _label_bars(ax, events: list[Event], row_of: dict[int, int], colour: dict, scale: float, span: float,
                width: float) -> None:
    """Each task's name on its longest bar, when the name fits in it (about 6 points a character)."""
    longest: dict[str, Event] = {}
    for e in events:
        task, stage = task_of(e.name)
        if stage is None and (task not in longest or e.duration > longest[task].duration):
            longest[task] = e
    points_per_unit = (width - 2.5) * 72 / span  # the axes are about the figure's width less the lane names
    for task, e in longest.items():
        if e.duration / scale * points_per_unit >= 6.0 * len(task) + 6:
            r, g, b = matplotlib.colors.to_rgb(colour[task])
            ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text((e.start + e.end) / 2 / scale, row_of[e.worker], task, ha="center", va="center",
                    fontsize="x-small", color=ink, clip_on=True, zorder=4)
