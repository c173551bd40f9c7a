"""The `cpu` target: kernels compiled to native code with llvmlite, called through ctypes.

ctypes releases the GIL during each call, so the runtime's worker threads
run kernels in parallel.  The manifest stored with the object code holds,
per kernel, its symbol, arguments, grid and access boxes, so a cached build
makes the task table without lowering again.  A cached entry is used only
once cache.py has verified it and it fits this workload; else it is
recompiled.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping

import numpy as np
from llvmlite import ir

from ptowsp.backends.base import host_cores
from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.isa import HostCannotRun, TargetCpu, target_cpu
from ptowsp.backends.cpu.microkernel import linked_ir
from ptowsp.backends.cpu.thunks import emit_thunk, thunk_symbol
from ptowsp.backends.cpu.twins import shape_of
from ptowsp.backends.cpu import cache
from ptowsp.backends.cpu.setup import RunSetup, Stored
from ptowsp.backends.cpu.cache import KernelEntry, Manifest
from ptowsp.backends.cpu.jit import (
    LoadedObject, cache_key, compile_object, host_module, optimised_module, target_machine,
)
from ptowsp.backends.buffers import Recycler, aligned_copy
from ptowsp.backends.host import domain_outputs, run_table, tile_of
from ptowsp.errors import BuildError
from ptowsp.lower import Buffer, Program, lower_program
from ptowsp.lower.formula import formula_of
from ptowsp.runtime import Launcher, Options, TaskTable, Trace, execute, rouse
from ptowsp.runtime.native import Fill, NativeTasks
from ptowsp.schedules import Schedule
from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.blocking import block_convolutions
from ptowsp.schedules.passes.panels import pack_panels
from ptowsp.schedules.passes.propagation import propagate_blocking
from ptowsp.schedules.passes.splitting import split_reductions
from ptowsp.schedules.passes.transposing import transpose_operands
from ptowsp.schedules.passes.winograd import winograd_convolutions
from ptowsp.schedules.passes.decisions import decision_parts
from ptowsp.schedules.passes.default import Choose, keep_default
from ptowsp.schedules.passes.memory import MemoryPlan, plan_memory
from ptowsp.te import Expr, Tensor
from ptowsp.te.bounds import check_gathers, gather_indices
from ptowsp.workloads import ComputeTask, Workload, inline_producers
from ptowsp.workloads.inputs import input_sizes
from ptowsp.workloads.intrinsic import lookup
from ptowsp.workloads.reference import run_opaque


KEPT_SETUPS = 64  # bindings of the sizes whose run set-up an executable keeps


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
    called = sorted(f"intrinsic {name} {lookup(name).digest}" for _, name in schedule.tensorized.values())
    return "\n".join([*tasks, f"outputs {wl.outputs}", schedule.to_json(), *called])


class CpuExecutable:
    """Compiled kernels plus the order to launch them; the lowered program is rebuilt only on demand
    (a cached build needs just the manifest stored with the object code)."""

    source_kinds = ("llvm", "asm")

    def __init__(self, schedule: Schedule, cpu: TargetCpu | None = None, program: Program | None = None):
        """`program`: the schedule already lowered (aicore lowers first to check its buffers)."""
        self.schedule = schedule
        if program is not None:
            self.program = program
        self.cpu = target_cpu() if cpu is None else cpu  # the CPU the kernels are compiled for
        self.unrunnable = self.cpu.unrunnable_reason()  # why this machine cannot run them, or None
        start = time.perf_counter()
        key = cache_key(describe(schedule), self.cpu)
        self.module_text = ""  # the LLVM IR, when it was generated (not on a cache hit)
        cached = self._cached(key)
        self.from_cache = cached is not None
        self._object, manifest = cached or self._compile(key)
        wl = schedule.workload
        # tensors known at build time, passed to kernels like inputs (from fold, not self.program:
        # a cached build is not lowered)
        folded = fold.fold_constants(wl)
        self.folded = frozenset(folded)  # tensors of tasks computed at build time
        self.constants = {**wl.constants, **folded}
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
        return lower_program(self.schedule.workload, self.schedule)

    def _cached(self, key: str) -> tuple[LoadedObject, Manifest] | None:
        """The verified cache entry under `key`, loaded, if it fits this workload and schedule."""
        found = cache.load(key)
        if found is None:
            return None
        data, manifest = found
        obj, path = cache.entry_paths(key)
        problem = _mismatch(manifest, self.schedule)
        if problem:
            cache.discard(path, problem)
            return None
        try:
            loaded = LoadedObject(data, self.cpu)
        except RuntimeError as e:  # llvmlite's error for an object it cannot link
            cache.discard(obj, f"LLVM cannot load the object code ({e})")
            return None
        missing = [s for e in manifest.kernels.values() for k in (e.symbol, *e.variants)
                   for s in (k, thunk_symbol(k)) if not loaded.address(s)]
        if missing:
            cache.discard(obj, f"the object code has no symbol {missing[0]!r}")
            return None
        return loaded, manifest

    def _compile(self, key: str) -> tuple[LoadedObject, Manifest]:
        program = self.program
        kernels, compiled, texts = {}, {}, []  # compiled: a kernel's shape (twins.py) -> its symbols
        for name, kernel in program.kernels.items():
            alone = host_module(program.workload.name)  # each task in a module of its own, linked in LLVM
            symbol, variants = _emit_task(alone, program, name, self.cpu)
            for s in (symbol, *variants):
                emit_thunk(alone, alone.get_global(s))
            text = str(alone)
            shape = shape_of(text, symbol)
            if shape in compiled:  # a twin of a kernel emitted already: the task calls that one
                symbol, variants = compiled[shape]
            else:
                compiled[shape] = symbol, variants
                texts.append(text)
            grid = tuple(formula_of(extent) for _, extent in kernel.grid)
            if None in grid:
                raise BuildError(f"task {name!r}: a grid extent is not integer arithmetic over sizes: {kernel.grid}")
            arguments = tuple(b.name for b in (*kernel.inputs, *kernel.outputs))
            kernels[name] = KernelEntry(symbol=symbol, arguments=arguments, grid=grid, access=program.access[name],
                                        variants=variants)
        self.module_text = "\n".join(texts)
        data = compile_object(texts or [str(host_module(program.workload.name))], self.cpu, _linked(program))
        return LoadedObject(data, self.cpu), cache.store(key, data, tuple(program.order), kernels)

    def source(self, task: str, kind: str) -> str:
        """The task's kernel (and its specialized versions) as LLVM IR after -O3 ("llvm") or as the
        host's assembly ("asm").  Made anew from the schedule when asked, by the same compiler with
        the same options, so a build served from the cache shows its code too."""
        program = self.program
        if task not in program.kernels:
            program.source(task)  # raises BuildError saying why the task has no kernel
        module = ir.Module(name=program.workload.name)
        _emit_task(module, program, task, self.cpu)
        optimised, machine = optimised_module(module, self.cpu, _linked(program))
        return str(optimised) if kind == "llvm" else machine.emit_assembly(optimised)

    def table_for(self, sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None = None) -> TaskTable:
        """Every kernel instance with its regions (opaque tasks: whole tensors), in launch order, at a
        binding of the sizes; with the run's `arrays`, tiles outside a domain are left out."""
        key = self._key(sizes)
        if arrays is not None and (self.zeroed or self.conditions):
            return self._make_table(sizes, arrays)
        if key not in self._tables:
            self._tables[key] = self._make_table(sizes, None)
        return self._tables[key]

    def native_tasks(self, table: TaskTable, sizes: tuple[int, ...]) -> NativeTasks | None:
        """The table's instances as the native loop calls them (runtime/native.py), or None when an
        instance has no compiled kernel (an opaque task runs on the host, in Python)."""
        cached = table is self._tables.get(sizes)
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

    def _make_table(self, sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None) -> TaskTable:
        kernels = {name: (entry.grid, entry.access) for name, entry in self.entries.items()}
        return run_table(self.schedule.workload, self.order, kernels, self.schedule.cores, sizes, arrays,
                         after=self.plan_for(sizes).reuses, variants=self.conditions)

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
            if not (self.zeroed or self.conditions):  # else each run's table depends on its arrays
                found.table = self.table_for(sizes)
                found.native = self.native_tasks(found.table, key)
            if len(self._setups) >= KEPT_SETUPS:  # a dynamic workload meets many bindings: keep the latest
                self._setups.pop(next(iter(self._setups)))
            self._setups[key] = found
        return found

    def run(self, inputs: Mapping[str, np.ndarray], options: Options,
            execute_table: Callable[[TaskTable, Launcher, Options], Trace] | None = None
            ) -> tuple[dict[str, np.ndarray], Trace]:
        """Run on the real clock, or through `execute_table(table, launcher, options)` (the aicore
        target's device clock).  The inputs were validated (pw.build's run checks them, sizes too)."""
        if self.unrunnable:
            raise HostCannotRun(f"workload {self.schedule.workload.name!r}: {self.unrunnable}")
        if execute_table is None:
            rouse(options)  # helper threads asleep in native code wake while this sets the run up
        wl = self.schedule.workload
        sizes = input_sizes(wl, inputs) if wl.size_sources else {}
        setup = self.setup_for(sizes)
        inputs = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
        placed = setup.place(self.buffers)
        table, native = setup.table, setup.native
        arrays = None
        if table is None:
            arrays = setup.arrays(placed, inputs, self.constants)
            table = self.table_for(sizes, arrays)
            native = self.native_tasks(table, setup.key)
        # the native loop runs on the real clock only (the aicore target's device clock calls kernels one by one)
        python = options.debug or execute_table is not None or native is None
        launch = _Launch(self, table, setup.bound, setup.key,
                         lambda: arrays or setup.arrays(placed, inputs, self.constants),
                         None if python else (native, lambda table, filled: setup.fill_pointers(
                             table, filled, placed, inputs)), options.debug)
        trace = (execute_table or execute)(table, launch, options)
        launch.release()  # a pool thread may still be returning from its last call, holding the launcher
        trace.memory = dict(setup.memory)
        # an output is a task's: stored in a buffer of its own, or folded at build time and shared by
        # every run, when each gets its own writable copy
        return {name: placed.own[name] if name in placed.own else np.array(self.constants[name])
                for name in wl.outputs}, trace


def _mismatch(manifest: Manifest, schedule: Schedule) -> str | None:
    """Why a verified manifest cannot describe this workload's build (names it does not have), or None:
    cheap checks, as a key collision or a manifest written by hand is all they can catch."""
    wl = schedule.workload
    tensors = {*wl.inputs, *wl.constants, *(t.name for n in wl.tasks for t in wl.task(n).outputs)}
    if not set(manifest.order) <= set(wl.tasks) or not set(manifest.kernels) <= set(manifest.order):
        return f"its tasks {list(manifest.order)} are not tasks of workload {wl.name!r}"
    for name, entry in manifest.kernels.items():
        named = {*entry.arguments, *(t for t, _ in (*entry.access.reads, *entry.access.writes))}
        if not named <= tensors:
            return f"kernel {name!r} names tensors {sorted(named - tensors)} the workload does not have"
        read = {*entry.access.sizes, *(s for f in entry.grid for s in f.sizes())}
        if entry.access.sizes != tuple(wl.sizes) or not read <= set(wl.sizes):
            return f"kernel {name!r} reads sizes {sorted(read)}, the workload has {list(wl.sizes)}"
        if any(f.coordinates() for f in entry.grid):
            return f"kernel {name!r}: a grid extent reads a grid coordinate"
        if len(entry.grid) != len(entry.access.grid):
            return f"kernel {name!r}: its grid has {len(entry.grid)} extents, its access {len(entry.access.grid)}"
        if len(entry.variants) != len(schedule.variants.get(name, ())):
            return f"kernel {name!r}: {len(entry.variants)} specialized versions, the schedule has " \
                   f"{len(schedule.variants.get(name, ()))}"
    return None


def _linked(program: Program) -> list[str]:
    """The LLVM IR of the declared intrinsics the program's kernels call."""
    return linked_ir({name for _, name in program.schedule.tensorized.values()})


def _emit_task(module: ir.Module, program: Program, name: str, cpu: TargetCpu) -> tuple[str, tuple[str, ...]]:
    """Emit a task's kernel and its specialized versions for `cpu` into `module`: (symbol, variant symbols)."""
    kernel = program.kernels[name]
    symbol = f"ptowsp_{name}"
    KernelEmitter(module, kernel, symbol, cpu).emit()
    variants = []
    for k, (_, variant) in enumerate(program.variants.get(name, ()), 1):
        variants.append(f"{symbol}.v{k}")  # "." keeps it apart from any task name
        if {b.name for b in variant.inputs} != {b.name for b in kernel.inputs}:
            raise BuildError(f"task {name!r}: variant {k} reads {sorted(b.name for b in variant.inputs)}, "
                             f"its own loops {sorted(b.name for b in kernel.inputs)}")
        variant = dataclasses.replace(variant, inputs=kernel.inputs)  # one argument list for all
        KernelEmitter(module, variant, variants[-1], cpu).emit()
    return symbol, tuple(variants)


class _Launch:
    """Runs instance i of the table: its kernel at its grid coordinates, or an opaque task on the host.
    Its `native` hands the table to the runtime's native loop instead (None where Python calls the
    kernels one by one: debug checks before each kernel, the aicore target's device clock, opaque
    tasks).  The run's tensors become arrays (`arrays`) only when Python code needs them."""

    load = store = None

    def __init__(self, exe: CpuExecutable, table: TaskTable, workload: Workload, sizes: tuple[int, ...],
                 arrays: Callable[[], dict[str, np.ndarray]], native: tuple[NativeTasks, Fill] | None,
                 debug: bool = False):
        self.exe, self.instances = exe, table.instances
        self.workload = workload
        self.sizes = sizes
        self._make_arrays: Callable[[], dict[str, np.ndarray]] | None = arrays
        self._arrays: dict[str, np.ndarray] = {}
        # debug: the gathers of each kernel's task (inlined producers included), checked before it runs
        self.gathers = {name: value for name in exe.entries if gather_indices(
            value := inline_producers(workload.task(name).value, workload, exe.schedule.inlined))} if debug else {}
        self.bound: dict | None = None  # (task, version) -> (function, pointers), made when Python first calls one
        self.native = native  # the native loop's view of the run: its kernels' thunks, and what writes the tensors' addresses

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._make_arrays is not None:
            self._arrays, self._make_arrays = self._make_arrays(), None
        return self._arrays

    def release(self) -> None:
        """Drop the run's arrays, so the Recycler sees only the caller's references."""
        self._arrays, self._make_arrays, self.bound, self.native = {}, None, {}, None

    def compute(self, i: int) -> None:
        inst = self.instances[i]
        if self.bound is None:  # arrays are fixed for the run, so each kernel's pointer arguments are too
            arrays = self.arrays
            pointers = {name: tuple(arrays[a].ctypes.data for a in entry.arguments)
                        for name, entry in self.exe.entries.items()}
            self.bound = {key: (function, pointers[key[0]]) for key, function in self.exe.functions.items()}
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
        """The width of the chosen CPU's vector registers (isa.py: the host's unless PTOWSP_CPU names a level)."""
        return target_cpu().vector_bytes

    def unavailable_reason(self) -> str | None:
        try:
            cpu = target_cpu()
        except BuildError as e:  # PTOWSP_CPU names no level
            return str(e)
        try:
            target_machine(cpu)
        except Exception as e:  # noqa: BLE001 - any failure means no native target here
            return f"LLVM cannot target this host: {e}"
        return None

    def cores(self, workers, device) -> tuple[str | None, ...]:
        return host_cores(self.name, workers, device)

    def compile_default(self, schedule: Schedule, device: None = None) -> CpuExecutable:
        return self.compile(schedule, device)

    def compile(self, schedule: Schedule, device: None = None) -> CpuExecutable:
        return CpuExecutable(schedule)

    def default_workload(self, wl: Workload) -> Workload:
        """3x3 convolutions over large enough images by Winograd's F(4x4, 3x3) (passes/winograd.py),
        the other convolutions blocked by one vector of output channels, or half of one where a
        whole one does not divide them (NCHWc, passes/blocking.py), the
        tasks around them computed in that layout too (passes/propagation.py),
        contractions whose second operand runs along the reduction reading it transposed
        (passes/transposing.py), the register tile's B operand stored as panels of its two
        vectors of columns, packed once rather than in every task (passes/panels.py), and long
        memory-bound sums of few outputs split into partial sums (passes/splitting.py)."""
        lanes = self.vector_bytes // 4
        wl = block_convolutions(winograd_convolutions(wl, lanes), lanes)
        wl = transpose_operands(propagate_blocking(wl, lanes), lanes)
        return split_reductions(pack_panels(wl, 2 * lanes))

    def schedule_choices(self, device: None) -> Choose:
        """The default's answers, but an int8 register tile calls `gemm_i8` where the chosen CPU has VNNI."""
        if not target_cpu().vnni:
            return keep_default

        def choose(name, candidates, default):
            return "gemm_i8" if decision_parts(name)[1] == "tensorize" and "gemm_i8" in candidates else default

        return choose
