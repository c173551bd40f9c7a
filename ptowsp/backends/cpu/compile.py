"""What the cpu target compiles and how: the text that keys the kernel cache (`describe`), each
task's kernel and specialized versions emitted as LLVM IR, compiled to one object with its manifest
(`compiled`), or a verified cache entry that fits the workload loaded instead (`cached`)."""

from __future__ import annotations

import dataclasses

from llvmlite import ir

from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.isa import TargetCpu
from ptowsp.backends.cpu.microkernel import linked_ir
from ptowsp.backends.cpu.thunks import emit_thunk, thunk_symbol
from ptowsp.backends.cpu.twins import shape_of
from ptowsp.backends.cpu import cache
from ptowsp.backends.cpu.cache import KernelEntry, Manifest
from ptowsp.backends.cpu.jit import LoadedObject, compile_object, host_module
from ptowsp.errors import BuildError
from ptowsp.lower import Buffer, Program
from ptowsp.lower.formula import formula_of
from ptowsp.schedules import Schedule
from ptowsp.te import Expr, Tensor
from ptowsp.workloads import ComputeTask
from ptowsp.workloads.intrinsic import lookup


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


def mismatch(manifest: Manifest, schedule: Schedule) -> str | None:
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


def linked(program: Program) -> list[str]:
    """The LLVM IR of the declared intrinsics the program's kernels call."""
    return linked_ir({name for _, name in program.schedule.tensorized.values()})


def emit_task(module: ir.Module, program: Program, name: str, cpu: TargetCpu) -> tuple[str, tuple[str, ...]]:
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


def cached(key: str, schedule: Schedule, cpu: TargetCpu) -> tuple[LoadedObject, Manifest] | None:
    """The verified cache entry under `key`, loaded, if it fits this workload and schedule."""
    found = cache.load(key)
    if found is None:
        return None
    data, manifest = found
    obj, path = cache.entry_paths(key)
    problem = mismatch(manifest, schedule)
    if problem:
        cache.discard(path, problem)
        return None
    try:
        loaded = LoadedObject(data, cpu)
    except RuntimeError as e:  # llvmlite's error for an object it cannot link
        cache.discard(obj, f"LLVM cannot load the object code ({e})")
        return None
    missing = [s for e in manifest.kernels.values() for k in (e.symbol, *e.variants)
               for s in (k, thunk_symbol(k)) if not loaded.address(s)]
    if missing:
        cache.discard(obj, f"the object code has no symbol {missing[0]!r}")
        return None
    return loaded, manifest


def compiled(key: str, program: Program, cpu: TargetCpu) -> tuple[LoadedObject, Manifest, str]:
    """Emit, optimise and compile every kernel of `program` for `cpu`, stored in the cache under `key`:
    (the loaded object, its manifest, the LLVM IR before optimisation)."""
    kernels, compiled, texts = {}, {}, []  # compiled: a kernel's shape (twins.py) -> its symbols
    for name, kernel in program.kernels.items():
        alone = host_module(program.workload.name)  # each task in a module of its own, linked in LLVM
        symbol, variants = emit_task(alone, program, name, cpu)
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
    data = compile_object(texts or [str(host_module(program.workload.name))], cpu, linked(program))
    return LoadedObject(data, cpu), cache.store(key, data, tuple(program.order), kernels), "\n".join(texts)
