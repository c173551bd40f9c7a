"""The tuning curve a person reads: one "best" figure everywhere, from zero, with the default's line."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import re

import pytest

import ptowsp as pw
from ptowsp.autoschedule import records
from ptowsp.autoschedule.measure import Runner
from ptowsp.autoschedule.result import milliseconds
from ptowsp.autoschedule.space import Space
from ptowsp.workloads import zoo
from tests.autoschedule.faults import lucky_first_cost


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A short search whose finalists' re-measurements differ from their first (lucky, halved) ones,
    progress shown."""
    wl = zoo.matmul(32, 32, 64)
    lucky = functools.partial(lucky_first_cost, seen=str(tmp_path_factory.mktemp("seen")))
    with Runner(wl, "cpu", workers=2, evaluate=lucky) as runner:
        bar = io.StringIO()
        with contextlib.redirect_stderr(bar):
            res = pw.AutoScheduler.search(wl, "cpu", num_trials=6, seed=0, runner=runner, batch=3, progress=True,
                                          space=Space(wl, vector_bytes=32, workers=2))  # the same on every host
    return res, bar.getvalue()


def test_the_three_best_figures_are_one_number(searched):
    res, bar = searched
    assert res.confirmations > 0
    first = {records.steps_key(r): r.seconds for r in reversed(res.history)}
    assert min(first.values()) != res.best_seconds  # a lucky first measurement is not the best figure
    shown = milliseconds(res.best_seconds)
    assert re.findall(r"best ([0-9.]+ ms)", bar)[-1] == shown  # the progress bar's last figure
    assert f"best {shown}" in repr(res)
    assert res.curve()[-1] == res.best_seconds
    for flops, value in ((None, res.default_seconds / res.best_seconds), (1e9, 1 / res.best_seconds)):
        fig = res.figure(flops=flops)  # speed relative to the default, or GFLOP/s
        assert fig.axes[0].lines[0].get_ydata()[-1] == pytest.approx(value)
        assert any(f"best {shown}" in t.get_text() for t in fig.legends[0].get_texts())
    unknown = dataclasses.replace(res, default_schedule=None)  # no default measured: the time itself
    assert unknown.figure().axes[0].lines[0].get_ydata()[-1] == pytest.approx(res.best_seconds * 1e3)


def test_the_curve_starts_at_zero_with_integer_trials_and_the_default_line(searched, tmp_path):
    res, _ = searched
    assert res.history[0].steps == res.default_schedule.steps  # the default is the first trial
    assert res.default_seconds is not None
    ax = res.figure().axes[0]
    assert ax.get_ylim()[0] == 0
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    flat = [line for line in ax.lines if len(set(line.get_ydata())) == 1 and len(line.get_xdata()) == 2]
    assert [line.get_ydata()[0] for line in flat] == [1.0]  # speed relative to the default
    png = res.plot(tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
