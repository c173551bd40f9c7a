"""Compile LLVM modules for the host CPU, and the key their object code is cached under.

The host's real CPU name and features, opt level 3.  The optimised object
code is cached (cache.py) with a small manifest of its kernels, keyed by
what was compiled (the workload and its schedule), the CPU, the LLVM
version and the compiler's own source, so a second build of the same
schedule skips lowering, LLVM IR generation, optimisation and code
generation.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib

from collections.abc import Sequence

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from ptowsp.errors import BuildError


def new_target_machine() -> llvm.TargetMachine:
    """A target machine for the host: its real CPU name and features, opt level 3."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True
    )


@functools.cache
def vector_bytes() -> int:
    """The width of the host's widest SIMD registers (64: AVX-512, 32: AVX, else 16): what a
    schedule's vector and register-tile sizes should be multiples of."""
    features = llvm.get_host_cpu_features()
    return 64 if features.get("avx512f") else 32 if features.get("avx") else 16


@functools.cache
def target_machine() -> llvm.TargetMachine:
    """The machine code generation uses (an MCJIT engine owns its own: see LoadedObject)."""
    return new_target_machine()


@functools.cache
def _compiler_digest() -> str:
    """Changes whenever the compiler (lowering or code generation) changes, so stale objects are
    never reused."""
    package = pathlib.Path(__file__).parents[2]
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(package.rglob("*.py")))).hexdigest()


def cache_key(description: str) -> str:
    """Key for what is compiled: its description, the host CPU, LLVM and the compiler's source."""
    target_machine()  # initialises LLVM's native target
    parts = [description, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
             llvm.get_process_triple(), llvmlite.__version__, str(llvm.llvm_version_info), _compiler_digest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def optimise(module: ir.Module, tm: llvm.TargetMachine, vectorize: bool,
             linked: Sequence[str] = ()) -> llvm.ModuleRef:
    """Parse and verify the module (with the LLVM IR texts `linked` into it: declared intrinsics),
    then run LLVM's -O3 pipeline for `tm` (with or without the loop vectorizer).

    The SLP vectorizer stays off: on LLVM 22.1 (llvmlite 0.50) it miscompiled an int8 gather whose
    rows were unrolled by 8 (`T[(idx[i] + 1) % 13, 5 - j]` read the wrong row; the fuzz's
    int8_gather seed 42, tests/backends/test_build.py), one of a known family of SLP
    miscompilations in LLVM's tracker.  Loops a schedule vectorizes are vector code already; side
    by side, matmul, conv2d, softmax, layernorm, camera_pipe and the transformer block ran within
    the machine's noise without it (docs/performance.md)."""
    parsed = llvm.parse_assembly(str(module))
    for text in linked:
        try:
            other = llvm.parse_assembly(text)
            other.verify()
        except RuntimeError as e:
            raise BuildError(f"the LLVM IR of a declared intrinsic does not parse: {e}") from None
        other.triple = parsed.triple
        parsed.link_in(other)
    parsed.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = vectorize
    options.slp_vectorization = False
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(parsed, builder)
    return parsed


COMPILATIONS = 0  # LLVM compilations in this process (a build served from the cache makes none)


def optimised_module(module: ir.Module, linked: Sequence[str] = ()) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """The module (and the IR `linked` into it) after -O3 for the host, and the machine that emits its code."""
    module.triple = llvm.get_process_triple()
    tm = target_machine()
    return optimise(module, tm, vectorize=True, linked=linked), tm


def compile_object(module: ir.Module, linked: Sequence[str] = ()) -> bytes:
    """Optimise and compile the module for the host."""
    global COMPILATIONS
    COMPILATIONS += 1
    optimised, tm = optimised_module(module, linked)
    return tm.emit_object(optimised)


class LoadedObject:
    """Object code linked into the process; keeps the engine alive while functions are used."""

    def __init__(self, data: bytes):
        # the engine takes ownership of the target machine it is given, so it gets a fresh one
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()

    def address(self, symbol: str) -> int:
        return self.engine.get_function_address(symbol)
