"""Compile LLVM modules for the host CPU, with an on-disk object cache.

The host's real CPU name and features, opt level 3.  The optimised object
code is cached under `~/.cache/ptowsp/cpu` (or $PTOWSP_CACHE_DIR), keyed by the
IR text, the CPU and the LLVM version, so a second build of the same kernels
skips optimisation and code generation.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import tempfile

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir


def new_target_machine() -> llvm.TargetMachine:
    """A target machine for the host: its real CPU name and features, opt level 3."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True
    )


@functools.cache
def target_machine() -> llvm.TargetMachine:
    """The machine code generation uses (an MCJIT engine owns its own: see LoadedObject)."""
    return new_target_machine()


def cache_dir() -> pathlib.Path:
    root = os.environ.get("PTOWSP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ptowsp")
    return pathlib.Path(root) / "cpu"


def _key(text: str) -> str:
    target_machine()  # initialises LLVM's native target
    parts = [text, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), llvm.get_process_triple(),
             llvmlite.__version__, str(llvm.llvm_version_info)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def compile_object(module: ir.Module) -> tuple[bytes, bool]:
    """Optimised object code for the module, and whether it came from the cache."""
    module.triple = llvm.get_process_triple()
    text = str(module)
    path = cache_dir() / f"{_key(text)}.o"
    if path.exists():
        return path.read_bytes(), True
    tm = target_machine()
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(parsed, builder)
    data = tm.emit_object(parsed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:  # atomic: never a torn file
        tmp.write(data)
    os.replace(tmp.name, path)
    return data, False


class LoadedObject:
    """Object code linked into the process; keeps the engine alive while functions are used."""

    def __init__(self, data: bytes):
        # the engine takes ownership of the target machine it is given, so it gets a fresh one
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()

    def address(self, symbol: str) -> int:
        return self.engine.get_function_address(symbol)
