"""Intrinsic calls on the cpu: the call of a `Tensorized` statement and the built-in micro-kernels.

A call passes each operand window's first element, the pattern's extents and every operand
dimension's stride (workloads/intrinsic.py gives the convention).  A declared intrinsic's own
LLVM IR is linked into the module (`linked_ir`); a built-in one is generated here, specialised
to the call's extents: `gemm` is a register tile, M rows x (N / lanes) vectors of accumulators
loaded from C once, updated by one broadcast of A and one vector load of B per row and vector
at each k (fused multiply-adds), and stored once.  Columns past the last whole vector, and
operands whose rows are not contiguous, use scalar code.  Functions are `alwaysinline`, so LLVM
sees the constant strides of each call site.
"""

from __future__ import annotations

from llvmlite import ir

from ptowsp.errors import BuildError
from ptowsp.lower.ir import Tensorized
from ptowsp.workloads.intrinsic import BUILTIN, Intrinsic, lookup

I64 = ir.IntType(64)
F32 = ir.FloatType()


def intrinsic_function(module: ir.Module, call: Tensorized, target: str, lanes: int, contiguous: bool,
                       task: str) -> ir.Function:
    """The function a call invokes on `target`: declared (its IR is linked in) or generated."""
    found = lookup(call.intrinsic)
    impl = found.implementations.get(target)
    if impl is None:
        raise BuildError(f"task {task!r}: intrinsic {found.name!r} has no {target} implementation (it has "
                         f"{', '.join(sorted(found.implementations))}); tensorize it only for those targets")
    operands = len(call.operands)
    strides = sum(len(o.dims) for o in call.operands)
    fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType()] * operands + [I64] * (len(call.extents) + strides))
    if impl != BUILTIN:
        existing = module.globals.get(found.symbol)
        return existing if existing is not None else ir.Function(module, fn_type, found.symbol)
    if found.name != "gemm":
        raise BuildError(f"task {task!r}: intrinsic {found.name!r} has no built-in {target} micro-kernel")
    m, n, k = call.extents
    name = f"{found.symbol}.{m}x{n}x{k}.{'v' if contiguous else 's'}{lanes}"
    existing = module.globals.get(name)
    return existing if existing is not None else _gemm(module, fn_type, name, m, n, k, lanes if contiguous else 0)


def linked_ir(intrinsics: set[str]) -> list[str]:
    """The LLVM IR texts of the declared (not built-in) cpu implementations among `intrinsics`."""
    found = [lookup(name) for name in sorted(intrinsics)]
    return [i.implementations["cpu"] for i in found if i.implementations.get("cpu", BUILTIN) != BUILTIN]


def _gemm(module: ir.Module, fn_type: ir.FunctionType, name: str, m: int, n: int, k: int,
          lanes: int) -> ir.Function:
    """C[m, n] += A[m, k] * B[k, n] (float32); vectors of `lanes` columns when lanes > 0 (unit-stride rows)."""
    fn = ir.Function(module, fn_type, name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    c, a, b, _, _, _, c0, c1, a0, a1, b0, b1 = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    whole = n // lanes if lanes else 0
    vec = ir.VectorType(F32, max(lanes, 1))
    fma_vec = module.globals.get(f"llvm.fma.v{lanes}f32") if lanes else None
    if lanes and fma_vec is None:
        fma_vec = ir.Function(module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{lanes}f32")
    fma = module.globals.get("llvm.fma.f32") or ir.Function(module, ir.FunctionType(F32, [F32] * 3), "llvm.fma.f32")

    def at(base, *terms):
        offset = ir.Constant(I64, 0)
        for index, stride in terms:
            offset = builder.add(offset, builder.mul(index if isinstance(index, ir.Value) else ir.Constant(I64, index),
                                                     stride))
        return builder.gep(base, [offset], source_etype=F32)

    acc_vectors = [[builder.load(at(c, (row, c0), (v * lanes, c1)), typ=vec, align=4) for v in range(whole)]
                   for row in range(m)]
    acc_scalars = [[builder.load(at(c, (row, c0), (col, c1)), typ=F32) for col in range(whole * lanes, n)]
                   for row in range(m)]
    head = fn.append_basic_block("k.head")
    body = fn.append_basic_block("k.body")
    done = fn.append_basic_block("k.done")
    start = builder.block
    builder.branch(head)
    builder.position_at_end(head)
    kk = builder.phi(I64, "k")
    kk.add_incoming(ir.Constant(I64, 0), start)
    vector_phis = [[builder.phi(vec) for _ in row] for row in acc_vectors]
    scalar_phis = [[builder.phi(F32) for _ in row] for row in acc_scalars]
    for phis, values in ((vector_phis, acc_vectors), (scalar_phis, acc_scalars)):
        for prow, vrow in zip(phis, values, strict=True):
            for phi, value in zip(prow, vrow, strict=True):
                phi.add_incoming(value, start)
    builder.cbranch(builder.icmp_signed("<", kk, ir.Constant(I64, k)), body, done)
    builder.position_at_end(body)
    b_vectors = [builder.load(at(b, (kk, b0), (v * lanes, b1)), typ=vec, align=4) for v in range(whole)]
    b_scalars = [builder.load(at(b, (kk, b0), (col, b1)), typ=F32) for col in range(whole * lanes, n)]
    new_vectors, new_scalars = [], []
    for row in range(m):
        a_value = builder.load(at(a, (row, a0), (kk, a1)), typ=F32)
        if whole:
            splat = builder.insert_element(ir.Constant(vec, ir.Undefined), a_value, ir.Constant(ir.IntType(32), 0))
            splat = builder.shuffle_vector(splat, ir.Constant(vec, ir.Undefined),
                                           ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))
        new_vectors.append([builder.call(fma_vec, [splat, bv, phi]) for bv, phi in zip(b_vectors, vector_phis[row])])
        new_scalars.append([builder.call(fma, [a_value, bs, phi]) for bs, phi in zip(b_scalars, scalar_phis[row])])
    kk.add_incoming(builder.add(kk, ir.Constant(I64, 1)), body)
    for phis, values in ((vector_phis, new_vectors), (scalar_phis, new_scalars)):
        for prow, vrow in zip(phis, values, strict=True):
            for phi, value in zip(prow, vrow, strict=True):
                phi.add_incoming(value, body)
    builder.branch(head)
    builder.position_at_end(done)
    for row in range(m):
        for v, phi in enumerate(vector_phis[row]):
            builder.store(phi, at(c, (row, c0), (v * lanes, c1)), align=4)
        for col, phi in zip(range(whole * lanes, n), scalar_phis[row], strict=True):
            builder.store(phi, at(c, (row, c0), (col, c1)))
    builder.ret_void()
    return fn


__all__ = ["Intrinsic", "intrinsic_function", "linked_ir"]
