"""`prog.source(task, kind)`: the loop nest, and the code the target generates from it, cached or not."""

from __future__ import annotations

import pytest

import ptowsp as pw
from ptowsp.backends.cpu import jit
from ptowsp.backends.cuda import generate


def _workload() -> pw.Workload:
    return pw.zoo.softmax(64, 64)


def test_llvm_and_asm_of_a_cached_build_are_those_of_a_fresh_one():
    first = pw.build(_workload(), target="cpu")
    fresh = {kind: first.source("Y", kind) for kind in ("llvm", "asm")}
    before = jit.COMPILATIONS
    cached = pw.build(_workload(), target="cpu")
    assert cached._executable.from_cache and jit.COMPILATIONS == before  # served from the cache
    assert {kind: cached.source("Y", kind) for kind in ("llvm", "asm")} == fresh
    assert "define void @ptowsp_Y(" in fresh["llvm"] and "ptowsp_Y:" in fresh["asm"]
    assert "ptowsp_Y_max" not in fresh["asm"]  # only the task asked for


def test_asm_shows_vector_code_for_a_vectorized_loop():
    s = _workload().schedule().split("Y", "j", 8).vectorize("Y", "j.inner")
    asm = pw.build(s, target="cpu").source("Y", "asm")
    assert any(op in asm for op in ("vdivps", "divps", "vmulps", "mulps"))


def test_aicore_shows_the_host_code_that_computes_its_numbers():
    assert "ptowsp_Y:" in pw.build(_workload(), target="aicore").source("Y", "asm")


@pytest.mark.parametrize("target, kind, message", [
    ("cpu", "ptx", "the cpu target shows 'loops', 'llvm', 'asm'"),
    ("numpy", "asm", "the numpy target shows 'loops'"),
    ("cpu", "LLVM", "'LLVM'"),
])
def test_a_kind_the_target_does_not_generate_is_refused(target, kind, message):
    with pytest.raises(pw.BuildError, match=message):
        pw.build(_workload(), target=target).source("Y", kind)


def test_a_task_without_a_kernel_says_why():
    s = _workload().schedule().compute_inline("Y_exp")
    with pytest.raises(pw.BuildError, match="'Y_exp' has no kernel: it is inlined"):
        pw.build(s, target="cpu").source("Y_exp", "asm")


def test_cuda_code_shows_one_kernel_as_llvm_and_ptx_without_a_gpu():
    code = generate(_workload().schedule())
    ptx = code.source("Y_sum", "ptx")
    assert ptx.startswith(".visible .entry ptowsp_2_Y_sum(") and ptx.endswith("}") and "Y_max" not in ptx
    assert code.source("Y_sum", "llvm").startswith('define ptx_kernel void @"ptowsp_2_Y_sum"(')
