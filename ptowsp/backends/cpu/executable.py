"""The cpu target's executable: compiled kernels, their task tables, memory plans and run set-ups per
binding of the sizes, and a run (`CpuExecutable.run`) on the real clock or a device model's.

Kernels are compiled to native code with llvmlite (compile.py) and called through ctypes.

ctypes releases the GIL during each call, so the runtime's worker threads
run kernels in parallel.  The manifest stored with the object code holds,
per kernel, its symbol, arguments, grid and access boxes, so a cached build
makes the task table without lowering again.  A cached entry is used only
once cache.py has verified it and it fits this workload; else it is
recompiled.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import math
import time
from collections.abc import Mapping

import numpy as np
from llvmlite import ir

from ptowsp.backends.cpu.isa import HostCannotRun, TargetCpu, target_cpu
from ptowsp.backends.cpu.thunks import thunk_symbol
from ptowsp.backends.cpu.setup import RunSetup, Stored
from ptowsp.backends.cpu.cache import KernelEntry
from ptowsp.backends.cpu.compile import cached, compiled, describe, emit_task, linked
from ptowsp.backends.cpu.launch import Launch
from ptowsp.backends.cpu.jit import cache_key, optimised_module
from ptowsp.backends.buffers import Recycler, aligned_copy
from ptowsp.backends.host import Domains, domain_outputs, kernel_versions, run_table
from ptowsp.lower import Program, lower_program
from ptowsp.runtime import Options, TaskTable, Trace, rouse
from ptowsp.runtime.clocks import HOST_CLOCK, Clock
from ptowsp.runtime.native import NativeTasks
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.passes.memory import MemoryPlan, plan_memory
from ptowsp.te import Tensor
from ptowsp.workloads.inputs import input_sizes


KEPT_SETUPS = 64  # bindings of the sizes whose run set-up an executable keeps


class CpuExecutable:
    """Compiled kernels plus the order to launch them; the lowered program is rebuilt only on demand
    (a cached build needs just the manifest stored with the object code)."""

    source_kinds = ("llvm", "asm")

    def __init__(self, resolved: ResolvedSchedule, cpu: TargetCpu | None = None, program: Program | None = None):
        """`program`: the schedule already lowered (aicore lowers first to check its buffers)."""
        self.resolved = resolved
        self.schedule = schedule = resolved.schedule
        if program is not None:
            self.program = program
        self.cpu = target_cpu() if cpu is None else cpu  # the CPU the kernels are compiled for
        self.unrunnable = self.cpu.unrunnable_reason()  # why this machine cannot run them, or None
        start = time.perf_counter()
        key = cache_key(describe(schedule), self.cpu)
        self.module_text = ""  # the LLVM IR, when it was generated (not on a cache hit)
        found = cached(key, schedule, self.cpu)
        self.from_cache = found is not None
        if found is None:
            self._object, manifest, self.module_text = compiled(key, self.program, self.cpu)
        else:
            self._object, manifest = found
        wl = schedule.workload
        # tensors known at build time, passed to kernels like inputs (from the resolved schedule, not
        # self.program: a cached build is not lowered)
        self.folded = frozenset(resolved.folded)  # tensors of tasks computed at build time
        self.constants = resolved.constants
        for name, layout in schedule.layouts.items():  # constants packed once: kernels read them in their layout
            if name in self.constants:
                self.constants[name] = layout.pack(self.constants[name])
        self.order: tuple[str, ...] = manifest.order
        self.entries: dict[str, KernelEntry] = manifest.kernels
        # the tensors kernels take, in the order of the pointer table a native run passes its thunks
        self.arguments = tuple(dict.fromkeys(a for entry in self.entries.values() for a in entry.arguments))
        # those a kernel reads start on a cache line, as the arena and outputs do: numpy's large arrays
        # start 16 bytes into a page, and every vector load of weights then split two cache lines
        # (ResNet-18: its convolutions 150-168 -> 170-200 GFLOP/s per core, 12.0 -> 10.7 ms)
        for name in set(self.arguments) & set(self.constants):
            self.constants[name] = aligned_copy(self.constants[name])
        self.constant_addresses = {name: a.ctypes.data for name, a in self.constants.items()}
        self.functions = {}  # (task, version) -> the compiled function; version 0: the task's own loops
        self.thunks = {}  # (task, version) -> the address of its thunk (thunks.py), for the native loop
        self.sizes = tuple(wl.sizes)  # passed to every kernel after its grid coordinates
        for task, entry in self.entries.items():
            signature = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(entry.arguments)),
                                         *([ctypes.c_int64] * (len(entry.grid) + len(self.sizes))))
            for version, symbol in enumerate((entry.symbol, *entry.variants)):
                self.functions[task, version] = signature(self._object.address(symbol))
                self.thunks[task, version] = self._object.address(thunk_symbol(symbol))
        self._native: dict[tuple[int, ...], NativeTasks | None] = {}
        # the conditions that pick a specialized version per tile (from the schedule: a cached build
        # is not lowered)
        self.conditions = {task: [when for when, _ in found] for task, found in schedule.variants.items()
                           if task in self.entries}
        self.zeroed = domain_outputs(wl)  # outputs of tasks with a domain: skipped tiles leave zeros
        self._plans: dict[tuple[int, ...], MemoryPlan] = {}
        self._setups: dict[tuple[int, ...], RunSetup] = {}
        self._tables: dict[tuple[int, ...], tuple[TaskTable, Domains]] = {}  # per binding
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
                nbytes.update({t.name: self._stored(t)[0] for t in task.outputs
                               if t.name not in wl.outputs and t.name not in self.zeroed})
            self._plans[key] = plan_memory(steps, nbytes)
        return self._plans[key]

    def _stored(self, tensor: Tensor) -> tuple[int, tuple[int, ...]]:
        """(bytes, shape) of an intermediate as stored: its layout's shape when it has one."""
        layout = self.schedule.layouts.get(tensor.name)
        shape = tuple(tensor.shape) if layout is None else layout.shape
        return math.prod(shape) * np.dtype(tensor.dtype).itemsize, shape

    @property
    def memory_plan(self) -> MemoryPlan:
        """The memory plan of a workload without symbolic sizes (see plan_for)."""
        return self.plan_for({})

    @functools.cached_property
    def program(self) -> Program:
        return lower_program(self.schedule.workload, self.resolved)

    def source(self, task: str, kind: str) -> str:
        """The task's kernel (and its specialized versions) as LLVM IR after -O3 ("llvm") or as the
        host's assembly ("asm").  Made anew from the schedule when asked, by the same compiler with
        the same options, so a build served from the cache shows its code too."""
        program = self.program
        if task not in program.kernels:
            program.source(task)  # raises BuildError saying why the task has no kernel
        module = ir.Module(name=program.workload.name)
        emit_task(module, program, task, self.cpu)
        optimised, machine = optimised_module(module, self.cpu, linked(program))
        return str(optimised) if kind == "llvm" else machine.emit_assembly(optimised)

    def table_for(self, sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None = None) -> TaskTable:
        """Every kernel instance with its regions (opaque tasks: whole tensors), in launch order, at a
        binding of the sizes (made once per binding); with the run's `arrays`, the table for that run:
        its tiles outside a domain skipped, its specialized tiles given the version they run."""
        table, domains = self._binding(sizes)
        if arrays is None:
            return table
        if self.conditions:
            table = self._make_table(sizes, kernel_versions(self.schedule.workload, self._kernels, sizes, arrays,
                                                            self.conditions))
        return domains.for_run(table, domains.skipped(arrays), arrays) if domains else table

    def _binding(self, sizes: Mapping[str, int]) -> tuple[TaskTable, Domains]:
        """The binding's table (every tile) and its tiles of tasks with a domain, made once and kept."""
        key = self._key(sizes)
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= KEPT_SETUPS:
                self._tables.pop(next(iter(self._tables)))
            table = self._make_table(sizes)
            found = self._tables[key] = (table, Domains(self.schedule.workload, table, self._kernels, sizes))
        return found

    def native_tasks(self, table: TaskTable, sizes: tuple[int, ...]) -> NativeTasks | None:
        """The table's instances as the native loop calls them (runtime/native.py), or None when an
        instance has no compiled kernel (an opaque task runs on the host, in Python)."""
        base = self._tables.get(sizes)
        cached = base is not None and table.instances is base[0].instances
        if cached and sizes in self._native:
            return self._native[sizes]
        index = {name: k for k, name in enumerate(self.arguments)}
        tensors = {name: [index[a] for a in entry.arguments] for name, entry in self.entries.items()}
        thunks, offsets, words = [], [], []
        for inst in table.instances:
            thunk = self.thunks.get((inst.name, inst.variant))
            if thunk is None:
                found = None
                break
            thunks.append(thunk)
            offsets.append(len(words))
            words += [*tensors[inst.name], *inst.coords, *sizes]
        else:
            found = NativeTasks(np.array(thunks, np.int64), np.array(offsets, np.int64),
                                np.array(words or [0], np.int64), len(self.arguments))
        if cached:
            self._native[sizes] = found
        return found

    @functools.cached_property
    def _kernels(self) -> dict:
        return {name: (entry.grid, entry.access) for name, entry in self.entries.items()}

    def _make_table(self, sizes: Mapping[str, int], versions: Mapping[str, list[int]] | None = None) -> TaskTable:
        return run_table(self.schedule.workload, self.order, self._kernels, self.schedule.cores, sizes,
                         after=self.plan_for(sizes).reuses, versions=versions)

    @property
    def table(self) -> TaskTable:
        """The task table of a workload without symbolic sizes, every tile included."""
        return self.table_for({})

    def setup_for(self, sizes: Mapping[str, int]) -> RunSetup:
        """What every run at this binding of the sizes shares (setup.py), made on its first run."""
        key = self._key(sizes)
        found = self._setups.get(key)
        if found is None:
            bound, plan = self.schedule.workload.bind(sizes), self.plan_for(sizes)
            stored = [Stored(t.name, self._stored(t)[1], np.dtype(t.dtype), plan.offsets.get(t.name),
                             t.name in self.zeroed) for name in self.order for t in bound.task(name).outputs]
            found = RunSetup(key, bound, plan, stored, self.arguments, self.constant_addresses)
            if not self.conditions:  # else each run's arrays pick the kernel versions of its tiles
                found.table = self.table_for(sizes)
                found.native = self.native_tasks(found.table, key)
                found.domains = self._binding(sizes)[1] or None
            if len(self._setups) >= KEPT_SETUPS:  # a dynamic workload meets many bindings: keep the latest
                self._setups.pop(next(iter(self._setups)))
            self._setups[key] = found
        return found

    def run(self, inputs: Mapping[str, np.ndarray], options: Options,
            clock: Clock = HOST_CLOCK) -> tuple[dict[str, np.ndarray], Trace]:
        """Run on the host's clock, or on a device model's (the aicore target's: runtime/clocks.py).
        The inputs were validated (pw.build's run checks them, sizes too)."""
        return self.run_at(self.setup_of(inputs), inputs, options, clock)

    def setup_of(self, inputs: Mapping[str, np.ndarray]) -> RunSetup:
        """The set-up of the binding the inputs' shapes give."""
        wl = self.schedule.workload
        return self.setup_for(input_sizes(wl, inputs) if wl.size_sources else {})

    def run_at(self, setup: RunSetup, inputs: Mapping[str, np.ndarray], options: Options,
               clock: Clock = HOST_CLOCK) -> tuple[dict[str, np.ndarray], Trace]:
        """`run` at the binding of `setup` (setup_for's), which the inputs' shapes were checked to give
        (a Recording holds its binding's set-up and replays it)."""
        if self.unrunnable:
            raise HostCannotRun(f"workload {self.schedule.workload.name!r}: {self.unrunnable}")
        if clock.real:
            rouse(options)  # helper threads asleep in native code wake while this sets the run up
        inputs = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
        table, native, domains = setup.table, setup.native, setup.domains
        arrays = None
        if table is None:
            placed = setup.place(self.buffers)
            arrays = setup.arrays(placed, inputs, self.constants)
            table = self.table_for(dict(zip(self.sizes, setup.key)), arrays)
            native = self.native_tasks(table, setup.key)
        elif domains is not None:  # the run's inputs decide which tiles have work
            skipped = domains.skipped(collections.ChainMap(inputs, self.constants))
            placed = setup.place(self.buffers, domains.unfilled(skipped))
            if domains.deferred:  # a domain over data the run computes reads the arena's tensors
                arrays = setup.arrays(placed, inputs, self.constants)
            table = domains.for_run(table, skipped, arrays)
        else:
            placed = setup.place(self.buffers)
        # the native loop runs on the real clock only (the aicore target's device clock calls kernels one by one)
        python = options.debug or not clock.real or native is None
        launch = Launch(self, table, setup.bound, setup.key,
                         lambda: arrays or setup.arrays(placed, inputs, self.constants),
                         None if python else (native, lambda table, filled: setup.fill_pointers(
                             table, filled, placed, inputs)), options.debug)
        trace = clock.execute(table, launch, options)
        launch.release()  # a pool thread may still be returning from its last call, holding the launcher
        trace.memory = dict(setup.memory)
        # an output is a task's: stored in a buffer of its own, or folded at build time and shared by
        # every run, when each gets its own writable copy
        return {name: placed.own[name] if name in placed.own else np.array(self.constants[name])
                for name in self.schedule.workload.outputs}, trace
