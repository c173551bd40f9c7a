"""Static memory planning: no two live tensors overlap, sharing is declared, the runtime honours it."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from ptowsp.runtime import Instance, TaskTable
from ptowsp.schedules.passes.memory import ALIGN, plan_memory


@st.composite
def programs(draw):
    """Random task sequences: each writes one new tensor and reads some earlier ones."""
    n = draw(st.integers(1, 14))
    sizes = {f"t{k}": draw(st.integers(1, 5000)) for k in range(n)}
    steps = []
    for k in range(n):
        reads = draw(st.lists(st.sampled_from([f"t{j}" for j in range(k)]), max_size=3)) if k else []
        steps.append((reads, [f"t{k}"]))
    kept = draw(st.sets(st.sampled_from(sorted(sizes)), max_size=n // 3))  # outputs: not planned
    return steps, {t: s for t, s in sizes.items() if t not in kept}


def _span(steps, tensor):
    used = [n for n, (reads, writes) in enumerate(steps) if tensor in reads or tensor in writes]
    return min(used), max(used)


@settings(max_examples=300)
@given(programs())
def test_no_two_live_tensors_overlap(program):
    steps, sizes = program
    plan = plan_memory(steps, sizes)
    assert set(plan.offsets) == set(sizes)
    for a in sizes:
        assert plan.offsets[a] % ALIGN == 0 and plan.offsets[a] + sizes[a] <= plan.arena_bytes
        assert plan.lifetimes[a] == _span(steps, a)
        for b in sizes:
            if a >= b:
                continue
            (a0, a1), (b0, b1) = _span(steps, a), _span(steps, b)
            bytes_meet = plan.offsets[a] < plan.offsets[b] + sizes[b] and plan.offsets[b] < plan.offsets[a] + sizes[a]
            if a0 <= b1 and b0 <= a1:
                assert not bytes_meet, (a, b)
            elif bytes_meet:  # sharing: the later tensor must name the earlier one
                later, earlier = (a, b) if a0 > b1 else (b, a)
                assert earlier in plan.reuses[later]
    assert plan.live_peak_bytes <= plan.arena_bytes <= sum(-(-s // ALIGN) * ALIGN for s in sizes.values())
    assert plan.overlapping() == []


def test_a_chain_reuses_dead_buffers():
    # t0 -> t1 -> t2 -> t3: at most two live at once, so two buffers serve all four
    steps = [([], ["t0"]), (["t0"], ["t1"]), (["t1"], ["t2"]), (["t2"], ["t3"]), (["t3"], ["out"])]
    plan = plan_memory(steps, {f"t{k}": 4096 for k in range(4)})
    assert plan.unshared_bytes == 4 * 4096 and plan.arena_bytes == 2 * 4096 == plan.live_peak_bytes
    assert plan.reuses == {"t2": ("t0",), "t3": ("t1",)}
    assert "0.01 MiB in one arena, 0.02 MiB unshared" in str(plan)


def test_runtime_orders_writes_after_every_access_of_the_bytes_taken_over():
    # A is read by tiles C0, C1; B takes over A's bytes: every tile writing B waits for both readers
    table = TaskTable(
        [Instance("P", (0,), writes=(("A", ((0, 8),)),)),
         Instance("C", (0,), reads=(("A", ((0, 4),)),), writes=(("out", ((0, 4),)),)),
         Instance("C", (1,), reads=(("A", ((4, 8),)),), writes=(("out", ((4, 8),)),)),
         Instance("Q", (0,), writes=(("B", ((0, 4),)),)),
         Instance("Q", (1,), writes=(("B", ((4, 8),)),))],
        after={"B": ["A"]})
    # (the wait on P itself is implied through its readers: the table keeps the transitive reduction)
    assert table.predecessors == ((), (0,), (0,), (1, 2), (1, 2))
    assert TaskTable(table.instances).predecessors[3:] == ((), ())  # without sharing: independent


def test_cpu_programs_share_intermediate_buffers_and_say_so():
    import numpy as np

    import ptowsp as pw
    from ptowsp.schedules.passes.default import default_schedule
    from ptowsp.workloads import zoo

    wl = zoo.transformer_block()
    prog = pw.build(default_schedule(wl, workers=2, fuse=False), "cpu", workers=2)
    plan = prog.memory_plan
    assert plan.overlapping() == [] and plan.reuses
    assert plan.live_peak_bytes <= plan.arena_bytes < plan.unshared_bytes
    stored = {t.name for name in prog.program.order for t in wl.task(name).outputs} - set(wl.outputs)
    assert set(plan.offsets) == stored
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
    expected = pw.reference(wl, **inputs)
    for _ in range(5):  # tiles of consecutive tasks overlap in time: the sharing must not race
        scale = float(np.abs(expected["y"]).max())
        np.testing.assert_allclose(prog.run(**inputs)["y"], expected["y"], rtol=1e-4, atol=1e-4 * scale)
    summary = str(prog.trace.summary())
    assert f"intermediates   {plan.arena_bytes / 2**20:.2f} MiB planned, " in summary
    assert pw.build(wl, "numpy").memory_plan is None


def _layers(count: int) -> list[Instance]:
    """count tensors L0, L1, ... each written by two tiles and read by two (P_k, C_k)."""
    out = []
    for k in range(count):
        out += [Instance(f"P{k}", (h,), writes=((f"L{k}", ((4 * h, 4 * h + 4),)),)) for h in range(2)]
        out += [Instance(f"C{k}", (h,), reads=((f"L{k}", ((4 * h, 4 * h + 4),)),),
                         writes=((f"out{k}", ((4 * h, 4 * h + 4),)),)) for h in range(2)]
    return out


def test_bytes_taken_over_through_a_chain_cost_edges_linear_in_its_length(monkeypatch):
    # a plan over a stack of layers names, for each tensor, every earlier one that held its bytes;
    # a write needs to wait only for the accesses of the last of them (which waited for the others)
    import ptowsp.runtime.table as table_module

    monkeypatch.setattr(table_module, "REDUCTION_BUDGET", 0)  # no instance-level reduction to hide it
    count = 40
    table = TaskTable(_layers(count), after={f"L{k}": [f"L{u}" for u in range(k)] for k in range(1, count)})
    preds = table.predecessors
    assert sum(map(len, preds)) == 2 * count + 2 * 4 * (count - 1)  # a writer per reader; 4 waits per writer
    for k in range(1, count):  # writers of L_k wait for every access of L_{k-1}, and through them of L_0
        assert preds[4 * k] == preds[4 * k + 1] == tuple(range(4 * (k - 1), 4 * k))
    reach = [set() for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            reach[i] |= reach[p] | {p}
    assert reach[4 * (count - 1)] >= {0, 1, 2, 3}


def test_a_tensor_with_no_instance_orders_nothing_between_the_tensors_around_it():
    # B takes over A's bytes and C takes over both, but no instance writes B: C still waits for A
    instances = [inst for inst in _layers(3) if not inst.name.endswith("1")]
    renamed = [dataclasses.replace(inst, writes=tuple((t.replace("L2", "C"), box) for t, box in inst.writes),
                                   reads=tuple((t.replace("L2", "C"), box) for t, box in inst.reads))
               for inst in instances]
    table = TaskTable(renamed, after={"L1": ["L0"], "C": ["L0", "L1"]})
    assert table.predecessors[4:6] == ((2, 3),) * 2  # L0's readers (which follow its writers)
