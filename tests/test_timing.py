"""ptowsp.timing: each side's median comes back in the caller's order, whatever order the blocks ran
in, and blocks rotate so that no side always follows the same one."""

from __future__ import annotations

import time

from ptowsp.timing import rotating_blocks, side_by_side


def sleeper(seconds: float, log: list[str], name: str):
    def run():
        log.append(name)
        time.sleep(seconds)

    return run


def test_medians_are_returned_in_the_callers_order():
    log: list[str] = []
    fast, slow = sleeper(0.001, log, "fast"), sleeper(0.01, log, "slow")
    t_slow, t_fast = side_by_side([slow, fast], repeat=2, rounds=2, settle=0.0)
    assert t_slow > 5 * t_fast


def test_blocks_rotate_and_settle_before_each_block():
    log: list[str] = []
    fns = [sleeper(0.0, log, name) for name in "abc"]
    start = time.perf_counter()
    side_by_side(fns, repeat=1, rounds=3, settle=0.02)
    assert time.perf_counter() - start >= 9 * 0.02  # one settle per block: 3 rounds x 3 sides
    rounds = log[6:]  # first each side once to size its block (a warm-up and a run), then the rounds
    firsts = [rounds[k] for k in range(0, len(rounds), 3 * 2)]  # a block: a warm-up and one timed run
    assert firsts == ["a", "b", "c"]  # round r starts with side r
    timed = rotating_blocks(fns, rounds=2, runs=2, settle=0.0)
    assert [len(t) for t in timed] == [4, 4, 4]
