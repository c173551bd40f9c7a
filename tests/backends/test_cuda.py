"""The cuda target without a GPU: PTX for every conformance workload, the SPMD rewrite run by the
host emulator against the reference, the default binding, and the errors a GPU schedule can meet.
Tests that need a GPU skip with the reason where none is present."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
import types

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import ptowsp as pw
from ptowsp.backends import cuda as cuda_target
from ptowsp.backends.build import computed_schedule
from ptowsp.backends.cuda import CudaBackend, driver, generate
from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.isa import target_cpu
from ptowsp.backends.cpu.jit import LoadedObject, new_target_machine
from ptowsp.backends.cuda.codegen import NoLibm
from ptowsp.backends.cuda.emulate import emulate
from ptowsp.backends.cuda.spmd import MAX_STATIC_SHARED_BYTES
from ptowsp.lower import lower_program
from ptowsp.lower.ir import Barrier, walk_stmts
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.random_schedule import random_schedule
from tests.backends import fake_cuda_driver
from tests.conformance.catalogue import CASES, fused_schedule, hand_schedule, random_inputs
from tests.conformance.test_conformance import assert_close

PTXAS = shutil.which("ptxas")
GPU = "cuda" in pw.targets()


def cuda_default(wl: pw.Workload) -> pw.Schedule:
    """What pw.build(wl, target="cuda") compiles."""
    return default_schedule(wl, vector_bytes=CudaBackend.vector_bytes, workers=2,
                            choose=CudaBackend().schedule_choices(None))


def gpu_matmul(wl: pw.Workload, block: int = 8, thread: int = 2, k_block: int = 4) -> pw.Schedule:
    """TVM's shared-memory matmul: a block tile per CUDA block, a register tile per thread, A and B
    staged in shared memory per k block, the accumulators in registers."""
    s = wl.schedule().tile("C", i=block, j=block).split("C", "i.inner", thread).split("C", "j.inner", thread)
    s.split("C", "k", k_block).reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k.outer",
                                       "k.inner", "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.x")
    s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "B", "shared", "k.outer")
    return s.cache_write("C", "local")


def assemble(ptx: str, tmp_path) -> None:
    """ptxas accepts the PTX for sm_90 (the check the driver's JIT makes on a GPU)."""
    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    done = subprocess.run([PTXAS, "-arch=sm_90", str(source), "-o", str(tmp_path / "kernel.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ptx_for_every_conformance_workload(case, tmp_path):
    wl = case.make()
    # the GPU's own conformance run (tests/conformance, on a machine with one) takes every schedule
    # (random schedules: the emulated check below, and `make fuzz`)
    schedules = [cuda_default(wl), wl.schedule(), fused_schedule(wl), hand_schedule(wl).fuse_by_category()]
    for schedule in schedules:
        code = generate(computed_schedule(schedule))  # as pw.build does: empty tasks compute nothing
        entries = re.findall(r"\.visible \.entry (\w+)\(", code.ptx)
        assert sorted(entries) == sorted(code.symbols[t] for t in code.program.kernels)
        for task, kernel in code.kernels.items():
            assert ("blockIdx" in str(kernel.body) or "threadIdx" in str(kernel.body)) == (
                kernel.blocks != (1, 1, 1) or kernel.threads != (1, 1, 1)), task
        barriers = any(isinstance(st, Barrier) for k in code.kernels.values() for st in walk_stmts(k.body))
        assert ("bar.sync" in code.ptx) == barriers
        # shared memory where the schedule asks (LLVM may keep a cache_write buffer in registers instead)
        assert ".shared" not in code.ptx or any(k.shared for k in code.kernels.values())
        assert not barriers or ".shared" in code.ptx
        if PTXAS:
            assemble(code.ptx, tmp_path)


def test_ptxas_is_there_to_check_the_ptx():
    if PTXAS is None:
        pytest.skip("ptxas (CUDA toolkit) is not installed: PTX is generated but not assembled")
    assert subprocess.run([PTXAS, "--version"], capture_output=True).returncode == 0


EMULATED = ["matmul_int32", "matmul_float16", "matmul_prime", "softmax", "softmax_prime", "layernorm", "rmsnorm",
            "attention_causal", "conv2d_strided", "conv2d_unpadded", "elementwise_chain", "transpose",
            "broadcast_add", "stencil_blur", "int_arith", "float16_chain", "two_outputs", "opaque_middle",
            "size_one", "compare_to_bool", "casts", "guarded_reduction", "float64_matmul", "multi_axis_sum",
            "gather_rows", "uint8_elementwise", "int8_matmul", "uint16_reduction", "uint64_gather",
            "bfloat16_elementwise", "histogram_uint8", "scatter_add_repeated", "scatter_max", "bilateral_grid",
            ]  # the catalogue less its largest workloads (the emulator runs ~1e5 statements a second)
EMULATED += ["argmax_rows", "argmin_ties", "argmax_two_axes", "argmax_in_expression", "reducer_product",
             "reducer_logsumexp", "pair_logsumexp", "pair_argmax", "pair_mean_variance"]
EMULATED += ["scan_decay", "scan_fibonacci", "scan_of_producer", "zoo_lstm"]


@pytest.mark.parametrize("case", [c for c in CASES if c.name in EMULATED], ids=lambda c: c.name)
def test_emulated_gpu_matches_the_reference(case):
    """The threads of each block run in lockstep between barriers on the host: what the GPU computes."""
    wl = case.make()
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    rtol = max(case.rtol, 1e-5)
    for schedule in (cuda_default(wl), fused_schedule(wl), random_schedule(wl, 2)):
        got = emulate(generate(schedule), inputs)
        assert_close(got, expected, wl, rtol, context=f"emulated cuda under\n{schedule}")


@pytest.mark.parametrize("shape", [(16, 16, 16), (13, 24, 9)])
def test_shared_memory_matmul(shape):
    """Cooperative fills, barriers and register accumulators; a non-dividing shape is guarded
    inside the thread's tile, so every thread still reaches every barrier."""
    n, m, k = shape
    wl = pw.zoo.matmul(n, m, k)
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    schedule = gpu_matmul(wl, block=8, thread=2, k_block=4) if n == 16 else gpu_matmul(wl, 8, 1, 4)
    code = generate(schedule)
    kernel = code.kernels["C"]
    assert kernel.blocks == (-(-m // 8), -(-n // 8), 1)
    assert sorted(b.name for b in kernel.shared) == ["A.shared", "B.shared"]
    assert ".shared" in code.ptx and "bar.sync" in code.ptx
    local = [b for b in code.kernels["C"].body.__repr__().split("Buffer(")[1:] if "C.local" in b]
    assert local and "shape=(1, 1, 1, 1" in local[0]  # the thread's own tile: dims of thread axes dropped
    assert_close(emulate(code, inputs), expected, wl, 1e-5)
    assert_close(pw.build(schedule, target="cpu").run(**inputs), expected, wl, 1e-5)


def test_default_binding_spreads_a_kernel_over_blocks_and_threads():
    wl = pw.zoo.elementwise_chain((64, 45), 3)
    code = generate(wl.schedule().fuse_by_category())
    (kernel,) = code.kernels.values()
    assert kernel.threads == (240, 1, 1) and kernel.blocks == (12, 1, 1)  # 2880 = 12 x 240: no tail
    prime = pw.zoo.elementwise_chain((31, 37), 2)
    code = generate(prime.schedule().fuse_by_category())
    (kernel,) = code.kernels.values()
    assert kernel.threads == (256, 1, 1) and kernel.blocks == (5, 1, 1)  # 1147 is 31 x 37: a guarded tail
    inputs = random_inputs(prime)
    assert_close(emulate(code, inputs), pw.reference(prime, **inputs), prime, 1e-5)


def test_task_grid_loops_are_separate_launches():
    wl = pw.zoo.matmul(16, 8, 4)
    s = wl.schedule().split("C", "i", 4).parallel("C", "i.outer")
    code = generate(s)
    assert code.kernels["C"].grid == (("i.outer", 4),)
    assert ".param .u64 " in code.ptx.split("ptowsp_0_C(")[1].split(")")[0]  # the grid coordinate
    inputs = random_inputs(wl)
    assert_close(emulate(code, inputs), pw.reference(wl, **inputs), wl, 1e-5)


def test_epilogue_fusion_moves_thread_bindings_to_the_epilogue():
    wl = pw.zoo.mlp(8, 16, 8, 4)
    s = wl.schedule().tile("H", i=4, j=4).bind("H", "i.outer", "blockIdx.x").bind("H", "j.inner", "threadIdx.x")
    code = generate(s.fuse_by_category())
    assert any(k.blocks == (2, 1, 1) and k.threads == (4, 1, 1) for k in code.kernels.values())
    inputs = random_inputs(wl)
    assert_close(emulate(code, inputs), pw.reference(wl, **inputs), wl, 1e-4)


def test_illegal_bindings_raise_schedule_errors():
    wl = pw.zoo.matmul(64, 64, 64)
    with pytest.raises(pw.ScheduleError, match="thread axis is bound to two loops"):
        wl.schedule().bind("C", "i", "threadIdx.x").bind("C", "j", "threadIdx.x")
    with pytest.raises(pw.ScheduleError, match="4096 threads per block exceed the limit of 1024"):
        wl.schedule().bind("C", "i", "threadIdx.y").bind("C", "j", "threadIdx.x")
    with pytest.raises(pw.ScheduleError, match="k is a reduction loop"):
        wl.schedule().bind("C", "k", "threadIdx.x")
    big = pw.zoo.matmul(256, 256, 256)
    with pytest.raises(pw.ScheduleError, match=r"task 'C': .* bytes of shared memory .* exceed the 49152 bytes"):
        generate(gpu_matmul(big, block=128, thread=8, k_block=64))
    assert MAX_STATIC_SHARED_BYTES == 49152
    odd = pw.zoo.matmul(20, 20, 8)  # threads of 8 x 8 over a 20-wide tile: a guarded tail around the barrier
    s = odd.schedule().split("C", "i", 8).bind("C", "i.outer", "blockIdx.x").bind("C", "i.inner", "threadIdx.x")
    s.cache_read("C", "B", "shared", "k")
    with pytest.raises(pw.ScheduleError, match="shared buffer B.shared is filled where threads of a block disagree"):
        generate(s)


def test_float64_math_without_libm_is_refused():
    wl = pw.Workload("exp64")
    x = wl.input("x", (8,), dtype="float64")
    wl.output(wl.compute("y", (8,), lambda i: pw.exp(x[i])))
    with pytest.raises(pw.BuildError, match="float64 exp is not supported on the cuda target"):
        generate(wl.schedule())


class _HostNoLibm(NoLibm, KernelEmitter):
    """The cuda target's math code generation, compiled for the host so it can run here."""


def run_math_on_host(wl: pw.Workload, inputs: dict) -> dict:
    program = lower_program(wl, wl.schedule())
    module = ir.Module()
    for name, kernel in program.kernels.items():
        _HostNoLibm(module, kernel, f"k_{name}").emit()
    module.triple = llvm.get_process_triple()
    parsed = llvm.parse_assembly(str(module))
    loaded = LoadedObject(new_target_machine(target_cpu("host")).emit_object(parsed), target_cpu("host"))
    arrays = {**inputs, **{t: np.zeros(wl.tensor(t).shape, wl.tensor(t).dtype) for t in program.order}}
    for name, kernel in program.kernels.items():
        buffers = [arrays[b.name] for b in (*kernel.inputs, *kernel.outputs)]
        function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(buffers))(loaded.address(f"k_{name}"))
        function(*[b.ctypes.data for b in buffers])
    return {name: arrays[name] for name in wl.outputs}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_math_without_libm_matches_numpy(dtype):
    """exp, log, tanh, sigmoid, erf and pow as the GPU computes them (float16 and bfloat16 through float32),
    including negative bases, zero exponents and small integer powers."""
    wl = pw.Workload("math")
    x, y = wl.input("x", (12,), dtype=dtype), wl.input("y", (12,), dtype=dtype)
    formulas = {"exp": lambda i: pw.exp(x[i]), "log": lambda i: pw.log(pw.abs(x[i]) + 0.5),
                "tanh": lambda i: pw.tanh(x[i]), "sigmoid": lambda i: pw.sigmoid(x[i]),
                "erf": lambda i: pw.erf(x[i]), "pow": lambda i: x[i] ** y[i], "cube": lambda i: x[i] ** 3,
                "inverse_square": lambda i: (x[i] + 5.0) ** -2}
    for name, fn in formulas.items():
        wl.output(wl.compute(name, (12,), fn))
    inputs = {"x": np.array([-2, -2, -2, 0, 0, 1, 3, 0.25, -0.7, 4.5, -3.1, 1.7], dtype),
              "y": np.array([3, 2, 0.5, 0, 2, 7, -1, 1.5, 4, 0.3, -2, 2.5], dtype)}
    with np.errstate(all="ignore"):
        expected = pw.reference(wl, **inputs)
    got = run_math_on_host(wl, inputs)
    for name in formulas:
        rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 8e-3}[dtype]  # bfloat16: one ulp is 2**-8
        np.testing.assert_allclose(got[name].astype(np.float64), expected[name].astype(np.float64), rtol=rtol,
                                   atol=1e-6, err_msg=name)


def test_unavailable_target_says_why():
    if GPU:
        pytest.skip("a GPU is present: the target is available")
    reason = CudaBackend().unavailable_reason()
    assert reason is not None and "cuda" not in pw.targets()
    with pytest.raises(pw.BuildError, match=re.escape(f"target 'cuda' is unavailable here: {reason}")):
        pw.build(pw.zoo.matmul(4, 4, 4), target="cuda")


@pytest.mark.skipif(not GPU, reason="no CUDA driver and GPU on this machine")
def test_on_the_gpu_with_kernel_times_from_cuda_events():
    wl = pw.zoo.matmul(64, 48, 80)
    inputs = random_inputs(wl)
    prog = pw.build(gpu_matmul(wl, block=16, thread=2, k_block=8), target="cuda")
    assert_close(prog.run(**inputs), pw.reference(wl, **inputs), wl, 1e-5)
    (event,) = [e for e in prog.trace.events if e.name == "C"]
    assert 0 < event.active <= event.end - event.start


@pytest.fixture
def fake_gpu(monkeypatch):
    """The cuda target on the fake driver: launches run on the host emulator."""
    kernels: dict = {}
    fake = fake_cuda_driver.make(kernels)
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = fake
    package = types.ModuleType("cuda")
    package.bindings = bindings
    for name, module in {"cuda": package, "cuda.bindings": bindings, "cuda.bindings.driver": fake}.items():
        monkeypatch.setitem(sys.modules, name, module)
    real_generate = cuda_target.generate

    def recording(*args, **kwargs):
        code = real_generate(*args, **kwargs)
        kernels.update({code.symbols[t]: k for t, k in code.kernels.items()})
        return code

    monkeypatch.setattr(cuda_target, "generate", recording)
    driver.unavailable_reason.cache_clear()
    driver.device.cache_clear()
    try:
        yield fake
    finally:
        driver.unavailable_reason.cache_clear()
        driver.device.cache_clear()
        vars(driver._current).clear()


@pytest.mark.parametrize("name", ["opaque_middle", "matmul_prime", "two_outputs", "size_one"])
def test_executable_through_a_fake_driver(fake_gpu, name):
    """Memory, uploads, argument order, launch shapes, host tasks and event times, end to end."""
    assert "cuda" in pw.targets()
    case = next(c for c in CASES if c.name == name)
    wl = case.make()
    inputs = random_inputs(wl)
    before = {k: v.copy() for k, v in inputs.items()}
    expected = pw.reference(wl, **inputs)
    for schedule in (hand_schedule(wl), wl):
        prog = pw.build(schedule, target="cuda", workers=2)
        for _ in range(2):  # device memory is reused by the next run
            assert_close(prog.run(**inputs), expected, wl, max(case.rtol, 1e-5))
        kernels = [e for e in prog.trace.events if e.name in prog.program.kernels]
        assert kernels and all(e.active == fake_cuda_driver.KERNEL_MILLISECONDS / 1e3 for e in kernels)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    assert fake_gpu.launches and all(isinstance(f, str) for f, _ in fake_gpu.launches)


def test_shared_memory_matmul_through_a_fake_driver(fake_gpu):
    wl = pw.zoo.matmul(16, 24, 12)
    inputs = random_inputs(wl)
    prog = pw.build(gpu_matmul(wl, block=8, thread=2, k_block=4), target="cuda", workers=1)
    assert_close(prog.run(**inputs), pw.reference(wl, **inputs), wl, 1e-5)
    assert [f for f, _ in fake_gpu.launches] == ["ptowsp_0_C"]
