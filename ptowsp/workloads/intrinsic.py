"""Hardware intrinsics declared by the computation they perform (TVM's decl_tensor_intrin).

`pw.intrinsic(name, compute, implementations)`: `compute` is a workload with one compute task,
the pattern: what one call computes, over its inputs (operands).  Its extents may be sizes
("m", "n", "k"): the call site binds them.  A reduction pattern `c[i, j] = sum(f, r)` is
carried out as an update, `c[i, j] += sum(f, r)`: the output window already holds the running
value (the lowering stores the identity before, as for any reduction).

`implementations` maps a target to how it carries the pattern out:

- `"cpu"`: LLVM IR text defining the function `@<symbol>` (`symbol`: the name with non-identifier
  characters as `_`), `BUILTIN` for a micro-kernel the cpu backend generates, or `LOOPS`: the
  target runs the loops the call stands for (no fast path there, the same numbers);
- `"cuda"`: `BUILTIN` for an instruction the cuda backend emits (`mma.sync` for `gemm_f16` and
  `gemm_bf16`: a warp-level call, backends/cuda/mma.py), or `LOOPS`;
- `"aicore"`: the core class its calls run on (`"cube"` or `"vector"`); the numbers come from
  the cpu implementation, the time from the device model of that core class, or, with
  `cycles=` (device cycles of one call), that many cycles per call;
- a target without an entry refuses a schedule that uses the intrinsic (BuildError).

The cpu calling convention, every scalar an `i64`:

    void @symbol(ptr out, ptr in_0, ..., ptr in_n-1,
                 i64 extent of each pattern axis (spatial axes, then reduce axes, in order),
                 i64 stride of each dimension of out, then of in_0, ... (in elements))

where each pointer addresses the operand window's first element.  A schedule uses an intrinsic
with `s.tensorize(task, loop, name)` (the same step as `bind(task, loop, kernel=name)`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ptowsp.errors import WorkloadError
from ptowsp.te import Expr, Op, cast, reduce_axis, reduce_sum, walk
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload

BUILTIN = "builtin"  # an implementation the target's backend generates (a micro-kernel)
LOOPS = "loops"  # the target runs the loops a call stands for: no fast path there, the same numbers
CORE_CLASSES = ("cube", "vector")


@dataclass(frozen=True)
class Intrinsic:
    name: str
    pattern: Workload  # one compute task over its inputs
    implementations: Mapping[str, str]
    cycles: float | None = None  # device cycles of one call on aicore (None: the device model's rate)

    @property
    def task(self) -> ComputeTask:
        task = self.pattern.task(self.pattern.tasks[0])
        assert isinstance(task, ComputeTask)
        return task

    @property
    def symbol(self) -> str:
        """The cpu function's name: `ptowsp_intrinsic_<name>` with non-identifier characters as `_`."""
        return "ptowsp_intrinsic_" + re.sub(r"\W", "_", self.name)

    @property
    def digest(self) -> str:
        """What a compiled kernel that calls it depends on: its pattern and implementations."""
        text = f"{self.pattern}\n" + "\n".join(f"{k}={v}" for k, v in sorted(self.implementations.items()))
        text += f"\ncycles={self.cycles}" if self.cycles is not None else ""
        return hashlib.sha256(text.encode()).hexdigest()[:16]


_REGISTRY: dict[str, Intrinsic] = {}


def intrinsic(name: str, compute: Workload, implementations: Mapping[str, str], *,
              cycles: float | None = None) -> Intrinsic:
    """Declare (or redeclare) the intrinsic `name`; schedules name it in `tensorize`.  `cycles`: the
    device cycles one call takes on the aicore target (default: the cube's fractal rate, or the vector
    unit's, applied to the pattern's arithmetic)."""
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"pw.intrinsic needs a name, got {name!r}")
    if not isinstance(compute, Workload):
        raise WorkloadError(f"intrinsic {name!r}: compute must be a pw.Workload with one compute task (the "
                            f"pattern one call computes), got {type(compute).__name__}")
    tasks = [compute.task(t) for t in compute.tasks]
    if len(tasks) != 1 or not isinstance(tasks[0], ComputeTask) or tasks[0].domain is not None or tasks[0].scan:
        raise WorkloadError(f"intrinsic {name!r}: the compute workload must hold exactly one compute task (no "
                            f"domain, no scan); it holds {', '.join(compute.tasks) or 'none'}")
    body = tasks[0].body
    nested = [n for n in _below(body) if n.op is Op.REDUCE]
    if nested or (body.op is Op.REDUCE and body.arg != "sum"):
        raise WorkloadError(f"intrinsic {name!r}: the pattern is elementwise or one sum at its top, got {body}")
    if not isinstance(implementations, Mapping) or not implementations:
        raise WorkloadError(f"intrinsic {name!r}: implementations maps targets to how each carries the pattern "
                            "out, e.g. {'cpu': llvm_ir_text, 'aicore': 'cube'}")
    for target, impl in implementations.items():
        if not isinstance(impl, str):
            raise WorkloadError(f"intrinsic {name!r}: the {target} implementation must be a string, got {impl!r}")
        if target == "aicore" and impl not in CORE_CLASSES:
            raise WorkloadError(f"intrinsic {name!r}: the aicore implementation names a core class "
                                f"({', '.join(CORE_CLASSES)}), got {impl!r}")
    if cycles is not None and (isinstance(cycles, bool) or not isinstance(cycles, (int, float))
                               or not 0 < cycles < float("inf")):
        raise WorkloadError(f"intrinsic {name!r}: cycles is the device cycles of one call on aicore, a positive "
                            f"number; got {cycles!r}")
    if cycles is not None and "aicore" not in implementations:
        raise WorkloadError(f"intrinsic {name!r}: cycles is its cost on aicore, but it has no aicore implementation "
                            "(implementations={..., 'aicore': 'cube' or 'vector'})")
    found = Intrinsic(name, compute, dict(implementations), None if cycles is None else float(cycles))
    if found.implementations.get("cpu", BUILTIN) not in (BUILTIN, LOOPS) and f"@{found.symbol}(" not in found.implementations["cpu"]:
        raise WorkloadError(f"intrinsic {name!r}: the cpu LLVM IR must define @{found.symbol}(...)")
    _REGISTRY[name] = found
    return found


def _below(body: Expr):
    """The nodes under a top-level sum (its body), or under the whole expression."""
    return walk(body.src[0] if body.op is Op.REDUCE else body)


def lookup(name: str) -> Intrinsic:
    """The intrinsic declared as `name` (built-ins first declared on first use)."""
    if name not in _REGISTRY and name in _BUILTINS:
        _REGISTRY[name] = _BUILTINS[name]()
    if name not in _REGISTRY:
        known = sorted({*_REGISTRY, *_BUILTINS})
        raise WorkloadError(f"no intrinsic named {name!r} is declared; declared: {', '.join(known)} "
                            "(pw.intrinsic declares one)")
    return _REGISTRY[name]


def _contraction(name: str, dtype: str, accumulate: str | None, implementations: dict[str, str]) -> Intrinsic:
    """C[i, j] += sum_r A[i, r] * B[r, j] over any m x n x k, A and B of `dtype`, each cast to
    `accumulate` first when it is given (C then holds that dtype)."""
    wl = Workload(name)
    a, b = wl.input("A", ("m", "k"), dtype), wl.input("B", ("k", "n"), dtype)
    r = reduce_axis(wl.size("k"), "r")

    def widened(x: Expr) -> Expr:
        return x if accumulate is None else cast(x, accumulate)

    wl.compute("C", ("m", "n"), lambda i, j: reduce_sum(widened(a[i, r]) * widened(b[r, j]), r))
    return Intrinsic(name, wl, implementations)


def _gemm() -> Intrinsic:
    """float32, any m x n x k: the cpu's register-tile micro-kernel (backends/cpu/microkernel.py)
    and the aicore cube."""
    return _contraction("gemm", "float32", None, {"cpu": BUILTIN, "aicore": "cube"})


def _gemm_i8() -> Intrinsic:
    """A and B int8, summed in int32: on cpu VNNI's `vpdpbusd` where the host has it
    (backends/cpu/microkernel.py), else scalar code; the aicore cube's int8 mode."""
    return _contraction("gemm_i8", "int8", "int32", {"cpu": BUILTIN, "aicore": "cube"})


def _mixed_gemm(name: str, dtype: str) -> Intrinsic:
    """A and B 16-bit floats, summed in float32: on cuda the tensor cores' `mma.sync.m16n8k16` (m, n, k
    multiples of 16, 8 and 16); the aicore cube's fp16 mode; on cpu, which has no 16-bit matrix unit,
    the loops."""
    return _contraction(name, dtype, "float32", {"cuda": BUILTIN, "cpu": LOOPS, "aicore": "cube"})


_BUILTINS = {"gemm": _gemm, "gemm_i8": _gemm_i8,
             "gemm_f16": lambda: _mixed_gemm("gemm_f16", "float16"),
             "gemm_bf16": lambda: _mixed_gemm("gemm_bf16", "bfloat16")}
