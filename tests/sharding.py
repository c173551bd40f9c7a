"""A pytest plugin that runs one shard of the suite: `-p tests.sharding --shard K/N`.

Every shard collects the whole suite in the same order and keeps its share,
so N processes (tests/parallel.py) split the work without talking to each
other.  Shares are balanced by the seconds each test took when last
recorded (tests/durations.json; a test not in it counts as the median):
longest first, each to the shard with the least work so far.
`--record-durations FILE` writes the seconds this run measured to FILE
(tests/parallel.py --record merges the shards' files into durations.json).
`--count-outcomes FILE` writes how many tests passed, failed and were
skipped, for tests/parallel.py to add up into one closing line.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="K/N", help="run the K-th of N balanced shares (K from 0)")
    parser.addoption("--record-durations", default=None, metavar="FILE", help="write this run's seconds per test")
    parser.addoption("--count-outcomes", default=None, metavar="FILE", help="write how many passed, failed, skipped")


def _parse(shard: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard wants K/N with 0 <= K < N, got {shard!r}") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"--shard wants K/N with 0 <= K < N, got {shard!r}")
    return k, n


def load_durations() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def share(nodeids: list[str], k: int, n: int, seconds: dict[str, float]) -> set[str]:
    """The node ids shard k of n runs: longest first, each to the least-loaded shard (ties: the lowest)."""
    default = statistics.median(seconds.values()) if seconds else 1.0
    load, mine = [0.0] * n, set()
    for nodeid in sorted(nodeids, key=lambda i: -seconds.get(i, default)):
        target = min(range(n), key=lambda s: load[s])
        load[target] += seconds.get(nodeid, default)
        if target == k:
            mine.add(nodeid)
    return mine


def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard is None:
        return
    k, n = _parse(shard)
    mine = share([item.nodeid for item in items], k, n, load_durations())
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in mine])
    items[:] = [item for item in items if item.nodeid in mine]


class _Recorder:
    """Seconds per test (setup, call and teardown), written to `path` at the end of the session."""

    def __init__(self, path: str) -> None:
        self.path, self.seconds = Path(path), {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        self.path.write_text(json.dumps({k: round(v, 2) for k, v in sorted(self.seconds.items())}, indent=0) + "\n")


class _OutcomeCounter:
    """Tests passed, failed (errors in setup or teardown count as failed) and skipped, written at the end."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter):
        stats = terminalreporter.stats
        counts = {
            "passed": len(stats.get("passed", [])) + len(stats.get("xpassed", [])),
            "failed": len(stats.get("failed", [])) + len(stats.get("error", [])),
            "skipped": len(stats.get("skipped", [])) + len(stats.get("xfailed", [])),
        }
        self.path.write_text(json.dumps(counts) + "\n")


def pytest_configure(config):
    for option, plugin in (("--record-durations", _Recorder), ("--count-outcomes", _OutcomeCounter)):
        path = config.getoption(option)
        if path:
            config.pluginmanager.register(plugin(path), f"sharding{option}")
