"""The `cuda` target: kernels as PTX from llvmlite's NVPTX backend, launched through the CUDA driver.

`generate(schedule)` is the whole compiler and needs no GPU: fusion, the
default thread binding (binding.py), lowering, the SPMD rewrite (spmd.py),
LLVM IR (codegen.py) and PTX (ptx.py).  The target registers as usable only
where cuda-bindings finds a driver and a GPU (driver.py); there, each task
instance is one kernel launch, the runtime's workers are host threads with a
CUDA stream each, and every task event in the trace carries the kernel's
time measured by CUDA events (`event.active`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
from llvmlite import ir

from ptowsp.backends.base import host_cores
from ptowsp.backends.cuda import driver
from ptowsp.backends.cuda.binding import with_default_binding
from ptowsp.backends.cuda.codegen import GpuEmitter
from ptowsp.backends.cuda.ptx import DEFAULT_ARCH, compile_ptx
from ptowsp.backends.cuda.spmd import MAX_STATIC_SHARED_BYTES, GpuKernel, to_spmd
from ptowsp.backends.host import host_instance, kernel_instances
from ptowsp.errors import BuildError
from ptowsp.lower import Program, lower_program
from ptowsp.runtime import Options, TaskTable, Trace, execute
from ptowsp.schedules import Schedule
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.passes.decisions import Decision
from ptowsp.schedules.passes.default import Choose
from ptowsp.workloads import Workload
from ptowsp.workloads.reference import run_opaque


@dataclasses.dataclass(frozen=True)
class CudaCode:
    """What the compiler makes of a schedule: the bound program, each kernel as threads run it, the PTX."""

    program: Program  # lowered from the schedule with default bindings added
    kernels: dict[str, GpuKernel]
    symbols: dict[str, str]  # task -> entry point name in the PTX
    ptx: str
    llvm_ir: str

    @property
    def schedule(self) -> Schedule:
        return self.program.schedule

    def source(self, task: str, kind: str) -> str:
        """One task's kernel: its LLVM IR ("llvm") or PTX ("ptx"), cut from the module's text."""
        if task not in self.symbols:
            self.program.source(task)  # raises BuildError saying why the task has no kernel
        text = self.llvm_ir if kind == "llvm" else self.ptx
        lines = text.splitlines()
        heads = (f'@"{self.symbols[task]}"(', f".entry {self.symbols[task]}(")
        start = next(k for k, line in enumerate(lines) if any(h in line for h in heads))
        end = lines.index("}", start)
        return "\n".join(lines[start:end + 1])


def generate(given: Schedule | ResolvedSchedule, arch: int = DEFAULT_ARCH,
             max_shared_bytes: int = MAX_STATIC_SHARED_BYTES) -> CudaCode:
    """Compile a schedule to PTX for compute capability `arch` (90: sm_90); no GPU needed."""
    resolved = ResolvedSchedule.of(given)
    schedule = resolved.schedule
    if schedule.workload.sizes:
        raise BuildError(f"workload {schedule.workload.name!r} has symbolic sizes "
                         f"({', '.join(schedule.workload.sizes)}), which the cuda target does not take yet; "
                         "build Workload.bind(...) for one binding")
    if schedule.layouts:
        raise BuildError(f"tensor {next(iter(schedule.layouts))!r} is stored in another layout (transform_layout), "
                         "which the cuda target does not take yet")
    if schedule.prefetched:
        task, tensor, _, _ = schedule.prefetched[0]
        raise BuildError(f"task {task!r}: prefetch_tensor({tensor!r}) is a cpu cache hint, which the cuda target "
                         "does not take; stage the tensor in shared memory (cache_read) instead")
    if schedule.variants:
        raise BuildError(f"task {next(iter(schedule.variants))!r} is specialized (Schedule.specialize), which the "
                         "cuda target does not take yet; build the schedule without specialize steps")
    program = lower_program(schedule.workload, resolved.replanned(with_default_binding(resolved.planned)))
    module = ir.Module(name=schedule.workload.name)
    kernels, symbols = {}, {}
    for name, kernel in program.kernels.items():
        kernels[name] = to_spmd(kernel, max_shared_bytes)
        symbols[name] = f"ptowsp_{len(symbols)}_{''.join(c if c.isalnum() else '_' for c in name)}"
        GpuEmitter(module, kernels[name], symbols[name]).emit()
    llvm_ir = str(module)
    return CudaCode(program, kernels, symbols, compile_ptx(module, arch), llvm_ir)


class CudaExecutable:
    """PTX loaded on GPU 0, device memory for every tensor, and the launches of the task table."""

    source_kinds = ("llvm", "ptx")
    memory_plan = None  # every tensor in a device buffer of its own

    def __init__(self, resolved: ResolvedSchedule):
        self.device = driver.device()
        self.schedule = schedule = resolved.schedule
        self.code = generate(resolved, self.device.arch, self.device.max_shared_bytes)
        self.program = self.code.program
        self.module = driver.Module(self.code.ptx)
        wl = schedule.workload
        tensors = {n: wl.tensor(n) for n in wl.inputs} | {t.name: t for name in self.program.order
                                                          for t in wl.task(name).outputs}
        self.memory = {name: driver.Memory(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize)
                       for name, t in tensors.items()}
        for name, value in self.program.constants.items():
            self.memory[name] = driver.Memory(value.nbytes)
            self.memory[name].upload(value)
        self.streams = threading.local()  # one CUDA stream per worker thread
        self.lock = threading.Lock()  # runs share the device memory: one at a time

    def source(self, task: str, kind: str) -> str:
        return self.code.source(task, kind)

    @functools.cached_property
    def table(self) -> TaskTable:
        wl, cores = self.schedule.workload, self.schedule.cores
        instances = []
        for name in self.program.order:
            kernel = self.code.kernels.get(name)
            if kernel is None:
                instances.append(host_instance(wl.task(name)))
            else:
                grid = tuple(extent for _, extent in kernel.grid)
                instances.extend(kernel_instances(name, grid, self.program.access[name], cores.get(name)))
        return TaskTable(instances)

    def stream(self) -> driver.Stream:
        found = getattr(self.streams, "stream", None)
        if found is None:
            self.device.enter()
            found = self.streams.stream = driver.Stream()
        return found

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        wl = self.schedule.workload
        with self.lock:
            self.device.enter()
            for name, array in inputs.items():
                self.memory[name].upload(array)
            launch = _Launch(self)
            trace = execute(self.table, launch, options)
            trace.events = [dataclasses.replace(e, active=launch.seconds.get(e.id, e.active)) for e in trace.events]
            outputs = {}
            for name in wl.outputs:
                t = wl.tensor(name)
                outputs[name] = np.empty(t.shape, t.dtype)
                self.memory[name].download(outputs[name])
        return outputs, trace


class _Launch:
    """Runs instance i: its kernel launched on the worker's stream, or an opaque task on the host."""

    load = store = native = None

    def __init__(self, exe: CudaExecutable):
        self.exe = exe
        self.instances = exe.table.instances
        self.seconds: dict[int, float] = {}  # instance -> kernel time by CUDA events

    def compute(self, i: int) -> None:
        exe, inst = self.exe, self.instances[i]
        kernel = exe.code.kernels.get(inst.name)
        stream = exe.stream()
        if kernel is None:
            self.host_task(inst.name)
            return
        pointers = tuple(exe.memory[b.name].pointer for b in (*kernel.inputs, *kernel.outputs))
        values, arguments = driver.kernel_arguments(pointers, inst.coords)  # `values` lives until the launch
        function = exe.module.function(exe.code.symbols[inst.name])
        self.seconds[i] = stream.launch(function, kernel.blocks, kernel.threads, arguments)

    def host_task(self, name: str) -> None:
        wl, memory = self.exe.schedule.workload, self.exe.memory
        task = wl.task(name)
        arrays = {}
        for t in task.inputs:
            arrays[t.name] = np.empty(t.shape, t.dtype)
            memory[t.name].download(arrays[t.name])
        for out, value in run_opaque(task, arrays).items():
            memory[out].upload(np.asarray(value, dtype=wl.tensor(out).dtype))


class CudaBackend:
    name = "cuda"
    vector_bytes = 1  # threads are scalar: the default schedule makes no SIMD lanes

    def unavailable_reason(self) -> str | None:
        return driver.unavailable_reason()

    def cores(self, workers, device) -> tuple[str | None, ...]:
        return host_cores(self.name, workers, device)

    def compile_default(self, resolved: ResolvedSchedule, device: None = None) -> CudaExecutable:
        return self.compile(resolved, device)

    def compile(self, resolved: ResolvedSchedule, device: None = None) -> CudaExecutable:
        return CudaExecutable(resolved)

    def default_workload(self, wl: Workload) -> Workload:
        return wl

    def cube_tiler(self, device: None) -> None:
        return None  # no matrix cores: contractions take register tiles

    def schedule_choices(self, device: None) -> Choose:
        """The default schedule on a GPU: fusion, every stored intermediate its own kernel
        (grouping would make each thread recompute its rows), one launch per kernel (the
        default binding spreads it over blocks and threads)."""

        def choose(name: str, candidates: Any, default: Any) -> Any:
            kind = Decision.parse(name).kind
            if kind == "at":
                return "root"
            if kind == "tasks":
                return 1
            return default

        return choose


__all__ = ["CudaBackend", "CudaCode", "CudaExecutable", "generate"]
