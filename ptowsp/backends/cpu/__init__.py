"""The `cpu` target: kernels compiled to native code with llvmlite, called through ctypes.

ctypes releases the GIL during each call, so the runtime's worker threads
run kernels in parallel.  The manifest stored with the object code holds,
per kernel, its symbol, arguments, grid and access boxes, so a cached build
makes the task table without lowering again.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import time
from collections.abc import Callable, Mapping

import numpy as np
from llvmlite import ir

from ptowsp.backends.base import host_cores
from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.jit import LoadedObject, cache_key, cached_build, compile_object, target_machine, vector_bytes
from ptowsp.backends.buffers import Recycler
from ptowsp.backends.host import domain_outputs, run_table, tile_of
from ptowsp.errors import BuildError
from ptowsp.lower import Buffer, Program, lower_program
from ptowsp.lower.access import KernelAccess
from ptowsp.runtime import Launcher, Options, TaskTable, Trace, execute
from ptowsp.schedules import Schedule
from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.default import Choose, keep_default
from ptowsp.schedules.passes.memory import ALIGN, MemoryPlan, plan_memory
from ptowsp.te import Expr, Tensor
from ptowsp.te.bounds import check_gathers, gather_indices
from ptowsp.te.sizes import python_source
from ptowsp.workloads import ComputeTask, inline_producers
from ptowsp.workloads.inputs import input_sizes
from ptowsp.workloads.reference import run_opaque


def _dump(node: object) -> str:
    """A complete, process-independent text of a compiler input: every op, dtype and argument."""
    if isinstance(node, Expr):
        return f"({node.op.name} {node.dtype} {_dump(node.arg)} {' '.join(_dump(s) for s in node.src)})"
    if isinstance(node, (Buffer, Tensor)):  # a Tensor's owner is a process-local id: left out
        return f"{node.name}:{node.dtype}{list(node.shape)}@{getattr(node, 'scope', 'global')}"
    if dataclasses.is_dataclass(node):
        return f"{type(node).__name__}[{' '.join(_dump(getattr(node, f.name)) for f in dataclasses.fields(node))}]"
    if isinstance(node, tuple):
        return f"<{' '.join(_dump(x) for x in node)}>"
    return repr(node)


def describe(schedule: Schedule) -> str:
    """Everything compilation reads: the workload's tasks as written and the schedule's steps.

    Opaque tasks run on the host, so only their interface enters.
    """
    wl = schedule.workload
    tasks = [_dump(t) if isinstance(t, ComputeTask) else f"opaque {t.name} {_dump(t.inputs)} {_dump(t.outputs)}"
             for t in map(wl.task, wl.tasks)]
    return "\n".join([*tasks, f"outputs {wl.outputs}", schedule.to_json()])


@dataclasses.dataclass(frozen=True)
class _Entry:
    """What running one kernel needs: its symbol, argument tensors in order, grid and access boxes."""

    symbol: str
    arguments: tuple[str, ...]  # inputs, then outputs
    grid: tuple[str, ...]  # extents as Python source over the sizes
    access: KernelAccess
    variants: tuple[str, ...] = ()  # symbols of the specialized versions (Schedule.specialize), in order


class CpuExecutable:
    """Compiled kernels plus the order to launch them; the lowered program is rebuilt only on demand
    (a cached build needs just the manifest stored with the object code)."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        start = time.perf_counter()
        key = cache_key(describe(schedule))
        cached = cached_build(key)
        self.from_cache = cached is not None
        self.module_text = ""  # the LLVM IR, when it was generated (not on a cache hit)
        if cached is None:
            data, manifest = self._compile(key)
        else:
            data, manifest = cached
        self._object = LoadedObject(data)
        wl = schedule.workload
        # tensors known at build time, passed to kernels like inputs (from fold, not self.program:
        # a cached build is not lowered)
        self.folded = fold.fold_constants(wl)
        self.constants = {**wl.constants, **self.folded}
        self.order: tuple[str, ...] = tuple(manifest["order"])
        self.entries = {task: _Entry(e["symbol"], tuple(e["arguments"]), tuple(str(g) for g in e["grid"]),
                                     KernelAccess.from_json(e["access"]), tuple(e.get("variants", ())))
                        for task, e in manifest["kernels"].items()}
        self.functions = {}  # (task, version) -> the compiled function; version 0: the task's own loops
        self.sizes = tuple(wl.sizes)  # passed to every kernel after its grid coordinates
        for task, entry in self.entries.items():
            signature = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(entry.arguments)),
                                         *([ctypes.c_int64] * (len(entry.grid) + len(self.sizes))))
            for version, symbol in enumerate((entry.symbol, *entry.variants)):
                self.functions[task, version] = signature(self._object.address(symbol))
        # the conditions that pick a specialized version per tile (from the schedule: a cached build
        # is not lowered)
        self.conditions = {task: [when for when, _ in found] for task, found in schedule.variants.items()
                           if task in self.entries}
        self.zeroed = domain_outputs(wl)  # outputs of tasks with a domain: skipped tiles leave zeros
        self._plans: dict[tuple[int, ...], MemoryPlan] = {}
        self._tables: dict[tuple[int, ...], TaskTable] = {}
        self.buffers = Recycler()  # outputs and arena of earlier runs that the caller has let go of
        self.compile_seconds = time.perf_counter() - start

    def _key(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(sizes[n] for n in self.sizes)

    def plan_for(self, sizes: Mapping[str, int]) -> MemoryPlan:
        """Offsets in one arena for the intermediates the tasks store (not inputs, constants, outputs,
        nor the zero-filled outputs of tasks with a domain), at a binding of the sizes."""
        key = self._key(sizes)
        if key not in self._plans:
            wl = self.schedule.workload.bind(sizes)
            steps, nbytes = [], {}
            for name in self.order:
                task, entry = wl.task(name), self.entries.get(name)
                writes = [t.name for t in task.outputs]
                reads = [t.name for t in task.inputs] if entry is None else \
                    [a for a in entry.arguments if a not in writes]
                steps.append((reads, writes))
                nbytes.update({t.name: t.nbytes for t in task.outputs
                               if t.name not in wl.outputs and t.name not in self.zeroed})
            self._plans[key] = plan_memory(steps, nbytes)
        return self._plans[key]

    @property
    def memory_plan(self) -> MemoryPlan:
        """The memory plan of a workload without symbolic sizes (see plan_for)."""
        return self.plan_for({})

    @functools.cached_property
    def program(self) -> Program:
        return lower_program(self.schedule.workload, self.schedule)

    def _compile(self, key: str) -> tuple[bytes, dict]:
        program = self.program
        module = ir.Module(name=program.workload.name)
        kernels = {}
        for name, kernel in program.kernels.items():
            symbol = f"ptowsp_{name}"
            KernelEmitter(module, kernel, symbol).emit()
            variants = []
            for k, (_, variant) in enumerate(program.variants.get(name, ()), 1):
                variants.append(f"{symbol}_v{k}")
                if {b.name for b in variant.inputs} != {b.name for b in kernel.inputs}:
                    raise BuildError(f"task {name!r}: variant {k} reads {sorted(b.name for b in variant.inputs)}, "
                                     f"its own loops {sorted(b.name for b in kernel.inputs)}")
                variant = dataclasses.replace(variant, inputs=kernel.inputs)  # one argument list for all
                KernelEmitter(module, variant, variants[-1]).emit()
            kernels[name] = {"symbol": symbol, "arguments": [b.name for b in (*kernel.inputs, *kernel.outputs)],
                             "grid": [python_source(extent, {}) for _, extent in kernel.grid],
                             "access": program.access[name].to_json(), "variants": variants}
        self.module_text = str(module)
        manifest = {"order": list(program.order), "kernels": kernels}
        return compile_object(module, key, manifest), manifest

    def table_for(self, sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None = None) -> TaskTable:
        """Every kernel instance with its regions (opaque tasks: whole tensors), in launch order, at a
        binding of the sizes; with the run's `arrays`, tiles outside a domain are left out."""
        key = self._key(sizes)
        if arrays is not None and (self.zeroed or self.conditions):
            return self._make_table(sizes, arrays)
        if key not in self._tables:
            self._tables[key] = self._make_table(sizes, None)
        return self._tables[key]

    def _make_table(self, sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None) -> TaskTable:
        kernels = {name: (entry.grid, entry.access) for name, entry in self.entries.items()}
        return run_table(self.schedule.workload, self.order, kernels, self.schedule.cores, sizes, arrays,
                         after=self.plan_for(sizes).reuses, variants=self.conditions)

    @property
    def table(self) -> TaskTable:
        """The task table of a workload without symbolic sizes, every tile included."""
        return self.table_for({})

    def run(self, inputs: Mapping[str, np.ndarray], options: Options,
            execute_table: Callable[[TaskTable, Launcher, Options], Trace] | None = None
            ) -> tuple[dict[str, np.ndarray], Trace]:
        """Run on the real clock, or through `execute_table(table, launcher, options)` (the aicore
        target's device clock)."""
        wl = self.schedule.workload
        sizes = input_sizes(wl, inputs)
        bound = wl.bind(sizes)
        arrays = {**self.constants, **{name: np.ascontiguousarray(a) for name, a in inputs.items()}}
        plan = self.plan_for(sizes)
        arena = self.buffers.empty(" arena", (plan.arena_bytes + ALIGN,), np.uint8)
        base = -arena.ctypes.data % ALIGN
        for name in self.order:
            for t in bound.task(name).outputs:
                if t.name in plan.offsets:
                    at = base + plan.offsets[t.name]
                    arrays[t.name] = arena[at:at + t.nbytes].view(t.dtype).reshape(t.shape)
                else:
                    arrays[t.name] = self.buffers.empty(t.name, t.shape, t.dtype)
                    if t.name in self.zeroed:
                        arrays[t.name].fill(0)
        table = self.table_for(sizes, arrays)
        launch = _Launch(self, table, arrays, self._key(sizes), options.debug)
        trace = (execute_table or execute)(table, launch, options)
        launch.release()  # a pool thread may still be returning from its last call, holding the launcher
        trace.memory = {"planned": plan.arena_bytes, "unshared": plan.unshared_bytes}
        # a folded output is shared by every run: each gets its own writable copy
        return {name: np.array(arrays[name]) if name in self.folded else arrays[name] for name in wl.outputs}, trace


class _Launch:
    """Runs instance i of the table: its kernel at its grid coordinates, or an opaque task on the host."""

    load = store = None

    def __init__(self, exe: CpuExecutable, table: TaskTable, arrays: dict[str, np.ndarray], sizes: tuple[int, ...],
                 debug: bool = False):
        self.instances = table.instances
        self.workload = exe.schedule.workload.bind(dict(zip(exe.sizes, sizes)))
        self.arrays = arrays
        self.sizes = sizes
        # debug: the gathers of each kernel's task (inlined producers included), checked before it runs
        self.gathers = {name: value for name in exe.entries if debug and gather_indices(
            value := inline_producers(self.workload.task(name).value, self.workload, exe.schedule.inlined))}
        # arrays are fixed for the run, so each kernel's pointer arguments are too
        pointers = {name: tuple(arrays[a].ctypes.data for a in entry.arguments) for name, entry in exe.entries.items()}
        self.bound = {key: (function, pointers[key[0]]) for key, function in exe.functions.items()}

    def release(self) -> None:
        """Drop the run's arrays, so the Recycler sees only the caller's references."""
        self.arrays, self.bound = {}, {}

    def compute(self, i: int) -> None:
        inst = self.instances[i]
        bound = self.bound.get((inst.name, inst.variant))
        if bound is None:
            for name, value in run_opaque(self.workload.task(inst.name), self.arrays).items():
                np.copyto(self.arrays[name], value)
            return
        function, pointers = bound
        if inst.name in self.gathers:
            check_gathers(self.gathers[inst.name], tile_of(self.workload.task(inst.name), inst.writes), self.arrays)
        function(*pointers, *inst.coords, *self.sizes)


class CpuBackend:
    name = "cpu"

    @property
    def vector_bytes(self) -> int:
        return vector_bytes()

    def unavailable_reason(self) -> str | None:
        try:
            target_machine()
        except Exception as e:  # noqa: BLE001 - any failure means no native target here
            return f"LLVM cannot target this host: {e}"
        return None

    def cores(self, workers, device) -> tuple[str | None, ...]:
        return host_cores(self.name, workers, device)

    def compile(self, schedule: Schedule, device: None = None) -> CpuExecutable:
        return CpuExecutable(schedule)

    def schedule_choices(self, device: None) -> Choose:
        return keep_default
