"""Render a GPU kernel (spmd.py) as an NVPTX entry point with llvmlite.

The cpu emitter does the arithmetic, memory and numpy-exact semantics; this
one changes what differs on a GPU:

- the function is a `ptx_kernel` entry; the thread axes (`threadIdx.x`, ...)
  are read from the special registers once, at entry;
- a `shared` buffer is a static array in address space 3, reached through a
  generic pointer (LLVM infers `ld.shared`/`st.shared` back); other buffers
  are allocas, which LLVM keeps in registers when their indices are constant;
- a barrier is `bar.sync 0`;
- a `gemm_f16` / `gemm_bf16` call is warp-wide `mma.sync` (mma.py);
- loops never become vectors, and nothing calls libm: NVPTX has no libm, so
  exp, log, tanh, sigmoid, erf and pow are computed inline by the cpu
  target's float32 polynomials (float16 goes through float32; bfloat16 is a
  float32 in registers already, rounded after each operation as on the cpu).
  float64 has none yet: BuildError says so.
"""

from __future__ import annotations

import math
from dataclasses import replace

from llvmlite import ir

from ptowsp.backends.cpu.codegen import KernelEmitter
from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.backends.cpu.types import MEMORY, REGISTER, is_float
from ptowsp.backends.cpu.vecmath import VectorMath
from ptowsp.backends.cuda import mma
from ptowsp.backends.cuda.accumulators import WarpAccumulators
from ptowsp.backends.cuda.spmd import BLOCK_AXES, LANE_AXES, GpuKernel
from ptowsp.errors import BuildError
from ptowsp.lower.ir import SHARED, Allocate, Barrier, For, Stmt, Tensorized
from ptowsp.te import Expr, Op

I32, I64, F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
DEVICE_ALIGNMENT = 256  # what cuMemAlloc guarantees for every buffer
_SREG = {**{axis: f"llvm.nvvm.read.ptx.sreg.ctaid.{axis[-1]}" for axis in BLOCK_AXES},
         **{axis: f"llvm.nvvm.read.ptx.sreg.tid.{axis[-1]}" for axis in LANE_AXES}}
_MATH = {Op.EXP: "exp", Op.LOG: "log", Op.TANH: "tanh", Op.SIGMOID: "sigmoid", Op.ERF: "erf"}
_SMALL_POWERS = range(-4, 5)  # x ** n for these constant n: multiplications, exact as numpy's


class NoLibm:
    """Math without libm for an emitter: what the GPU computes inline (a mixin, so the tests can
    run the same code generation on the host and compare it with numpy)."""

    def through_float32(self, x: ir.Value, dtype: str, what: str, fn) -> ir.Value:
        """fn on float32 scalars, for a float32, bfloat16 (a float32 register, rounded by `value`) or
        float16 value (widened, then rounded)."""
        if dtype == "float64":
            raise BuildError(f"task {self.kernel.name!r}: float64 {what} is not supported on the cuda target "
                             "(NVPTX has no libm); cast to float32 around it")
        if REGISTER[dtype] == F32:
            return fn(x)
        return self.b.fptrunc(fn(self.b.fpext(x, F32)), REGISTER[dtype])

    def lanewise(self, name: str, *args: ir.Value) -> ir.Value:
        """A VectorMath function on float32 scalars, as one-lane vectors (LLVM scalarizes them)."""
        one = ir.VectorType(F32, 1)
        zero = ir.Constant(I32, 0)
        vectors = [self.b.insert_element(ir.Constant(one, ir.Undefined), a, zero) for a in args]
        return self.b.extract_element(getattr(VectorMath(self.b, self.module, 1), name)(*vectors), zero)

    def unary(self, op: Op, x: ir.Value, dtype: str) -> ir.Value:
        if op in _MATH and is_float(dtype):
            return self.through_float32(x, dtype, op.name.lower(), lambda v: self.lanewise(_MATH[op], v))
        return super().unary(op, x, dtype)

    def erf(self, x: ir.Value, dtype: str) -> ir.Value:
        return self.through_float32(x, dtype, "erf", lambda v: self.lanewise("erf", v))

    def compute(self, e: Expr, mask: ir.Value | None) -> ir.Value:
        if e.op is Op.POW and e.src[1].op is Op.CONST and e.src[1].arg in _SMALL_POWERS:
            return self.small_power(self.value(e.src[0], mask), int(e.src[1].arg), e.dtype)
        return super().compute(e, mask)

    def small_power(self, x: ir.Value, n: int, dtype: str) -> ir.Value:
        t = REGISTER[dtype]
        result = ir.Constant(t, 1.0) if is_float(dtype) else ir.Constant(t, 1)
        for _ in range(abs(n)):
            result = self.b.fmul(result, x) if is_float(dtype) else self.b.mul(result, x)
        return self.b.fdiv(ir.Constant(t, 1.0), result) if n < 0 else result

    def binary(self, op: Op, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        if op is Op.POW and is_float(dtype):
            return self.through_float32(a, dtype, "pow", lambda x: self.power(
                x, b if REGISTER[dtype] == F32 else self.b.fpext(b, F32)))
        return super().binary(op, a, b, dtype)

    def power(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """numpy's float32 x ** y: exp(y log|x|) with the sign of an odd integer power of a negative x,
        NaN for a negative x and a fractional y, and 1 whenever y == 0 or x == 1."""
        b, f = self.b, lambda v: ir.Constant(F32, v)
        magnitude = self.lanewise("exp", b.fmul(y, self.lanewise("log", self.intrinsic("llvm.fabs", F32, [x]))))
        whole = b.fcmp_ordered("==", self.intrinsic("llvm.floor", F32, [y]), y)
        half = b.fmul(y, f(0.5))
        odd = b.and_(whole, b.fcmp_ordered("!=", self.intrinsic("llvm.floor", F32, [half]), half))
        negative = b.fcmp_ordered("<", x, f(0.0))
        signed = b.select(odd, b.fneg(magnitude), magnitude)
        result = b.select(negative, b.select(whole, signed, f(float("nan"))), magnitude)
        one = b.or_(b.fcmp_ordered("==", y, f(0.0)), b.fcmp_ordered("==", x, f(1.0)))
        return b.select(one, f(1.0), result)


class GpuEmitter(NoLibm, KernelEmitter):
    """Emits one GPU kernel into an NVPTX module; `emit()` returns the function."""

    target = "cuda"

    def __init__(self, module: ir.Module, kernel: GpuKernel, symbol: str):
        super().__init__(module, kernel, symbol)  # type: ignore[arg-type]  # the same fields a Kernel has
        self.fn.calling_convention = "ptx_kernel"
        self.symbol = symbol
        self.accumulators: dict[int, ir.Value] = {}  # warp call -> its accumulators, where a loop holds them
        for arg in self.fn.args[:len(kernel.inputs) + len(kernel.outputs)]:
            arg.attributes.align = DEVICE_ALIGNMENT  # device memory starts aligned: vector loads are legal
        entry = ir.IRBuilder(self.entry)
        for axis, register in _SREG.items():
            read = entry.call(ir.Function(module, ir.FunctionType(I32, []), register)
                              if register not in module.globals else module.globals[register], [])
            self.env[axis] = entry.zext(read, I64, name=axis)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, WarpAccumulators):
            mma.hold(self, s.call, s.body)
        elif isinstance(s, Barrier):
            barrier = declare(self.module, "llvm.nvvm.barrier0", [], ir.FunctionType(ir.VoidType(), []))
            self.b.call(barrier, [])
        elif isinstance(s, For) and s.kind not in ("serial", "unrolled"):
            super().stmt(replace(s, kind="serial"))
        else:
            super().stmt(s)

    def call_intrinsic(self, s: Tensorized) -> None:
        if mma.is_warp_call(s):
            mma.emit(self, s)
        else:
            super().call_intrinsic(s)

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        count = math.prod(buf.shape)
        entry = ir.IRBuilder(self.entry)
        if buf.scope == SHARED:
            name = f"{self.symbol}.{buf.name}"
            array = ir.ArrayType(MEMORY[buf.dtype], count)
            memory = self.module.globals.get(name)
            if memory is None:
                memory = ir.GlobalVariable(self.module, array, name, addrspace=3)
                memory.linkage, memory.initializer, memory.align = "internal", ir.Constant(array, ir.Undefined), 16
            pointer = entry.addrspacecast(memory, ir.PointerType())
        else:
            pointer = entry.alloca(MEMORY[buf.dtype], size=ir.Constant(I64, count), name=buf.name)
        self.pointers[buf.name], self.buffers[buf.name] = pointer, buf
        self.stmt(s.body)
