"""Which CPU the cpu target compiles for: the host, or a named x86-64 ISA level.

Every decision that depends on the CPU reads the `TargetCpu` chosen here, never the host
directly: LLVM's CPU name and features, the width of a vector register (and with it the default
schedule's register tiles, the AutoScheduler's space and the built-in micro-kernels), whether
AVX-512 VNNI is there, and the kernel cache's key.  The choice is the environment variable
`PTOWSP_CPU`, read in `target_cpu()` and nowhere else:

- `host` (or unset): the host's own CPU name and features;
- `x86-64-v3`: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE: 32-byte vectors, 16 vector registers;
- `x86-64-v4`: v3 and AVX-512 F, BW, CD, DQ, VL: 64-byte vectors, 32 registers (no VNNI: it is
  not part of the level).

A level is what LLVM calls the CPU of that name, tuned generically.  So a machine with AVX-512
runs the suite as an AVX2-only machine would compile it.  Code for a level the host lacks can be
compiled and inspected (`prog.source(task, "asm")`) but not run: `unrunnable_reason()` says which
features are missing, and the cpu target's run raises `HostCannotRun` rather than executing an
illegal instruction.
"""

from __future__ import annotations

import os

import llvmlite.binding as llvm
from pydantic import BaseModel, ConfigDict

from ptowsp.errors import BuildError
from ptowsp.once import once

ENVIRONMENT = "PTOWSP_CPU"
HOST = "host"

_V3 = ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
# level -> (bytes of a vector register, host features its code executes with)
LEVELS: dict[str, tuple[int, tuple[str, ...]]] = {"x86-64-v3": (32, _V3), "x86-64-v4": (64, _V4)}


class HostCannotRun(BuildError):
    """A program compiled for a CPU level this machine lacks was asked to run (it may be built and read)."""


class TargetCpu(BaseModel):
    """The CPU kernels are compiled for (frozen: it keys caches of target machines and kernels)."""

    model_config = ConfigDict(frozen=True)

    level: str  # "host" or a name of LEVELS
    cpu: str  # LLVM's CPU name
    features: str  # LLVM's feature string; empty for a level (its name implies them)
    vector_bytes: int  # width of the widest vector register: what vector and register tiles are multiples of
    vnni: bool  # AVX-512 VNNI (vpdpbusd): the int8 register tile calls gemm_i8 with it
    avx2: bool  # AVX2 (vpmaddwd): ... or, without VNNI, with int16 pairs (microkernel.py)
    needs: tuple[str, ...]  # host features the code executes with

    def unrunnable_reason(self) -> str | None:
        """None when this machine can execute the code, else why not."""
        host = host_features()
        missing = [f for f in self.needs if not host.get(f)]
        if not missing:
            return None
        return (f"code compiled for {self.level} ({ENVIRONMENT}={self.level}) needs {', '.join(missing)}, which "
                f"this CPU lacks; it can be built and its source inspected, but to run it compile for the "
                f"host ({ENVIRONMENT}=host or unset) or for a level the host has")


def target_cpu(name: str | None = None) -> TargetCpu:
    """The CPU called `name` ("host" or a level), by default the one PTOWSP_CPU names (unset: the
    host); BuildError for a name that is not a level."""
    if name is None:
        name = os.environ.get(ENVIRONMENT, "").strip() or HOST
    return _resolve(name)


@once
def _resolve(name: str) -> TargetCpu:
    if name == HOST:
        features = host_features()
        width = 64 if features.get("avx512f") else 32 if features.get("avx") else 16
        return TargetCpu(level=HOST, cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                         vector_bytes=width, vnni=bool(features.get("avx512vnni")), avx2=bool(features.get("avx2")),
                         needs=())
    if name not in LEVELS:
        raise BuildError(f"{ENVIRONMENT}={name!r} names no CPU the cpu target compiles for; use "
                         f"{', '.join([HOST, *LEVELS])}")
    if not llvm.get_process_triple().startswith("x86_64"):
        raise BuildError(f"{ENVIRONMENT}={name!r} is an x86-64 level, but this machine is "
                         f"{llvm.get_process_triple()}; use {ENVIRONMENT}={HOST}")
    width, needs = LEVELS[name]
    return TargetCpu(level=name, cpu=name, features="", vector_bytes=width, vnni=False, avx2="avx2" in needs,
                     needs=needs)


@once
def host_features() -> dict[str, bool]:
    """The features of the CPU this process runs on, as LLVM names them ("avx2", "avx512f", ...)."""
    return dict(llvm.get_host_cpu_features())


__all__ = ["ENVIRONMENT", "LEVELS", "HostCannotRun", "TargetCpu", "host_features", "target_cpu"]
