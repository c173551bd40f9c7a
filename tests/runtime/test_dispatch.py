"""Dispatch policies on both clocks: heft's placement and ranks, and a property test that any policy
and prefetch depth runs a random task graph in dependency order, giving the sequential result."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.runtime import Instance, Options, TaskTable, execute, execute_device
from ptowsp.runtime.dispatch import POLICIES, Heft, TaskTimes
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import random_inputs, zoo
from tests.tolerance import assert_sums_close


def times(**seconds):
    out = TaskTimes()
    out.seconds = {(label, None): s for label, s in seconds.items()}
    return out


def test_heft_places_each_task_where_it_finishes_first():
    heft = Heft(times=times(big=4.0, small=1.0), workers=(None, None))
    big, small = Instance("big", (), (), ()), Instance("small", (), (), ())
    smalls = [Instance("small", (k,), (), (), grid=("k",)) for k in range(5)]
    assert heft.place(big, [0, 1], None, []) == 0
    assert [heft.place(s, [0, 1], None, []) for s in smalls[:4]] == [1, 1, 1, 1]  # 4 smalls beside one big
    assert heft.place(smalls[4], [0, 1], None, []) == 0  # both would finish at 5: the tie goes to worker 0
    heft.retired(big)
    assert heft.queued == [1.0, 4.0]
    assert heft.place(small, [0, 1], None, []) == 0


def test_heft_counts_moving_inputs_from_another_worker():
    heft = Heft(times=times(t=1e-6), workers=(None, None), bytes_per_second=1e9)
    reader = Instance("t", (), (), (), bytes=2_000_000)  # 1 MB of inputs from producers: 1 ms to move
    assert heft.place(reader, [0, 1], None, [1, 1]) == 1  # where its producers ran, though worker 0 is free


def test_upward_ranks_follow_the_critical_path():
    heft = Heft(times=times(a=1.0, b=1.0, c=1.0, d=2.0), workers=(None,))
    instances = [Instance(n, (), (), ()) for n in "abcd"]
    assert heft.ranks(instances, [(), (0,), (1,), ()]) == [3.0, 2.0, 1.0, 2.0]


class Recording:
    """Records the order instances ran in."""

    load = store = None

    def __init__(self):
        self.order = []

    def compute(self, i):
        self.order.append(i)


def test_heft_starts_the_longest_chain_first():
    # table order: a lone task, then a chain of 3; on one worker heft runs the chain's head first
    solo = [Instance("solo", (), (), (("s", ((0, 1),)),))]
    chain = [Instance("link", (k,), ((("c", ((k - 1, k),)),) if k else ()), (("c", ((k, k + 1),)),), grid=("k",))
             for k in range(3)]
    table = TaskTable(solo + chain)
    launch = Recording()
    execute(table, launch, Options(workers=(None,), policy="heft", task_times=times(solo=1.0, link=1.0)))
    assert launch.order[0] == 1  # the chain's head (rank 3) before the solo task (rank 1)
    launch = Recording()
    execute(table, launch, Options(workers=(None,), policy="round_robin"))
    assert launch.order[0] == 0  # oldest first


def test_heft_learns_kernel_times_from_runs():
    wl = zoo.matmul(128, 128, 128)
    prog = pw.build(wl.schedule().tile("C", i=32, j=32).parallel("C", "i.outer", "j.outer").dispatch("heft"), "cpu")
    inputs = random_inputs(wl, seed=1)
    assert prog.options.task_times.seconds == {}
    assert_sums_close(prog.run(**inputs)["C"], inputs["A"] @ inputs["B"], terms=128, rtol=1e-4)
    learned = prog.options.task_times.seconds
    assert set(learned) == {("C", None)} and learned["C", None] > 0


# -- any policy, any prefetch depth, both clocks: dependencies hold ------------------------------------
class Summing:
    """Instance i computes value[i] = i + the sum of its producers' values (reading them when it runs)."""

    load = store = None

    def __init__(self, table):
        self.table, self.value = table, {}

    def compute(self, i):
        self.value[i] = i + sum(self.value[p] for p in self.table.predecessors[i])


class FlatCosts:
    """A device where every stage takes a microsecond or so (varying per instance, to shuffle the order)."""

    schedulers, orchestrate_seconds, schedule_seconds, record_seconds, replay_seconds = 2, 1e-7, 2e-7, 1e-7, 3e-7
    dispatch_seconds, completion_seconds, switch_seconds, slots = 1e-7, 1e-7, 1e-7, 2

    def blocks(self, i):
        return 1 + i % 2

    def load(self, i, block, now):
        return 1e-7, 3e-7

    def compute(self, i, block):
        return (1 + (i * 7) % 5) * 1e-7

    def stores(self, i, block):
        return block == self.blocks(i) - 1

    def store(self, i, block, now):
        return 1e-7


@st.composite
def graphs(draw):
    """A random DAG over n tensors of 4 cells: instance k writes cell (k % 4) of tensor k // 4 and reads a
    few cells written earlier."""
    n = draw(st.integers(1, 24))
    instances = []
    for k in range(n):
        reads = draw(st.lists(st.integers(0, k - 1), max_size=3, unique=True)) if k else []
        instances.append(Instance("t", (k,), tuple((f"x{r // 4}", ((r % 4, r % 4 + 1),)) for r in reads),
                                  ((f"x{k // 4}", ((k % 4, k % 4 + 1),)),), grid=("k",)))
    return instances


@settings(max_examples=40, deadline=None)
@given(graphs(), st.sampled_from(POLICIES), st.integers(0, 3), st.integers(1, 4), st.booleans())
def test_any_policy_and_prefetch_keep_dependencies_on_both_clocks(instances, policy, prefetch, workers, device):
    table = TaskTable(instances)
    expected = {}
    for i in range(len(instances)):
        expected[i] = i + sum(expected[p] for p in table.predecessors[i])
    launch = Summing(table)
    policy = pw.dispatch.affinity("k") if policy == "affinity" else policy
    options = Options(workers=(None,) * workers, policy=policy, prefetch=prefetch, window=max(1, len(instances) // 2),
                      task_times=TaskTimes())
    trace = execute_device(table, launch, options, FlatCosts()) if device else execute(table, launch, options)
    assert launch.value == expected
    assert len([e for e in trace.events if e.id >= 0]) == len(instances)


@pytest.mark.parametrize("target", ["cpu", "aicore"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_a_transformer_block_like_the_reference(target, policy):
    if policy == "affinity":  # keyed on a grid loop the schedule makes
        wl = zoo.matmul(64, 64, 64)
        s = wl.schedule().tile("C", i=16, j=16).parallel("C", "i.outer", "j.outer")
        s = s.dispatch(pw.dispatch.affinity("i.outer"))
    else:
        wl = zoo.transformer_block(seq=16, d_model=32, heads=2, d_ff=64)
        s = default_schedule(wl, workers=2).dispatch(policy)
    inputs = random_inputs(wl, seed=2)
    expected = pw.reference(wl, **inputs)
    out = pw.build(s, target, workers=None if target == "aicore" else 2).run(**inputs)
    for name, value in out.items():
        np.testing.assert_allclose(value, expected[name], rtol=2e-3, atol=2e-3)
