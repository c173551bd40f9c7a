"""Declare overloaded LLVM intrinsics with their mangled names (llvmlite cannot mangle vector types)."""

from __future__ import annotations

from llvmlite import ir


def mangle(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{mangle(t.element)}"
    if isinstance(t, ir.PointerType):
        return "p0"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {ir.FloatType: "f32", ir.DoubleType: "f64", ir.HalfType: "f16"}[type(t)]


def declare(module: ir.Module, name: str, overloads: list[ir.Type], fn_type: ir.FunctionType) -> ir.Function:
    """The intrinsic `name.<overload types>` with an explicit signature, declared once per module."""
    full = ".".join([name, *(mangle(t) for t in overloads)])
    existing = module.globals.get(full)
    return existing if existing is not None else ir.Function(module, fn_type, full)
