"""The `cpu` target: kernels compiled to native code with llvmlite, called through ctypes.

ctypes releases the GIL during each call, so kernels can run in parallel
once the runtime drives them from several threads.  Until then the task
table runs here in a plain loop on one thread (`CpuExecutable.run`): the
seam the runtime replaces.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping

import numpy as np
from llvmlite import ir

from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.jit import LoadedObject, compile_object, target_machine
from ptowsp.lower import Program, lower_program
from ptowsp.schedules import Schedule
from ptowsp.workloads.reference import run_opaque


class CpuExecutable:
    def __init__(self, program: Program):
        self.program = program
        start = time.perf_counter()
        module = ir.Module(name=program.workload.name)
        symbols = {name: f"ptowsp_{name}" for name in program.kernels}
        for name, kernel in program.kernels.items():
            KernelEmitter(module, kernel, symbols[name]).emit()
        self.module_text = str(module)
        data, self.from_cache = compile_object(module)
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
        for inst in self.program.instances:
            kernel = self.program.kernels.get(inst.task)
            if kernel is None:  # an opaque task, on the host
                results = run_opaque(wl.task(inst.task), arrays)  # type: ignore[arg-type]
                arrays.update({k: np.ascontiguousarray(v) for k, v in results.items()})
                continue
            if inst.task not in pointers:  # arrays are fixed for the run: resolve once per kernel
                pointers[inst.task] = [arrays[b.name].ctypes.data for b in (*kernel.inputs, *kernel.outputs)]
            self.functions[inst.task](*pointers[inst.task], *inst.coords)
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
