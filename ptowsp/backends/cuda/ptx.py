"""LLVM IR -> PTX with the NVPTX backend bundled in llvmlite: no CUDA toolkit needed.

The PTX is written for one GPU architecture (`sm_90` for an H100, the
default when no device is known) and a PTX ISA version that architecture
requires; the driver compiles it to machine code when the module is loaded.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from ptowsp.backends.cpu.jit import optimise
from ptowsp.errors import BuildError
from ptowsp.once import once

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = 90  # H100 / H200
# the PTX ISA version each architecture first appeared in (PTX ISA release notes)
_PTX_VERSION = {60: 50, 61: 50, 70: 60, 72: 61, 75: 63, 80: 70, 86: 71, 87: 74, 89: 78, 90: 78, 100: 86, 120: 87}
_MIN_PTX = 80  # LLVM writes at least this version for sm_90 targets; the drivers that run an H100 read it


def ptx_version(arch: int) -> int:
    known = [a for a in _PTX_VERSION if a <= arch]
    if not known:
        raise BuildError(f"compute capability {arch // 10}.{arch % 10} is older than the cuda target supports "
                         f"(sm_{min(_PTX_VERSION)} or newer)")
    return max(_PTX_VERSION[max(known)], _MIN_PTX if arch >= 90 else 0)


@once
def target_machine(arch: int = DEFAULT_ARCH) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        target = llvm.Target.from_triple(TRIPLE)
    except RuntimeError as e:
        raise BuildError(f"this llvmlite has no NVPTX backend: {e}") from None
    return target.create_target_machine(cpu=f"sm_{arch}", features=f"+ptx{ptx_version(arch)}", opt=3)


def compile_ptx(module: ir.Module, arch: int = DEFAULT_ARCH) -> str:
    """Optimise the module (no loop vectorizer: threads are scalar) and write it as PTX text."""
    module.triple = TRIPLE
    tm = target_machine(arch)
    module.data_layout = str(tm.target_data)
    return tm.emit_assembly(optimise(module, tm, vectorize=False))
