"""A trace as a Gantt chart: one lane per worker, tasks coloured by name, waits hatched grey.

Readable at 10,000 tasks: bars are drawn per (lane, task name) in one
`broken_barh` call each, a lane holds at most one colour per instant, and
the legend lists task names (the busiest twelve when there are more).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ptowsp.errors import InputError  # noqa: E402
from ptowsp.runtime.trace import Trace, writing  # noqa: E402

LEGEND_LIMIT = 12


def plot(trace: Trace, path: Path, *, width: float = 14.0, dpi: int = 120, waits: bool = True) -> Path:
    if not path.suffix:  # matplotlib would add ".png" itself, and the path returned would not exist
        path = path.with_name(path.name + ".png")
    rows = len(trace.workers)
    scale, unit = _unit(trace.duration or max((e.end for e in trace.events), default=1.0))
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    busy: dict[str, float] = defaultdict(float)
    for e in trace.events:
        bars[(e.worker, e.name)].append((e.start / scale, max(e.duration / scale, 1e-9)))
        busy[e.name] += e.duration
    names = sorted(busy, key=lambda n: -busy[n])
    cmap = plt.get_cmap("tab20")
    colour = {name: cmap(k % 20) for k, name in enumerate(names)}

    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.45 * rows), dpi=dpi)
    if waits:
        spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for w in trace.waits:
            spans[w.worker].append((w.start / scale, max((w.end - w.start) / scale, 1e-9)))
        for row, xs in spans.items():
            ax.broken_barh(xs, (row - 0.3, 0.6), facecolors="#dddddd", edgecolor="none", hatch="///")
    for (row, name), xs in bars.items():
        ax.broken_barh(xs, (row - 0.4, 0.8), facecolors=colour[name], edgecolor="none")
    ax.set_yticks(range(rows))
    ax.set_yticklabels([n if c is None else f"{n} ({c})" for n, c in trace.workers])
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlabel(f"time ({unit}{', device clock' if trace.clock == 'device' else ''})")
    summary = trace.summary()
    ax.set_title(f"{trace.title}: {summary.tasks} tasks, makespan {summary.makespan / scale:.3g} {unit}")
    shown = names[:LEGEND_LIMIT]
    handles = [Patch(color=colour[n], label=n) for n in shown]
    if waits and trace.waits:
        handles.append(Patch(facecolor="#dddddd", hatch="///", label="waiting"))
    if len(names) > LEGEND_LIMIT:
        handles.append(Patch(color="white", label=f"... {len(names) - LEGEND_LIMIT} more"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    try:
        with writing(path, "plot"):
            try:
                fig.savefig(path)
            except ValueError as e:  # matplotlib: a suffix it has no writer for
                raise InputError(f"trace.plot: cannot write {str(path)!r}: {e}") from e
    finally:
        plt.close(fig)
    return path


def _unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= 10 * scale:
            return scale, unit
    return 1e-9, "ns"
