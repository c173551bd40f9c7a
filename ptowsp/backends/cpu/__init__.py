"""The `cpu` target: kernels compiled to native code with llvmlite, called through ctypes.

`CpuBackend` is the target's entry in the registry: the workload passes it runs before the
default schedule, and the default's answers for the chosen CPU.  The modules beside it:
compile.py (what is compiled, and the cache key), cache.py (the verified kernel cache),
executable.py (`CpuExecutable`: tables, memory plans and run set-ups per binding of the sizes,
and a run), launch.py (one run's launcher: Python calls or the native loop), codegen.py and
its helpers (LLVM IR of one kernel), jit.py (LLVM's optimiser and object code), isa.py (the
CPU the kernels are for).
"""

from __future__ import annotations

from ptowsp.backends.base import host_cores
from ptowsp.backends.cpu.compile import describe
from ptowsp.backends.cpu.executable import CpuExecutable
from ptowsp.backends.cpu.isa import target_cpu
from ptowsp.backends.cpu.jit import target_machine
from ptowsp.errors import BuildError
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.passes.blocking import block_convolutions
from ptowsp.schedules.passes.panels import pack_panels
from ptowsp.schedules.passes.propagation import propagate_blocking
from ptowsp.schedules.passes.splitting import split_reductions
from ptowsp.schedules.passes.tiles import tile_vectors
from ptowsp.schedules.passes.transposing import transpose_operands
from ptowsp.schedules.passes.winograd import winograd_convolutions
from ptowsp.schedules.passes.decisions import Decision
from ptowsp.schedules.passes.default import Choose, keep_default
from ptowsp.workloads import Workload


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

    def compile_default(self, resolved: ResolvedSchedule, device: None = None) -> CpuExecutable:
        return self.compile(resolved, device)

    def compile(self, resolved: ResolvedSchedule, device: None = None) -> CpuExecutable:
        return CpuExecutable(resolved)

    def default_workload(self, wl: Workload) -> Workload:
        """3x3 convolutions over large enough images by Winograd's F(4x4, 3x3) (passes/winograd.py),
        the other convolutions blocked by one vector of output channels, or half of one where a
        whole one does not divide them (NCHWc, passes/blocking.py), the
        tasks around them computed in that layout too (passes/propagation.py),
        contractions whose second operand runs along the reduction reading it transposed
        (passes/transposing.py), the register tile's B operand stored as panels of its two
        or three vectors of columns, packed once rather than in every task (passes/panels.py), and long
        memory-bound sums of few outputs split into partial sums (passes/splitting.py)."""
        lanes = self.vector_bytes // 4
        wl = block_convolutions(winograd_convolutions(wl, lanes), lanes)
        wl = transpose_operands(propagate_blocking(wl, lanes), lanes)
        return split_reductions(pack_panels(wl, tuple(v * lanes for v in tile_vectors(self.vector_bytes))))

    def cube_tiler(self, device: None) -> None:
        return None  # no matrix cores: contractions take register tiles

    def schedule_choices(self, device: None) -> Choose:
        """The default's answers, but an int8 register tile calls `gemm_i8` where the chosen CPU has
        VNNI (`vpdpbusd`) or AVX2 (`vpmaddwd`, microkernel.py)."""
        if not (target_cpu().vnni or target_cpu().avx2):
            return keep_default

        def choose(name, candidates, default):
            return "gemm_i8" if Decision.parse(name).kind == "tensorize" and "gemm_i8" in candidates else default

        return choose


__all__ = ["CpuBackend", "CpuExecutable", "describe"]
