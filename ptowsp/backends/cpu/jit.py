"""Compile LLVM modules for the chosen CPU (isa.py: the host or a named level), and the key their
object code is cached under.

The CPU's name and features, opt level 3.  The optimised object code is
cached (cache.py) with a small manifest of its kernels, keyed by what was
compiled (the workload and its schedule), the CPU, the LLVM version and the
compiler's own source, so a second build of the same schedule skips
lowering, LLVM IR generation, optimisation and code generation.
"""

from __future__ import annotations

import hashlib
import pathlib

from collections.abc import Sequence

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from ptowsp.backends.cpu.isa import TargetCpu
from ptowsp.errors import BuildError
from ptowsp.once import once


def new_target_machine(cpu: TargetCpu) -> llvm.TargetMachine:
    """A target machine for `cpu`: its CPU name and features, opt level 3."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu.cpu, features=cpu.features, opt=3, jit=True)


@once
def target_machine(cpu: TargetCpu) -> llvm.TargetMachine:
    """The machine code generation for `cpu` uses (an MCJIT engine owns its own: see LoadedObject)."""
    return new_target_machine(cpu)


@once
def _compiler_digest() -> str:
    """Changes whenever the compiler (lowering or code generation) changes, so stale objects are
    never reused."""
    package = pathlib.Path(__file__).parents[2]
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(package.rglob("*.py")))).hexdigest()


def cache_key(description: str, cpu: TargetCpu) -> str:
    """Key for what is compiled: its description, the CPU it is compiled for, LLVM and the compiler's source."""
    target_machine(cpu)  # initialises LLVM's native target
    parts = [description, cpu.level, cpu.cpu, cpu.features, llvm.get_process_triple(), llvmlite.__version__, str(llvm.llvm_version_info), _compiler_digest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def optimise(module: ir.Module | Sequence[str], tm: llvm.TargetMachine, vectorize: bool,
             linked: Sequence[str] = ()) -> llvm.ModuleRef:
    """Parse and verify the module, or the modules whose IR texts are given (linked into one: a build's
    kernels, each emitted on its own), with the LLVM IR texts `linked` into it (declared intrinsics),
    then run LLVM's -O3 pipeline for `tm` (with or without the loop vectorizer).

    The SLP vectorizer stays off: on LLVM 22.1 (llvmlite 0.50) it miscompiled an int8 gather whose
    rows were unrolled by 8 (`T[(idx[i] + 1) % 13, 5 - j]` read the wrong row; the fuzz's
    int8_gather seed 42, tests/backends/test_build.py), one of a known family of SLP
    miscompilations in LLVM's tracker.  Loops a schedule vectorizes are vector code already; side
    by side, matmul, conv2d, softmax, layernorm, camera_pipe and the transformer block ran within
    the machine's noise without it (docs/performance.md and its git history)."""
    texts = [str(module)] if isinstance(module, ir.Module) else list(module)
    parsed = llvm.parse_assembly(texts[0])
    for text in texts[1:]:
        part = llvm.parse_assembly(text)
        part.triple = parsed.triple
        parsed.link_in(part)
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


def host_module(name: str) -> ir.Module:
    """An empty module for this host's triple, for kernels compiled here."""
    module = ir.Module(name=name)
    module.triple = llvm.get_process_triple()
    return module


COMPILATIONS = 0  # LLVM compilations in this process (a build served from the cache makes none)


def optimised_module(module: ir.Module | Sequence[str], cpu: TargetCpu, linked: Sequence[str] = ()
                     ) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """The module (or modules' texts, and the IR `linked` into it) after -O3 for `cpu`, and the machine
    that emits its code."""
    if isinstance(module, ir.Module):
        module.triple = llvm.get_process_triple()
    tm = target_machine(cpu)
    return optimise(module, tm, vectorize=True, linked=linked), tm


def compile_object(module: ir.Module | Sequence[str], cpu: TargetCpu, linked: Sequence[str] = ()) -> bytes:
    """Optimise and compile the module (or modules' texts, linked into one) for `cpu`."""
    global COMPILATIONS
    COMPILATIONS += 1
    optimised, tm = optimised_module(module, cpu, linked)
    return tm.emit_object(optimised)


class LoadedObject:
    """Object code linked into the process; keeps the engine alive while functions are used."""

    def __init__(self, data: bytes, cpu: TargetCpu):
        # the engine takes ownership of the target machine it is given, so it gets a fresh one
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine(cpu))
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()

    def address(self, symbol: str) -> int:
        return self.engine.get_function_address(symbol)
