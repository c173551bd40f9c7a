"""Tensor cores on the cuda target: `gemm_f16` / `gemm_bf16` calls as warp-wide mma.sync.

Without a GPU: the fragment layout, the PTX (assembled by ptxas where installed), the host
emulator against the reference, and the schedules a warp-level call refuses.  With one: the same
schedules on the hardware."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

import ptowsp as pw
from ptowsp.backends.cuda import generate
from ptowsp.backends.cuda.emulate import emulate
from ptowsp.backends.cuda.accumulators import WarpAccumulators
from ptowsp.backends.cuda.mma import divisible, fragment
from ptowsp.lower.ir import walk_stmts
from ptowsp.te import Expr, Op, const
from ptowsp.workloads import random_inputs
from ptowsp.workloads.zoo import layers
from tests.conformance.test_conformance import assert_close
from tests.conformance.warp_tensorize_fuzz import check

GPU = "cuda" in pw.targets()


def hgemm(m: int, n: int, k: int, dtype: str = "float16", relu: bool = False) -> pw.Workload:
    wl = pw.Workload("hgemm")
    a, b = wl.input("A", (m, k), dtype), wl.input("B", (k, n), dtype)
    c = layers.matmul(wl, "C", a, b, accumulate="float32")
    wl.output(wl.compute("Y", (m, n), lambda i, j: pw.maximum(c[i, j], 0.0)) if relu else c)
    return wl


def warp_schedule(wl: pw.Workload, block=(32, 16), warp=(16, 8), intrinsic="gemm_f16") -> pw.Schedule:
    """A block tile per CUDA block, a warp tile per warp (threadIdx.y, threadIdx.z), one call over all of k."""
    s = wl.schedule().tile("C", i=block[0], j=block[1]).split("C", "i.inner", warp[0]).split("C", "j.inner", warp[1])
    s.reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k", "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.z")
    return s.tensorize("C", "k", intrinsic)


def assert_assembles(code, tmp_path) -> None:
    """ptxas (where installed) accepts the PTX for the H100's sm_90."""
    if shutil.which("ptxas"):
        (tmp_path / "k.ptx").write_text(code.ptx)
        done = subprocess.run(["ptxas", "-arch=sm_90", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_the_lanes_hold_every_element_of_each_operand_once():
    for operand, (rows, cols) in {"A": (16, 16), "B": (16, 8), "C": (16, 8)}.items():
        held = [e for lane in range(32) for e in fragment(lane, operand)]
        assert sorted(held) == [(r, c) for r in range(rows) for c in range(cols)], operand
    assert fragment(5, "A")[:2] == [(1, 2), (1, 3)]  # lane 5: group 1, quad 1; a pair of columns per register


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_ptx_has_one_mma_per_block_and_step_and_assembles(dtype, tmp_path):
    intrinsic = {"float16": "gemm_f16", "bfloat16": "gemm_bf16"}[dtype]
    code = generate(warp_schedule(hgemm(32, 16, 16, dtype), intrinsic=intrinsic))
    kernel = code.kernels["C"]
    assert kernel.threads == (32, 2, 2) and kernel.blocks == (1, 1, 1)
    ptx = code.source("C", "ptx")
    kind = "f16" if dtype == "float16" else "bf16"
    assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32") == 1
    assert ptx.count("bar.warp.sync") == 2
    assert_assembles(code, tmp_path)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_emulated_warp_calls_match_the_reference(dtype):
    intrinsic = {"float16": "gemm_f16", "bfloat16": "gemm_bf16"}[dtype]
    wl = hgemm(16, 16, 32, dtype)  # two warps, two k steps: small, as the emulator runs every thread in Python
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    s = warp_schedule(wl, warp=(16, 8), intrinsic=intrinsic)
    assert_close(emulate(generate(s), inputs), expected, wl, 1e-4)
    for target in ("cpu", "aicore"):  # no tensor cores there: the loops the call stands for
        assert_close(pw.build(s, target=target).run(**inputs), expected, wl, 1e-4, target)


@pytest.mark.parametrize("pair", range(3))
def test_random_warp_tensorized_schedules(pair):
    """A few pairs of `python -m tests.conformance.warp_tensorize_fuzz` (small sizes: the emulator is slow)."""
    _, problem, schedule = check(1, pair, small=True)
    assert problem is None, f"{problem}\n{schedule}"


def staged_schedule(wl: pw.Workload, block=(32, 32), warp=(16, 16), k_block=16, bind_warps=True) -> pw.Schedule:
    """k blocks of A and B staged in shared memory, a gemm_f16 call per block."""
    s = wl.schedule().tile("C", i=block[0], j=block[1]).split("C", "i.inner", warp[0]).split("C", "j.inner", warp[1])
    s.split("C", "k", k_block).reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k.outer",
                                       "k.inner", "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    if bind_warps:
        s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.z")
    s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "B", "shared", "k.outer")
    return s.tensorize("C", "k.inner", "gemm_f16")


def test_staged_blocks_are_read_by_ldmatrix_and_the_accumulators_stay_in_registers(tmp_path):
    wl = hgemm(32, 32, 64)
    code = generate(staged_schedule(wl))
    held = [n for n in walk_stmts(code.kernels["C"].body) if isinstance(n, WarpAccumulators)]
    assert len(held) == 1 and held[0].body.var == "k.outer"  # C in registers across the k blocks
    ptx = code.source("C", "ptx")
    # per k block (4 of 16, the loop unrolled): A's 16 x 16 block and B's two 16 x 8 blocks, 2 mma.sync
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 4
    assert ptx.count("mma.sync") == 8
    assert_assembles(code, tmp_path)
    # emulated smaller (the emulator runs every thread in Python): one block of two warps, two k blocks
    small = hgemm(16, 16, 32)
    code = generate(staged_schedule(small, block=(16, 16), warp=(16, 8)))
    held = [n for n in walk_stmts(code.kernels["C"].body) if isinstance(n, WarpAccumulators)]
    assert [n.body.var for n in held] == ["k.outer"]
    inputs = random_inputs(small)
    assert_close(emulate(code, inputs), pw.reference(small, **inputs), small, 1e-4)


def test_a_transposed_b_is_read_element_by_element_where_ldmatrix_needs_rows(tmp_path):
    """B stored [n, k] (attention's K): its staged window runs along k with stride 1, not along n, so
    `ldmatrix` (16-byte rows of the pattern's columns) reads A only; the lanes load B's elements by
    the window's strides.  Emulated against the reference, and assembled (not run: no GPU here)."""
    wl = pw.Workload("a_kt")
    a, kt = wl.input("A", (16, 32), "float16"), wl.input("K", (16, 32), "float16")
    r = pw.reduce_axis(32, "k")
    wl.output(wl.compute("C", (16, 16), lambda i, j: pw.sum(pw.cast(a[i, r], "float32") * pw.cast(kt[j, r], "float32"),
                                                            axis=r)))
    s = wl.schedule().tile("C", i=16, j=16).split("C", "i.inner", 16).split("C", "j.inner", 16)
    s.split("C", "k", 16).reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k.outer", "k.inner",
                                  "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.z")
    s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "K", "shared", "k.outer").tensorize("C", "k.inner",
                                                                                                     "gemm_f16")
    code = generate(s)
    ptx = code.source("C", "ptx")
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2  # A's 16 x 16 block, one per k block
    assert ".trans" not in ptx and ptx.count("mma.sync") == 4  # two k blocks x two 16 x 8 halves of n
    inputs = random_inputs(wl)
    assert_close(emulate(code, inputs), pw.reference(wl, **inputs), wl, 1e-4)
    assert_assembles(code, tmp_path)


def test_every_k_block_reads_its_own_shared_fragments():
    """Found on an H100: LLVM took `ldmatrix` for a pure function of its address and, with the k-block
    loop unrolled, reused the first block's fragments for the second (the buffer is refilled in
    between).  It reads memory now: one ldmatrix of A and one of B per mma.sync here."""
    wl = hgemm(16, 8, 32)
    ptx = generate(staged_schedule(wl, block=(16, 8), warp=(16, 8), k_block=16)).ptx
    assert ptx.count("mma.sync") == 2  # the k-block loop of two, unrolled
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared") == 2
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x2.trans.shared") == 2


def test_accumulators_stay_in_memory_where_the_window_moves_with_the_loop():
    wl = hgemm(16, 16, 16)  # one block of two warps and one k block: the window moves with the warps' loop
    # the warps' loops run serially around the call
    code = generate(staged_schedule(wl, block=(16, 16), warp=(16, 8), bind_warps=False))
    assert not any(isinstance(n, WarpAccumulators) and n.body.var.startswith(("i.", "j."))
                   for n in walk_stmts(code.kernels["C"].body))
    inputs = random_inputs(wl)
    assert_close(emulate(code, inputs), pw.reference(wl, **inputs), wl, 1e-4)


def test_divisibility_is_proved_only_where_it_holds():
    x, y = (Expr(Op.VAR, "int64", (), (name, 16)) for name in "xy")
    assert divisible(x * 64 + y * 8 + const(16, "int64"), 8)
    assert divisible((x * 4 + y * 2) * 4, 8)
    assert not divisible(x * 64 + y, 8)
    assert not divisible(x * 4 + const(8, "int64"), 8)
    assert not divisible(x // 2 * 8 + const(1, "int64"), 8)


def test_a_loop_bound_to_the_lanes_is_refused():
    s = hgemm(32, 16, 16).schedule().tile("C", i=16, j=8).reorder("C", "i.outer", "j.outer", "k", "i.inner",
                                                                    "j.inner")
    s.bind("C", "i.outer", "threadIdx.x").tensorize("C", "k", "gemm_f16")
    with pytest.raises(pw.ScheduleError, match="warp-level call whose 32 lanes are threadIdx.x"):
        generate(s)


def test_operands_a_thread_holds_alone_are_refused():
    s = warp_schedule(hgemm(32, 16, 16)).cache_read("C", "A", "local", "j.inner.outer")
    with pytest.raises(pw.ScheduleError, match="A.local is local memory, which each thread holds alone"):
        generate(s)


def test_a_call_that_is_not_whole_instructions_is_refused():
    s = hgemm(32, 12, 16).schedule().tile("C", i=16, j=12).reorder("C", "i.outer", "j.outer", "k", "i.inner",
                                                                     "j.inner")
    with pytest.raises(pw.BuildError, match=r"gemm_f16<16x12x16> on cuda runs mma.sync m16n8k16"):
        generate(s.tensorize("C", "k", "gemm_f16"))


def test_an_epilogue_fused_into_a_warp_call_is_refused():
    wl = hgemm(32, 16, 16, relu=True)
    with pytest.raises(pw.ScheduleError, match="leave it a kernel of its own"):
        generate(warp_schedule(wl).fuse_by_category())


def test_gemm_has_no_cuda_implementation():
    s = pw.zoo.matmul(16, 16, 16).schedule().tile("C", i=16, j=16).split("C", "k", 16)
    s.reorder("C", "i.outer", "j.outer", "k.outer", "k.inner", "i.inner", "j.inner").tensorize("C", "k.inner", "gemm")
    with pytest.raises(pw.BuildError, match="intrinsic 'gemm' has no cuda implementation"):
        generate(s)


@pytest.mark.skipif(not GPU, reason="no GPU: the cuda target is not registered on this machine")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_warp_calls_on_the_gpu(dtype):
    intrinsic = {"float16": "gemm_f16", "bfloat16": "gemm_bf16"}[dtype]
    wl = hgemm(256, 128, 512, dtype)
    inputs = random_inputs(wl)
    got = pw.build(warp_schedule(wl, block=(64, 64), warp=(32, 32), intrinsic=intrinsic), target="cuda").run(**inputs)
    assert_close(got, pw.reference(wl, **inputs), wl, 1e-4)


@pytest.mark.skipif(not GPU, reason="no GPU: the cuda target is not registered on this machine")
def test_staged_warp_calls_on_the_gpu():
    wl = hgemm(256, 128, 512)
    inputs = random_inputs(wl)
    for warp, k_block in (((32, 32), 32), ((32, 8), 16), ((16, 16), 64)):
        got = pw.build(staged_schedule(wl, (64, 64), warp, k_block), target="cuda").run(**inputs)
        assert_close(got, pw.reference(wl, **inputs), wl, 1e-4, f"{warp} {k_block}")


@pytest.mark.skipif(not GPU, reason="no GPU: the cuda target is not registered on this machine")
def test_random_warp_tensorized_schedules_on_the_gpu():
    for pair in range(40):
        _, problem, schedule = check(random.Random(pair).randrange(100), pair)
        assert problem is None, f"{problem}\n{schedule}"
