"""prefetch_tensor: the step's checks, the lines it fetches, and the targets that refuse it."""

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cuda import generate
from ptowsp.lower.interpret import Interpreter
from ptowsp.lower.ir import For, Prefetch, walk_stmts
from ptowsp.lower.program import lower_program


def matmul(m=64, k=256, n=128, constant=False):
    """C = A @ B, B an input or (`constant`) a constant of ones."""
    wl = pw.Workload("mm")
    A = wl.input("A", (m, k))
    B = wl.constant("B", np.ones((k, n), np.float32)) if constant else wl.input("B", (k, n))
    r = pw.reduce_axis(k, "k")
    wl.output(wl.compute("C", (m, n), lambda i, j: pw.sum(A[i, r] * B[r, j], axis=r)))
    return wl


def tiled(wl, k_block=64):
    """Column tiles outermost, k blocks, then row tiles: B's k block re-read once per row tile (the
    default's register tile, tiles.py)."""
    return (wl.schedule().tile("C", i=8, j=32).split("C", "k", k_block)
            .reorder("C", "j.outer", "k.outer", "i.outer", "k.inner", "i.inner", "j.inner")
            .unroll("C", "i.inner").vectorize("C", "j.inner"))


class _Lines(Interpreter):
    """Runs a kernel's loops, recording the cache line of every prefetch per iteration of `anchor`."""

    def __init__(self, arrays, anchor):
        super().__init__(arrays)
        self.anchor, self.lines = anchor, {}

    def run(self, s, env):
        if isinstance(s, Prefetch):
            shape = self.arrays[s.buffer.name].shape
            flat = int(np.ravel_multi_index([0] * len(shape), shape))
            for index, stride in zip(s.indices, np.cumprod((1, *shape[:0:-1]))[::-1], strict=True):
                flat += int(self.value(index, env)) * int(stride)
            key = tuple(env[v] for v in self.anchor)
            self.lines.setdefault(key, set()).add(flat * 4 // 64)
        elif any(isinstance(n, Prefetch) for n in walk_stmts(s)):  # only the loops around prefetches
            if isinstance(s, For):
                for v in range(s.extent):
                    self.run(s.body, {**env, s.var: v})
            else:
                for c in s.children():
                    self.run(c, env)


def test_the_lines_of_the_next_k_block_spread_over_the_k_steps():
    wl = matmul()
    kernel = lower_program(wl, tiled(wl).prefetch_tensor("C", "B", "k.outer")).kernels["C"]
    # 64 rows of B x 32 columns: 2 lines a row, 128 lines over 8 row tiles x 64 k steps: every fourth
    k_inner = next(s for s in walk_stmts(kernel.body) if isinstance(s, For) and s.var == "k.inner")
    assert "% 4 == 0" in str(k_inner.body.stmts[0].cond)
    arrays = {"A": np.zeros((64, 256), np.float32), "B": np.zeros((256, 128), np.float32),
              "C": np.zeros((64, 128), np.float32)}
    found = _Lines(arrays, ("j.outer", "k.outer"))
    found.run(kernel.body, {})
    for (jo, ko), lines in found.lines.items():
        rows = range((ko + 1) * 64, (ko + 2) * 64)  # the next block, past the end too (harmless)
        assert lines == {(r * 128 + jo * 32 + c) * 4 // 64 for r in rows for c in (0, 16)}, (jo, ko)


def test_prefetching_changes_no_result():
    wl = matmul()
    a = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((256, 128)).astype(np.float32)
    for ahead in (1, 2):
        s = tiled(wl).prefetch_tensor("C", "B", "k.outer", ahead=ahead).prefetch_tensor("C", "A", "i.outer")
        assert "prefetch B[" in pw.build(s, "cpu").source("C")
        np.testing.assert_allclose(pw.build(s, "cpu").run(A=a, B=b)["C"], a @ b, rtol=1e-4, atol=1e-3)


def test_a_contiguous_block_is_one_run_of_lines():
    """B stored as panels (a constant, the default's pass): the k block, 256 rows of one panel, is
    one contiguous run of lines, spread evenly over the row tiles' k steps.  The tile's rows and the
    panel's width follow the target CPU's registers (8 x 32 with AVX-512, 4 x 16 with AVX2)."""
    prog = pw.build(matmul(128, 768, 256, constant=True), "cpu", workers=2)
    assert "prefetch_tensor('C', 'C_B_panels', 'k.outer', ahead=1)" in str(prog.schedule)
    rows = prog.schedule.steps[0].factors["i"]
    width = prog.schedule.workload.tensor("C_B_panels").shape[-1]
    lines, steps = 256 * width * 4 // 64, 128 // rows * 256
    assert f"k.inner) % {steps // lines} == 0:" in prog.source("C")  # one line every that many steps
    np.testing.assert_allclose(prog.run(A=np.ones((128, 768), np.float32))["C"], 768.0)


@pytest.mark.parametrize("step, message", [
    (lambda s: s.prefetch_tensor("C", "D", "k.outer"), "does not read 'D'"),
    (lambda s: s.prefetch_tensor("C", "B", "q"), "has no loop 'q'"),
    (lambda s: s.prefetch_tensor("C", "B", "k.outer", ahead=0), "at least one iteration"),
    (lambda s: s.prefetch_tensor("C", "B", "j.inner"), "j.inner is vectorized"),
    (lambda s: s.prefetch_tensor("C", "B", "k.outer").split("C", "k.outer", 2), "where 'B' is prefetched"),
    (lambda s: s.prefetch_tensor("C", "B", "j.outer").parallel("C", "j.outer"), "cannot be parallel"),
    (lambda s: s.prefetch_tensor("C", "B", "k.outer").prefetch_tensor("C", "B", "i.outer"), "already prefetched"),
])
def test_illegal_prefetches_name_the_step(step, message):
    s = tiled(matmul())
    before = s.steps
    with pytest.raises(pw.ScheduleError, match=message) as caught:
        step(s)
    assert "prefetch_tensor" in str(caught.value) or "split" in str(caught.value) or "parallel" in str(caught.value)
    assert s.steps[:len(before)] == before


def test_a_tensor_in_another_layout_is_refused():
    s = tiled(matmul(constant=True)).transform_layout("B", lambda k, j: (j, k))
    with pytest.raises(pw.ScheduleError, match="prefetch_tensor.*another layout"):
        s.prefetch_tensor("C", "B", "k.outer")


def test_a_step_that_survives_a_round_trip():
    wl = matmul()
    s = tiled(wl).prefetch_tensor("C", "B", "k.outer", ahead=2)
    assert pw.Schedule.from_json(wl, s.to_json()) == s
    assert "prefetch_tensor('C', 'B', 'k.outer', ahead=2)" in str(s)


def test_a_tensor_cached_outside_the_loop_has_nothing_to_prefetch():
    wl = matmul()
    s = tiled(wl).cache_read("C", "B", "local", "j.outer").prefetch_tensor("C", "B", "k.outer")
    with pytest.raises(pw.BuildError, match="does not read 'B' inside loop k.outer"):
        pw.build(s, "cpu")


def test_targets_without_a_data_cache_refuse_it():
    wl = matmul()
    s = tiled(wl).prefetch_tensor("C", "B", "k.outer")
    with pytest.raises(pw.BuildError, match="AICore has no data cache"):
        pw.build(s, "aicore")
    with pytest.raises(pw.BuildError, match="cuda target does not take"):
        generate(s)


def test_more_lines_than_iterations_go_several_an_iteration():
    """k.inner unrolled: the only serial loop inside k.outer is i.outer, 4 row tiles for a block of
    32 rows x 2 lines: 16 lines an iteration, all of them fetched."""
    wl = matmul()
    s = (wl.schedule().tile("C", i=16, j=32).split("C", "k", 32)
         .reorder("C", "j.outer", "k.outer", "i.outer", "k.inner", "i.inner", "j.inner")
         .unroll("C", "k.inner").vectorize("C", "j.inner").prefetch_tensor("C", "B", "k.outer"))
    kernel = lower_program(wl, s).kernels["C"]
    fetches = [f for f in walk_stmts(kernel.body) if isinstance(f, For) and f.var == "k.outer.prefetch"]
    assert [f.extent for f in fetches] == [16]  # 32 rows x 2 lines over 4 row tiles
    arrays = {"A": np.zeros((64, 256), np.float32), "B": np.zeros((256, 128), np.float32),
              "C": np.zeros((64, 128), np.float32)}
    found = _Lines(arrays, ("j.outer",))
    found.run(kernel.body, {})
    assert all(len(lines) == 512 for lines in found.lines.values())


def test_rows_chosen_by_data_are_refused():
    wl = pw.Workload("gather")
    table = wl.input("T", (100, 64))
    ids = wl.input("ids", (16,), dtype="int32")
    wl.output(wl.compute("Y", (16, 64), lambda i, j: table[ids[i], j] * 2.0))
    with pytest.raises(pw.ScheduleError, match="where the values of another tensor say"):
        wl.schedule().prefetch_tensor("Y", "T", "i")


def test_a_symbolic_size_outside_the_loop():
    """Rows of a symbolic count: a prefetch at the row loop fetches the next row, whose length is fixed."""
    wl = pw.Workload("rows")
    x = wl.input("X", ("n", 64))
    wl.output(wl.compute("Y", ("n", 64), lambda i, j: x[i, j] + 1.0))
    s = wl.schedule().split("Y", "j", 16).vectorize("Y", "j.inner").prefetch_tensor("Y", "X", "i")
    prog = pw.build(s, "cpu")
    assert "prefetch X[" in prog.source("Y")
    a = np.arange(5 * 64, dtype=np.float32).reshape(5, 64)
    np.testing.assert_array_equal(prog.run(X=a)["Y"], a + 1)
