"""The `cpu` target: kernels compiled to native code with llvmlite, called through ctypes.

ctypes releases the GIL during each call, so kernels can run in parallel
once the runtime drives them from several threads.  Until then the task
table runs here in a plain loop on one thread (`CpuExecutable.run`): the
seam the runtime replaces.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from collections.abc import Mapping

import numpy as np
from llvmlite import ir

from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.jit import LoadedObject, cache_key, cached_object, compile_object, target_machine
from ptowsp.lower import Buffer, Kernel, Program, lower_program
from ptowsp.schedules import Schedule
from ptowsp.te import Expr
from ptowsp.workloads.reference import run_opaque


def _dump(node: object) -> str:
    """A complete, process-independent text of a kernel part: every op, dtype and argument."""
    if isinstance(node, Expr):
        return f"({node.op.name} {node.dtype} {_dump(node.arg)} {' '.join(_dump(s) for s in node.src)})"
    if isinstance(node, Buffer):
        return f"{node.name}:{node.dtype}{list(node.shape)}@{node.scope}"
    if dataclasses.is_dataclass(node):
        return f"{type(node).__name__}[{' '.join(_dump(getattr(node, f.name)) for f in dataclasses.fields(node))}]"
    if isinstance(node, tuple):
        return f"<{' '.join(_dump(x) for x in node)}>"
    return repr(node)


def describe(kernel: Kernel) -> str:
    """Everything code generation reads from a kernel, as text (the cache key's input)."""
    return _dump(kernel)


class CpuExecutable:
    def __init__(self, program: Program):
        self.program = program
        start = time.perf_counter()
        symbols = {name: f"ptowsp_{name}" for name in program.kernels}
        key = cache_key("\n".join(describe(k) for k in program.kernels.values()))
        data = cached_object(key)
        self.from_cache = data is not None
        self.module_text = ""  # the LLVM IR, when it was generated (not on a cache hit)
        if data is None:
            module = ir.Module(name=program.workload.name)
            for name, kernel in program.kernels.items():
                KernelEmitter(module, kernel, symbols[name]).emit()
            self.module_text = str(module)
            data = compile_object(module, key)
        self._object = LoadedObject(data)
        self.functions = {}
        for name, kernel in program.kernels.items():
            arity = len(kernel.inputs) + len(kernel.outputs)
            signature = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * arity), *([ctypes.c_int64] * len(kernel.grid)))
            self.functions[name] = signature(self._object.address(symbols[name]))
        self.compile_seconds = time.perf_counter() - start

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        wl = self.program.workload
        arrays = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
        for name in self.program.order:
            for t in wl.task(name).outputs:
                arrays[t.name] = np.empty(t.shape, t.dtype)
        pointers: dict[str, list[int]] = {}
        for task, coords in self.program.launches():
            kernel = self.program.kernels.get(task)
            if kernel is None:  # an opaque task, on the host
                results = run_opaque(wl.task(task), arrays)  # type: ignore[arg-type]
                arrays.update({k: np.ascontiguousarray(v) for k, v in results.items()})
                continue
            if task not in pointers:  # arrays are fixed for the run: resolve once per kernel
                pointers[task] = [arrays[b.name].ctypes.data for b in (*kernel.inputs, *kernel.outputs)]
            self.functions[task](*pointers[task], *coords)
        return {name: arrays[name] for name in wl.outputs}


class CpuBackend:
    name = "cpu"

    def unavailable_reason(self) -> str | None:
        try:
            target_machine()
        except Exception as e:  # noqa: BLE001 - any failure means no native target here
            return f"LLVM cannot target this host: {e}"
        return None

    def compile(self, schedule: Schedule) -> CpuExecutable:
        return CpuExecutable(lower_program(schedule.workload, schedule))
