"""ptowsp.timing: each side's median comes back in the caller's order, whatever order the blocks ran
in, and blocks rotate so that no side always follows the same one.

The module's clock is a virtual one (`VirtualTime`): the functions timed advance it by set amounts and a
settle advances it by its length, so every duration the tests check is exact, however busy the machine.
"""

from __future__ import annotations

import pytest

from ptowsp import timing
from ptowsp.timing import rotating_blocks, side_by_side


class VirtualTime:
    """Stands in for the `time` module ptowsp.timing reads: `perf_counter` is virtual seconds, which
    only `sleep` and the timed functions (`advance`) move; every sleep is logged beside the calls."""

    def __init__(self, log: list[str]):
        self.now, self.log = 0.0, log

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.log.append(f"settle {seconds:g}")
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def log() -> list[str]:
    return []


@pytest.fixture
def clock(monkeypatch, log) -> VirtualTime:
    clock = VirtualTime(log)
    monkeypatch.setattr(timing, "time", clock)
    return clock


def taking(seconds: float, clock: VirtualTime, log: list[str], name: str):
    """A function that takes exactly `seconds` of the virtual clock, logging its name."""

    def run():
        log.append(name)
        clock.advance(seconds)

    return run


def test_medians_are_returned_in_the_callers_order(clock, log):
    fast, slow = taking(0.001, clock, log, "fast"), taking(0.01, clock, log, "slow")
    t_slow, t_fast = side_by_side([slow, fast], repeat=2, rounds=2, settle=0.0)
    assert (t_slow, t_fast) == (pytest.approx(0.01), pytest.approx(0.001))


def test_a_fast_function_runs_enough_times_to_fill_a_block(clock, log):
    fast = taking(2**-10, clock, log, "fast")  # binary fractions: the virtual clock's sums are exact
    side_by_side([fast], repeat=2, rounds=1, min_block=10 * 2**-10, settle=0.0)
    assert log.count("fast") == 2 + 1 + 10  # sizing (a warm-up and a run), then a warm-up and 10 timed runs


def test_blocks_rotate_and_settle_before_each_block(clock, log):
    fns = [taking(0.0, clock, log, name) for name in "abc"]
    side_by_side(fns, repeat=1, rounds=3, settle=0.02)
    assert clock.now == pytest.approx(9 * 0.02)  # the functions take no time: the clock moved by the settles
    rounds = log[6:]  # first each side once to size its block (a warm-up and a run), then the rounds
    assert rounds == [entry for side in ["abc", "bca", "cab"] for name in side for entry in ("settle 0.02", name, name)]

    log.clear()
    timed = rotating_blocks(fns, rounds=2, runs=2, settle=0.0)
    assert [len(t) for t in timed] == [4, 4, 4]
    assert log[3:] == [entry for side in ["abc", "bca"] for name in side for entry in ("settle 0", name, name)]
