"""A thunk per kernel: one entry point the runtime's native loop can call for any kernel.

A kernel's signature follows its buffers and grid (`void k(ptr a, ptr b, i64
i, i64 n)`); the native loop (runtime/native.py) calls every instance the same
way, `void <symbol>.call(ptr pointers, ptr arguments)`: a pointer parameter is
read as an index into the run's `pointers` (a tensor's address, fixed for the
run), an integer parameter as the argument word itself (a grid coordinate or
a size, fixed for the table).
"""

from __future__ import annotations

from llvmlite import ir

I64 = ir.IntType(64)


def thunk_symbol(symbol: str) -> str:
    return f"{symbol}.call"  # "." keeps it apart from any task name


def emit_thunk(module: ir.Module, kernel: ir.Function) -> None:
    """Emit the thunk of `kernel` into its module."""
    thunk = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), ir.PointerType()]),
                        thunk_symbol(kernel.name))
    pointers, arguments = thunk.args
    b = ir.IRBuilder(thunk.append_basic_block("entry"))
    values = []
    for k, parameter in enumerate(kernel.args):
        word = b.load(b.gep(arguments, [ir.Constant(I64, k)], source_etype=I64), typ=I64)
        if isinstance(parameter.type, ir.PointerType):
            word = b.load(b.gep(pointers, [word], source_etype=I64), typ=ir.PointerType())
        values.append(word)
    b.call(kernel, values)
    b.ret_void()
