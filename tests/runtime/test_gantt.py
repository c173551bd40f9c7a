"""Gantt charts and summaries a person reads without their author, drawn without touching pyplot."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ptowsp.runtime.gantt import STAGE, STARTUP, WAITING, WINDDOWN, figure, palette
from ptowsp.runtime.report import task_of
from ptowsp.runtime.trace import Event, Trace, Wait

TASKS = [f"task{k}" for k in range(24)]


def _trace(duration: float = 2.33e-3, cold: bool | None = None) -> Trace:
    """24 tasks on two workers (one a specialised variant, one with a load stage), worker1 waiting
    once, a third worker and the orchestrator row never used."""
    step = duration / 30
    events = [Event(name, (), k % 2, None, (k + 2) * step, (k + 3) * step, id=k) for k, name in enumerate(TASKS)]
    events += [Event("task5@1", (1,), 0, None, 27 * step, 28 * step, id=24),
               Event("task7 load", (), 1, None, 28 * step, 29 * step)]
    workers = [("worker0", None), ("worker1", None), ("worker2", None), ("orchestrator", "host")]
    return Trace(workers=workers, lanes=3, events=events, waits=[Wait(1, "dependency", "ready queue", 0, step)],
                 duration=duration, title="ptowsp demo on cpu", cold=cold)


def test_one_legend_entry_and_one_colour_per_task():
    fig = figure(_trace())
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[:24] == TASKS  # in order of first start, variants and stages folded into their task
    assert texts[24:26] == [STAGE, WAITING] and texts[26] == f"{STARTUP}: 155 µs before the first task"
    assert texts[27] == f"{WINDDOWN}: 77.7 µs after the last task"
    assert len(texts) == 28
    assert len(set(palette(40))) == 40
    assert task_of("y@1 load") == ("y", "load") and task_of("attn.out.fused") == ("attn.out.fused", None)


def test_no_empty_lane_and_the_axis_starts_at_the_run():
    fig = figure(_trace())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker0", "worker1"]
    assert "not drawn, nothing ran or waited there: worker2, orchestrator (host)" in ax.get_xlabel()
    assert ax.get_xlim() == pytest.approx((0, 2.33))


def test_many_idle_lanes_are_counted_not_listed():
    """A device's idle cores by name ran off both edges of the figure: many are one short line."""
    workers = [(f"core{k}", "vector") for k in range(40)]
    trace = Trace(workers=workers, lanes=40, events=[Event("t", (), 0, "vector", 0.0, 1e-6, id=0)], duration=1e-6)
    label = figure(trace).axes[0].get_xlabel()
    assert "not drawn, nothing ran or waited there: 39 lanes, core1 (vector) to core39 (vector)" in label


@pytest.mark.parametrize("duration, shown, unit", [(2.33e-3, "2.33 ms", "ms"), (4.5e-5, "45 µs", "µs"),
                                                   (1.5, "1.5 s", "s"), (3e-7, "300 ns", "ns")])
def test_the_title_gives_the_makespan_in_a_unit_a_person_reads(duration, shown, unit):
    ax = figure(_trace(duration)).axes[0]
    assert ax.get_title() == f"ptowsp demo on cpu: 25 instances of 24 tasks, makespan {shown}"
    assert f"({unit})" in ax.get_xlabel()


def test_the_summary_and_the_title_say_whether_the_run_was_cold():
    assert "cold run: the first after build, includes one-off costs" in str(_trace(cold=True).summary())
    assert "warm run" in str(_trace(cold=False).summary())
    assert "run" not in str(_trace().summary()).split("\n")[1]  # unknown: not said
    assert figure(_trace(cold=False)).axes[0].get_title().endswith(", warm run")


def test_importing_and_plotting_leave_the_matplotlib_backend_alone(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import ptowsp as pw
        assert "matplotlib.pyplot" not in sys.modules, "pyplot imported by import ptowsp"
        import matplotlib
        matplotlib.use("svg")
        from ptowsp.autoschedule.records import TrialRecord
        from ptowsp.runtime.trace import Event, Trace
        from ptowsp.workloads import zoo
        trace = Trace(workers=[("worker0", None)], events=[Event("C", (), 0, None, 0.0, 1e-3, id=0)], duration=1e-3)
        trace.plot({str(tmp_path / "gantt.png")!r})
        wl = zoo.matmul(8, 8, 8)
        history = [TrialRecord.of(wl.schedule(), "cpu", 0, 1e-3)]
        pw.autoschedule.SearchResult(wl, "cpu", history).plot({str(tmp_path / "curve.png")!r})
        assert "matplotlib.pyplot" not in sys.modules, "pyplot imported by a plot"
        assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("gantt.png", "curve.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_summary_splits_overhead_between_tasks_from_the_ends_of_the_run():
    """Worker 0: idle until 0.1, tasks [0.1, 0.2] and [0.3, 0.4] with a dependency wait [0.2, 0.25] between
    them, done at 0.4 of a 0.5 run: 0.05 s between tasks, 0.2 s at the ends."""
    events = [Event("T", (k,), 0, None, start, start + 0.1, id=k) for k, start in enumerate((0.1, 0.3))]
    trace = Trace(workers=[("worker0", None)], events=events, waits=[Wait(0, "dependency", "ready queue", 0.2, 0.25)],
                  duration=0.5)
    summary = trace.summary()
    assert abs(summary.overhead - 0.25) < 1e-12 and abs(summary.ends - 0.2) < 1e-12
    assert abs(summary.overhead_per_task - 0.025) < 1e-12
    assert "before the first and after the last" in str(summary)
