"""LLVM types of ptowsp's dtypes and the conversions between them (te/dtypes.py states the rules).

- Integers of either signedness share one LLVM type (`i8` for int8 and uint8);
  the operations that differ (division, comparison, widening, conversion to
  and from floats) choose the unsigned instruction from the dtype.
- bfloat16 (llvmlite has no `bfloat` type) is an `i16` in memory and a
  float32 in registers that always holds a bfloat16 value: loads widen it
  (exact), every operation computes in float32 and `round_bfloat16` rounds
  its result to nearest even in integer arithmetic, stores keep the high half.
  That is what numpy + ml_dtypes computes elementwise, so the reference agrees.
- bool is `i1` in registers, one byte in memory.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.te import dtypes

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
REGISTER = {"float32": F32, "float64": ir.DoubleType(), "float16": ir.HalfType(), "bfloat16": F32,
            "int8": I8, "uint8": I8, "int16": I16, "uint16": I16, "int32": I32, "uint32": I32,
            "int64": I64, "uint64": I64, "bool": I1}
MEMORY = dict(REGISTER, bool=I8, bfloat16=I16)
ITEMSIZE = {d: np.dtype(d).itemsize for d in dtypes.DTYPES}
is_float, is_unsigned = dtypes.is_float, dtypes.is_unsigned


def signed_constant(value: int, width: int) -> int:
    """An unsigned value as the two's-complement signed integer LLVM's text form expects."""
    return value - (1 << width) if value >= 1 << (width - 1) else value


def like(x: ir.Value, t: ir.Type) -> ir.Type:
    """Scalar type t, as a vector of as many lanes as x has."""
    return ir.VectorType(t, x.type.count) if isinstance(x.type, ir.VectorType) else t


def constant_like(x: ir.Value, t: ir.Type, v: object) -> ir.Constant:
    """Constant v of scalar type t, splat to x's lanes."""
    c = ir.Constant(t, v)
    return ir.Constant(ir.VectorType(t, x.type.count), [c] * x.type.count) if isinstance(x.type, ir.VectorType) else c


class Conversions:
    """Mixin for an emitter with an IRBuilder `b`, a `module`, `ty(dtype)` (the register type, lanes
    included) and `intrinsic(name, type, args)`."""

    def from_memory(self, raw: ir.Value, dtype: str) -> ir.Value:
        """A loaded element (or vector of them) as a register value."""
        if dtype == "bool":
            return self.b.icmp_unsigned("!=", raw, constant_like(raw, I8, 0))
        if dtype == "bfloat16":  # the high half of a float32: exact
            wide = self.b.zext(raw, like(raw, I32))
            return self.b.bitcast(self.b.shl(wide, constant_like(wide, I32, 16)), like(raw, F32))
        return raw

    def to_memory(self, value: ir.Value, dtype: str) -> ir.Value:
        """A register value as the element (or vector of them) stored."""
        if dtype == "bool":
            return self.b.zext(value, like(value, I8))
        if dtype == "bfloat16":  # already rounded: the low half is zero
            bits = self.b.bitcast(value, like(value, I32))
            return self.b.trunc(self.b.lshr(bits, constant_like(bits, I32, 16)), like(value, I16))
        return value

    def round_bfloat16(self, x: ir.Value) -> ir.Value:
        """A float32 rounded to the nearest bfloat16, ties to even (NaN stays a quiet NaN, overflow gives inf)."""
        b = self.b
        bits = b.bitcast(x, like(x, I32))
        k = lambda v: constant_like(bits, I32, signed_constant(v, 32))  # noqa: E731
        odd = b.and_(b.lshr(bits, k(16)), k(1))
        rounded = b.and_(b.add(b.add(bits, k(0x7FFF)), odd), k(0xFFFF0000))
        quiet = b.and_(b.or_(bits, k(0x00400000)), k(0xFFFF0000))
        return b.bitcast(b.select(b.fcmp_unordered("uno", x, x), quiet, rounded), x.type)

    def saturate_narrow(self, x: ir.Value, dst: str) -> ir.Value:
        """A float converted to an integer of at most 16 bits as `llvm.fpto*i.sat` would (NaN -> 0), in
        vector instructions: clamped in floating point (the bounds are exact there), truncated to int32
        and narrowed.  x86 has no saturating conversion to 8 or 16 bits, and LLVM scalarizes
        `fptosi.sat` to them on AVX2: each lane clamped, converted and inserted alone (ResNet-50 int8's
        requantizing epilogues, 384 scalar conversions per tile)."""
        b = self.b
        scalar = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        bounds = np.iinfo(dst)
        x = b.select(b.fcmp_unordered("uno", x, x), constant_like(x, scalar, 0.0), x)
        x = self.intrinsic("llvm.maxnum", x.type, [x, constant_like(x, scalar, float(bounds.min))])
        x = self.intrinsic("llvm.minnum", x.type, [x, constant_like(x, scalar, float(bounds.max))])
        return b.trunc(b.fptosi(x, like(x, I32)), like(x, REGISTER[dst]))

    def round_to_odd_float32(self, x: ir.Value) -> ir.Value:
        """A float64 rounded to float32 toward zero, its last bit set when inexact: rounding that on
        to a float of at most 22 significant bits gives x correctly rounded (one rounding, not two)."""
        b = self.b
        t = b.fptrunc(x, like(x, F32))  # to nearest: one step away from zero too far, if so
        back = b.fpext(t, x.type)
        bits = b.bitcast(t, like(x, I32))
        magnitude = lambda v: self.intrinsic("llvm.fabs", v.type, [v])  # noqa: E731
        away = b.fcmp_ordered(">", magnitude(back), magnitude(x))
        bits = b.select(away, b.sub(bits, constant_like(bits, I32, 1)), bits)
        bits = b.select(b.fcmp_ordered("!=", back, x), b.or_(bits, constant_like(bits, I32, 1)), bits)
        return b.bitcast(bits, t.type)

    def cast(self, x: ir.Value, src: str, dst: str) -> ir.Value:
        """Convert by te/dtypes.py's rules: integers wrap, floats round to nearest even, float -> int
        truncates and saturates (NaN -> 0), -> bool is != 0."""
        src = "float32" if src == "bfloat16" else src  # its register is a float32 already
        if dst == "bfloat16":
            return self.round_bfloat16(self.cast(x, src, "float32"))
        if src == dst:
            return x
        s, d = REGISTER[src], self.ty(dst)
        if dst == "bool":
            if is_float(src):
                return self.b.fcmp_unordered("!=", x, constant_like(x, s, 0.0))
            return self.b.icmp_unsigned("!=", x, constant_like(x, s, 0))
        if src == "float64" and dst == "float16":  # (x86 has no instruction, and the libcall may be missing)
            return self.b.fptrunc(self.round_to_odd_float32(x), d)
        if is_float(src) and is_float(dst):
            return (self.b.fpext if ITEMSIZE[dst] > ITEMSIZE[src] else self.b.fptrunc)(x, d)
        if is_float(dst):
            return (self.b.uitofp if src == "bool" or is_unsigned(src) else self.b.sitofp)(x, d)
        if is_float(src):
            if src == "float16":  # widened first (exactly): LLVM's half -> i16 saturating conversion gave
                x = self.b.fpext(x, like(x, F32))  # -32768 for a scalar NaN on x86, where the rule says 0
            if ITEMSIZE[dst] <= 2:
                return self.saturate_narrow(x, dst)
            name = "llvm.fptoui.sat" if is_unsigned(dst) else "llvm.fptosi.sat"
            return self.b.call(declare(self.module, name, [d, x.type], ir.FunctionType(d, [x.type])), [x])
        if src == "bool" or REGISTER[dst].width > s.width:
            return (self.b.zext if src == "bool" or is_unsigned(src) else self.b.sext)(x, d)
        return x if REGISTER[dst].width == s.width else self.b.trunc(x, d)
