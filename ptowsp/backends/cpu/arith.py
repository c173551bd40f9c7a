"""Floor division and modulo with numpy's semantics, shared by the cpu and cuda emitters."""

from __future__ import annotations

from llvmlite import ir


class DivMod:
    """Mixin for an emitter with an IRBuilder `b`, `k(type, value)` constants and `intrinsic`."""

    def int_divmod(self, a: ir.Value, b: ir.Value, t: ir.IntType) -> tuple[ir.Value, ir.Value]:
        """Floor division and modulo as numpy: x // 0 == x % 0 == 0, MIN // -1 wraps."""
        zero, one, minus = self.k(t, 0), self.k(t, 1), self.k(t, -1)
        by_zero, by_minus = self.b.icmp_signed("==", b, zero), self.b.icmp_signed("==", b, minus)
        safe = self.b.select(self.b.or_(by_zero, by_minus), one, b)
        q, r = self.b.sdiv(a, safe), self.b.srem(a, safe)
        fix = self.b.and_(self.b.icmp_signed("!=", r, zero),
                          self.b.xor(self.b.icmp_signed("<", r, zero), self.b.icmp_signed("<", b, zero)))
        q = self.b.select(fix, self.b.sub(q, one), q)
        r = self.b.select(fix, self.b.add(r, b), r)
        q = self.b.select(by_minus, self.b.sub(zero, a), q)
        r = self.b.select(by_minus, zero, r)
        return self.b.select(by_zero, zero, q), self.b.select(by_zero, zero, r)

    def uint_divmod(self, a: ir.Value, b: ir.Value, t: ir.IntType) -> tuple[ir.Value, ir.Value]:
        """Unsigned floor division and modulo (truncation is the floor): x // 0 == x % 0 == 0."""
        zero = self.k(t, 0)
        by_zero = self.b.icmp_unsigned("==", b, zero)
        safe = self.b.select(by_zero, self.k(t, 1), b)
        q, r = self.b.udiv(a, safe), self.b.urem(a, safe)
        return self.b.select(by_zero, zero, q), self.b.select(by_zero, zero, r)

    def float_divmod(self, a: ir.Value, b: ir.Value, t: ir.Type) -> tuple[ir.Value, ir.Value]:
        """numpy's npy_divmod: floor division and a modulo with the divisor's sign."""
        zero, one, half = self.k(t, 0.0), self.k(t, 1.0), self.k(t, 0.5)
        mod = self.b.frem(a, b)
        div = self.b.fdiv(self.b.fsub(a, mod), b)
        mod_nonzero = self.b.fcmp_unordered("!=", mod, zero)
        fix = self.b.and_(mod_nonzero, self.b.xor(self.b.fcmp_ordered("<", b, zero),
                                                   self.b.fcmp_ordered("<", mod, zero)))
        mod = self.b.select(fix, self.b.fadd(mod, b), mod)
        div = self.b.select(fix, self.b.fsub(div, one), div)
        mod = self.b.select(mod_nonzero, mod, self.intrinsic("llvm.copysign", t, [zero, b]))
        floored = self.intrinsic("llvm.floor", t, [div])
        floored = self.b.select(self.b.fcmp_ordered(">", self.b.fsub(div, floored), half),
                                self.b.fadd(floored, one), floored)
        quotient = self.b.fdiv(a, b)
        floored = self.b.select(self.b.fcmp_unordered("!=", div, zero), floored,
                                self.intrinsic("llvm.copysign", t, [zero, quotient]))
        by_zero = self.b.fcmp_ordered("==", b, zero)
        return self.b.select(by_zero, quotient, floored), self.b.select(by_zero, self.b.frem(a, b), mod)
