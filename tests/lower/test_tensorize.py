"""Tensorize (issue 30, item 1): declared intrinsics, matching after the schedule's splits, calls on
cpu and aicore, refusals with the reason, and a user's own LLVM IR."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower import lower_program
from ptowsp.lower.ir import Tensorized, walk_stmts

COMPILED = [t for t in ("cpu", "aicore") if t in pw.targets()]


def gemm_schedule(wl: pw.Workload, rows: int = 4, cols: int = 32, k_block: int = 16) -> pw.Schedule:
    """A register tile of rows x cols over k blocks: the nest under k.inner is one gemm call."""
    s = wl.schedule().tile("C", i=rows, j=cols).split("C", "k", k_block)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner")
    return s.tensorize("C", "k.inner", "gemm")


def calls(wl: pw.Workload, s: pw.Schedule) -> list[Tensorized]:
    program = lower_program(wl, s)
    return [st for k in program.kernels.values() for st in walk_stmts(k.body) if isinstance(st, Tensorized)]


@pytest.mark.parametrize("target", ["numpy", *COMPILED])
def test_the_builtin_gemm_computes_the_matmul(target):
    wl = pw.zoo.matmul(64, 96, 80)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 80), dtype=np.float32), rng.standard_normal((80, 96), dtype=np.float32)
    got = pw.build(gemm_schedule(wl), target=target).run(A=a, B=b)["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def transposed_b(m: int = 32, n: int = 64, k: int = 48, dtype: str = "float32") -> pw.Workload:
    """C = A @ K.T with K stored [n, k] (attention's Q @ K.T, a dense layer's [out, in] weights)."""
    wl = pw.Workload("a_kt")
    a, kt = wl.input("A", (m, k), dtype), wl.input("K", (n, k), dtype)
    r = pw.reduce_axis(k, "k")
    wl.output(wl.compute("C", (m, n), lambda i, j: pw.sum(pw.cast(a[i, r], "float32") * pw.cast(kt[j, r], "float32"),
                                                          axis=r) if dtype != "float32" else
                         pw.sum(a[i, r] * kt[j, r], axis=r)))
    return wl


@pytest.mark.parametrize("target", ["numpy", *COMPILED])
@pytest.mark.parametrize("dtype, intrinsic", [("float32", "gemm"), ("float16", "gemm_f16")])
def test_a_transposed_operand_is_a_window_in_another_order_of_its_dimensions(target, dtype, intrinsic):
    """K[j, k] where the pattern reads B[k, j]: the window's pattern dimensions run along K's
    dimensions 1 and 0, and the implementation walks it by their strides."""
    wl = transposed_b(32, 64, 48, dtype)
    s = wl.schedule().tile("C", i=16, j=32).split("C", "k", 16)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner").tensorize("C", "k.inner", intrinsic)
    (call,) = set(calls(wl, s))
    out, a, b = call.operands
    assert (a.buffer.name, a.dims) == ("A", (0, 1)) and (b.buffer.name, b.dims) == ("K", (1, 0))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((32, 48)).astype(dtype)
    kt = rng.standard_normal((64, 48)).astype(dtype)
    got = pw.build(s, target=target).run(A=x, K=kt)["C"]
    np.testing.assert_allclose(got, x.astype(np.float32) @ kt.astype(np.float32).T, rtol=1e-3, atol=1e-3)


def test_the_match_undoes_splits_inside_the_region_and_binds_sizes():
    wl = pw.zoo.matmul(32, 64, 48)
    s = wl.schedule().tile("C", i=4, j=32).split("C", "j.inner", 8).split("C", "k", 16)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner.outer", "j.inner.inner")
    s.vectorize("C", "j.inner.inner").tensorize("C", "k.inner", "gemm")
    (call,) = set(c.extents for c in calls(wl, s))
    assert call == (4, 32, 16)  # m, n, then the reduce axis k: j.inner.outer x j.inner.inner is one axis
    text = pw.build(s, target="cpu").source("C") if "cpu" in pw.targets() else lower_program(wl, s).source("C")
    assert "gemm<4x32x16>(C[i.outer * 4, j.outer * 32], A[i.outer * 4, k.outer * 16]" in text


def test_the_step_is_data_and_bind_kernel_is_the_same_step():
    wl = pw.zoo.matmul(16, 32, 16)
    s = gemm_schedule(wl, 4, 32, 16)
    assert "bind('C', 'k.inner', kernel='gemm')" in str(s)
    assert pw.Schedule.from_json(wl, s.to_json()) == s
    assert s.tensorized == {"C": ("k.inner", "gemm")}


@pytest.mark.parametrize("make, match", [
    (lambda s: s.tensorize("C", "k.inner", "nope"), "no intrinsic named 'nope'"),
    (lambda s: s.tensorize("C", "nowhere", "gemm"), "has no loop 'nowhere'"),
    (lambda s: s.parallel("C", "i.outer").tensorize("C", "i.outer", "gemm"), "is parallel; one intrinsic call"),
    (lambda s: s.tensorize("C", "k.inner", "gemm").tensorize("C", "i.inner", "gemm"), "already calls 'gemm'"),
    (lambda s: s.tensorize("C", "k.inner", "gemm").split("C", "k.inner", 2), "where 'gemm' is called"),
    (lambda s: s.bind("C", core="cube", kernel="gemm"), "bind takes one of"),
])
def test_steps_that_cannot_call_an_intrinsic_are_refused(make, match):
    wl = pw.zoo.matmul(32, 64, 32)
    s = wl.schedule().tile("C", i=4, j=32).split("C", "k", 16)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner")
    with pytest.raises(pw.ScheduleError, match=match):
        make(s)


@pytest.mark.parametrize("workload, schedule, match", [
    (lambda: pw.zoo.softmax(8, 32), lambda s: s.tensorize("Y", "i", "gemm"), "does not match"),
    (lambda: pw.zoo.matmul(30, 64, 32), lambda s: s.split("C", "i", 4).tensorize("C", "i.inner", "gemm"),
     "guard of a split that does not divide"),
    (lambda: pw.zoo.matmul(32, 64, 32, dtype="float64"), lambda s: gemm_schedule(s.workload, 4, 32, 16),
     "the nest stores float64; the pattern's output is float32"),
    (lambda: pw.zoo.matmul(32, 64, 32), lambda s: s.split("C", "i", 4).tensorize("C", "i.inner", "gemm"),
     "not loops around one store"),  # the nest also zeroes the accumulator: tensorize inside the k loops
])
def test_a_nest_that_is_not_the_pattern_says_what_differs(workload, schedule, match):
    wl = workload()
    with pytest.raises(pw.ScheduleError, match=match):
        lower_program(wl, schedule(wl.schedule()))  # what every compiled target does first


def test_an_epilogue_anchor_is_tensorized_inside_its_consumer():
    wl = pw.Workload("dense_relu")
    x, w = wl.input("X", (32, 64)), wl.input("W", (64, 32))
    k = pw.reduce_axis(64, "k")
    c = wl.compute("C", (32, 32), lambda i, j: pw.sum(x[i, k] * w[k, j], axis=k))
    wl.output(wl.compute("Y", (32, 32), lambda i, j: pw.maximum(c[i, j], 0.0)))
    s = gemm_schedule(wl, 4, 32, 32).fuse_by_category()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    for target in ["numpy", *COMPILED]:
        np.testing.assert_allclose(pw.build(s, target=target).run(X=a, W=b)["Y"], np.maximum(a @ b, 0), rtol=1e-4,
                                   atol=1e-4)
    assert calls(wl, s)


AXPY_IR = """
define void @ptowsp_intrinsic_axpy2(ptr %y, ptr %a, ptr %b, i64 %n, i64 %sy, i64 %sa, i64 %sb) alwaysinline {
entry:
  br label %head
head:
  %i = phi i64 [0, %entry], [%next, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %pa = getelementptr float, ptr %a, i64 %i
  %va = load float, ptr %pa
  %pb = getelementptr float, ptr %b, i64 %i
  %vb = load float, ptr %pb
  %t = fmul float %va, SCALE
  %r = fadd float %t, %vb
  %py = getelementptr float, ptr %y, i64 %i
  store float %r, ptr %py
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def axpy_pattern() -> pw.Workload:
    wl = pw.Workload("axpy2")
    a, b = wl.input("a", ("n",)), wl.input("b", ("n",))
    wl.compute("y", ("n",), lambda i: a[i] * 2.0 + b[i])
    return wl


@pytest.mark.skipif("cpu" not in pw.targets(), reason="needs the cpu target")
def test_a_users_intrinsic_is_called_and_a_new_declaration_is_compiled_again():
    """The implementation is called (it computes what its IR says), and declaring it again with
    other IR rebuilds the kernel instead of serving the old one from the cache."""
    wl = pw.Workload("scaled")
    a, b = wl.input("A", (4, 64)), wl.input("B", (4, 64))
    wl.output(wl.compute("Y", (4, 64), lambda r, c: a[r, c] * 2.0 + b[r, c]))
    pw.intrinsic("axpy2", axpy_pattern(), {"cpu": AXPY_IR.replace("SCALE", "2.0")})
    s = wl.schedule().split("Y", "c", 16).tensorize("Y", "c.inner", "axpy2")
    x, y = np.ones((4, 64), np.float32), np.full((4, 64), 0.5, np.float32)
    np.testing.assert_array_equal(pw.build(s, target="cpu").run(A=x, B=y)["Y"], x * 2 + y)
    pw.intrinsic("axpy2", axpy_pattern(), {"cpu": AXPY_IR.replace("SCALE", "3.0")})  # deliberately not the pattern
    np.testing.assert_array_equal(pw.build(s, target="cpu").run(A=x, B=y)["Y"], x * 3 + y)
    with pytest.raises(pw.BuildError, match="intrinsic 'axpy2' has no aicore implementation"):
        pw.build(s, target="aicore")


def test_declarations_are_checked():
    with pytest.raises(pw.WorkloadError, match="exactly one compute task"):
        pw.intrinsic("bad", pw.Workload("empty"), {"cpu": "builtin"})
    with pytest.raises(pw.WorkloadError, match="must define @ptowsp_intrinsic_bad"):
        pw.intrinsic("bad", axpy_pattern(), {"cpu": "define void @other() { ret void }"})
    with pytest.raises(pw.WorkloadError, match="names a core class"):
        pw.intrinsic("bad", axpy_pattern(), {"aicore": "tensor"})


@pytest.mark.skipif("aicore" not in pw.targets(), reason="needs the aicore target")
def test_tensorized_tasks_run_on_cube_cores():
    wl = pw.zoo.matmul(64, 64, 64)
    prog = pw.build(gemm_schedule(wl).parallel("C", "i.outer"), target="aicore")
    prog.run(A=np.ones((64, 64), np.float32), B=np.ones((64, 64), np.float32))
    assert {e.core for e in prog.trace.events if e.name == "C"} <= {"cube"}


@pytest.mark.skipif("aicore" not in pw.targets(), reason="needs the aicore target")
def test_a_declared_per_call_cost_times_the_calls_is_the_device_time():
    """cycles= replaces the device model's rate: each task's compute time is its calls x the cycles."""
    wl = pw.Workload("scaled_aicore")
    a, b = wl.input("A", (4, 64)), wl.input("B", (4, 64))
    wl.output(wl.compute("Y", (4, 64), lambda r, c: a[r, c] * 2.0 + b[r, c]))
    x, y = np.ones((4, 64), np.float32), np.full((4, 64), 0.5, np.float32)
    ir_text = AXPY_IR.replace("SCALE", "2.0").replace("@ptowsp_intrinsic_axpy2", "@ptowsp_intrinsic_axpy_costed")
    spans = {}
    for cycles in (1000, 4000):
        pw.intrinsic("axpy_costed", axpy_pattern(), {"cpu": ir_text, "aicore": "vector"}, cycles=cycles)
        s = wl.schedule().split("Y", "c", 16).tensorize("Y", "c.inner", "axpy_costed").parallel("Y", "r")
        prog = pw.build(s, target="aicore")
        np.testing.assert_array_equal(prog.run(A=x, B=y)["Y"], x * 2 + y)
        events = [e for e in prog.trace.events if e.name == "Y"]
        assert len(events) == 4 and {e.core for e in events} <= {"vector"}
        spans[cycles] = [e.end - e.start for e in events]
    clock = pw.DeviceModel().clock_hz
    for short, long in zip(spans[1000], spans[4000]):  # 4 calls of 16 per row; transfers beside them
        assert long - short == pytest.approx(4 * 3000 / clock, rel=1e-6)
    with pytest.raises(pw.WorkloadError, match="a positive number"):
        pw.intrinsic("bad", axpy_pattern(), {"aicore": "cube"}, cycles=0)
    with pytest.raises(pw.WorkloadError, match="no aicore implementation"):
        pw.intrinsic("bad", axpy_pattern(), {"cpu": "builtin"}, cycles=10)


def test_cuda_refuses_an_intrinsic_without_a_cuda_implementation():
    from ptowsp.backends.cuda import generate

    with pytest.raises(pw.BuildError, match="intrinsic 'gemm' has no cuda implementation"):
        generate(gemm_schedule(pw.zoo.matmul(16, 32, 16), 4, 32, 16))


def int8_matmul(m: int, n: int, k: int) -> pw.Workload:
    wl = pw.Workload("mm8")
    a, b = wl.input("A", (m, k), "int8"), wl.input("B", (k, n), "int8")
    r = pw.reduce_axis(k, "r")
    wl.output(wl.compute("C", (m, n), lambda i, j: pw.sum(pw.cast(a[i, r], "int32") * pw.cast(b[r, j], "int32"),
                                                           axis=r)))
    return wl


@pytest.mark.parametrize("k_block", [16, 10])  # 10: two groups of four k and a short one of two
@pytest.mark.parametrize("target", COMPILED)
def test_gemm_i8_is_exact_with_and_without_a_short_group_of_k(k_block, target):
    wl = int8_matmul(8, 32, 30 if k_block == 10 else 64)
    s = wl.schedule().tile("C", i=4, j=32).split("C", "r", k_block)
    s.reorder("C", "i.outer", "j.outer", "r.outer", "r.inner", "i.inner", "j.inner").tensorize("C", "r.inner", "gemm_i8")
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, wl.tensor("A").shape, dtype=np.int8)
    b = rng.integers(-128, 128, wl.tensor("B").shape, dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(pw.build(s, target=target).run(A=a, B=b)["C"], want)


@pytest.mark.skipif("cpu" not in pw.targets(), reason="needs the cpu target")
def test_the_cpu_default_calls_gemm_i8_with_vnni_or_avx2s_pair_products(monkeypatch):
    from ptowsp.backends.cpu.isa import target_cpu

    wl = int8_matmul(64, 64, 128)
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-128, 128, shape, dtype=np.int8) for shape in ((64, 128), (128, 64)))
    monkeypatch.setenv("PTOWSP_CPU", "x86-64-v3")  # AVX2: int16 pairs by vpmaddwd, exact
    prog = pw.build(wl, target="cpu")
    assert "kernel='gemm_i8'" in str(prog.schedule)
    asm = prog.source("C", "asm")
    assert "vpmaddwd" in asm and "vpdpbusd" not in asm
    np.testing.assert_array_equal(prog.run(A=a, B=b)["C"], pw.reference(wl, A=a, B=b)["C"])
    monkeypatch.setenv("PTOWSP_CPU", "host")
    prog = pw.build(wl, target="cpu")
    assert "kernel='gemm_i8'" in str(prog.schedule)
    if target_cpu("host").vnni:
        assert "vpdpbusd" in prog.source("C", "asm")


def test_bind_kernel_without_a_loop_takes_the_largest_nest_that_matches():
    wl = pw.zoo.matmul(16, 32, 64)
    s = wl.schedule().tile("C", i=4, j=32).split("C", "k", 16)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner").bind("C", kernel="gemm")
    assert {c.extents for c in calls(wl, s)} == {(4, 32, 64)}  # at k.outer: the whole of k in one call
    a, b = np.ones((16, 64), np.float32), np.ones((64, 32), np.float32)
    np.testing.assert_array_equal(pw.build(s, target="numpy").run(A=a, B=b)["C"], a @ b)
    with pytest.raises(pw.ScheduleError, match="no loop's nest matches"):
        lower_program(pw.zoo.softmax(8, 32), pw.zoo.softmax(8, 32).schedule().bind("Y", kernel="gemm"))


@pytest.mark.skipif("cpu" not in pw.targets(), reason="needs the cpu target")
def test_an_int8_convolution_tile_holds_two_channel_blocks_each_with_its_own_gemm_i8_call():
    """On a VNNI cpu the int8 register tile is 7 pixels x 2 blocks of 16 output channels (the
    blocks' calls side by side inside the channel loop, each broadcast of the input shared), as the
    float32 tile: ResNet-50 int8 0.89x -> 0.98x onnxruntime's speed (docs/performance.md)."""
    from ptowsp.backends.cpu.isa import target_cpu

    wl = pw.Workload("conv8")
    x, w = wl.input("X", (1, 64, 14, 14), "int8"), wl.input("W", (64, 64, 1, 1), "int8")
    c, r, s = pw.reduce_axis(64, "c"), pw.reduce_axis(1, "r"), pw.reduce_axis(1, "s")
    wl.output(wl.compute("Y", (1, 64, 14, 14), lambda n, o, y, z: pw.sum(
        pw.cast(x[n, c, y + r, z + s], "int32") * pw.cast(w[o, c, r, s], "int32"), axis=(c, r, s))))
    prog = pw.build(wl, target="cpu")
    rng = np.random.default_rng(3)
    xs = rng.integers(-128, 128, (1, 64, 14, 14), dtype=np.int8)
    ws = rng.integers(-128, 128, (64, 64, 1, 1), dtype=np.int8)
    np.testing.assert_array_equal(prog.run(X=xs, W=ws)["Y"], pw.reference(wl, X=xs, W=ws)["Y"])
    if target_cpu().vnni:  # the CPU the kernels are built for (PTOWSP_CPU), not the host
        code = next(prog.source(t, "loops") for t in prog.program.order if "gemm_i8" in prog.source(t, "loops"))
        assert re.search(r"unrolled for o_block\.inner in 0\.\.2:\n\s*gemm_i8<7x16x64>", code)  # a call per block
