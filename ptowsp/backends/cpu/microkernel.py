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

from ptowsp.backends.cpu.isa import TargetCpu
from ptowsp.errors import BuildError
from ptowsp.lower.ir import Tensorized
from ptowsp.workloads.intrinsic import BUILTIN, LOOPS, Intrinsic, lookup

I64 = ir.IntType(64)
F32 = ir.FloatType()


def intrinsic_function(module: ir.Module, call: Tensorized, target: str, task: str, cpu: TargetCpu) -> ir.Function:
    """The function a call invokes on `target`: declared (its IR is linked in) or generated for
    `cpu`'s vectors."""
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
    if found.name not in _BUILT:
        raise BuildError(f"task {task!r}: intrinsic {found.name!r} has no built-in {target} micro-kernel")
    m, n, k = call.extents
    lanes = cpu.vector_bytes // 4  # float32 lanes of the target's vectors
    unit = [o.dims[-1] == len(o.buffer.shape) - 1 and o.step(len(o.dims) - 1) == 1
            for o in call.operands]  # rows contiguous: out, a, b
    form = _form(found.name, cpu, n, unit)
    name = f"{found.symbol}.{m}x{n}x{k}.{form}{lanes}{'u' if unit[1] else ''}"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    if form == "p":
        return _gemm_i8_pairs(module, fn_type, name, m, n, k, unit_a=unit[1])
    extra = {"unit_a": unit[1]} if found.name == "gemm_i8" else {}
    return _BUILT[found.name](module, fn_type, name, m, n, k, lanes if form in ("v", "d") else 0, **extra)


def _form(name: str, cpu: TargetCpu, n: int, unit: list[bool]) -> str:
    """How a built-in call is generated: "v" gemm's vectors; "d" gemm_i8 by vpdpbusd (VNNI, 16 columns
    at a time); "p" by vpmaddwd pairs (AVX2, 8); "s" scalar (rows of C or B not contiguous, or no
    instruction takes the columns)."""
    if not (unit[0] and unit[2]):
        return "s"
    if name == "gemm":
        return "v"
    if cpu.vnni and n % VNNI_LANES == 0:
        return "d"
    return "p" if cpu.avx2 and n % PAIR_LANES == 0 else "s"


def linked_ir(intrinsics: set[str]) -> list[str]:
    """The LLVM IR texts of the declared (not built-in) cpu implementations among `intrinsics`."""
    found = [lookup(name) for name in sorted(intrinsics)]
    return [i.implementations["cpu"] for i in found if i.implementations.get("cpu", BUILTIN) not in (BUILTIN, LOOPS)]


def _element(builder: ir.IRBuilder, base: ir.Value, etype: ir.Type, *terms) -> ir.Value:
    """The address of base[sum(index * stride for index, stride in terms)] (an index an int or an i64)."""
    offset = ir.Constant(I64, 0)
    for index, stride in terms:
        offset = builder.add(offset, builder.mul(index if isinstance(index, ir.Value) else ir.Constant(I64, index),
                                                 stride))
    return builder.gep(base, [offset], source_etype=etype)


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
        return _element(builder, base, F32, *terms)

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


VNNI_LANES = 16  # int32 accumulators per AVX-512 vector


def _gemm_i8(module: ir.Module, fn_type: ir.FunctionType, name: str, m: int, n: int, k: int,
             lanes: int, unit_a: bool = False) -> ir.Function:
    """C[m, n] (int32) += A[m, k] (int8) . B[k, n] (int8) with `vpdpbusd` when lanes > 0, else scalar.

    vpdpbusd multiplies unsigned bytes by signed bytes, four k at a time per int32 lane: A's bytes
    go in as a + 128 (xor 0x80), B's as they are, interleaved by k (B[k..k+3, j] side by side for
    each column j); the 128 * sum_k B[k, j] this adds is summed alongside (vpdpbusd of ones) and
    taken off at the end.  A last group of fewer than four k reads zeros for the missing rows."""
    fn = ir.Function(module, fn_type, name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    c, a, b, _, _, _, c0, c1, a0, a1, b0, b1 = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    i8, i32 = ir.IntType(8), ir.IntType(32)

    def at(base, etype, *terms):
        return _element(builder, base, etype, *terms)

    if not lanes:  # scalar: the nest the call stands for
        for row in range(m):
            for col in range(n):
                total = builder.load(at(c, i32, (row, c0), (col, c1)), typ=i32)
                for kk in range(k):
                    x = builder.sext(builder.load(at(a, i8, (row, a0), (kk, a1)), typ=i8), i32)
                    y = builder.sext(builder.load(at(b, i8, (kk, b0), (col, b1)), typ=i8), i32)
                    total = builder.add(total, builder.mul(x, y))
                builder.store(total, at(c, i32, (row, c0), (col, c1)))
        builder.ret_void()
        return fn
    acc_t, bytes_t, row_t = ir.VectorType(i32, VNNI_LANES), ir.VectorType(i8, 64), ir.VectorType(i8, VNNI_LANES)
    dot = module.globals.get("llvm.x86.avx512.vpdpbusd.512") or ir.Function(
        module, ir.FunctionType(acc_t, [acc_t, bytes_t, bytes_t]), "llvm.x86.avx512.vpdpbusd.512")
    pair = ir.Constant(ir.VectorType(i32, 32), list(range(32)))
    interleave = ir.Constant(ir.VectorType(i32, 64), [q * 16 + j if q < 2 else 32 + (q - 2) * 16 + j
                                                       for j in range(16) for q in range(4)])
    ones = ir.Constant(bytes_t, [1] * 64)
    vectors = n // VNNI_LANES
    acc = [[builder.load(at(c, i32, (row, c0), (v * VNNI_LANES, c1)), typ=acc_t, align=4) for v in range(vectors)]
           for row in range(m)]
    sums = [ir.Constant(acc_t, [0] * VNNI_LANES) for _ in range(vectors)]

    def quad(kk, rows: int):
        """One group of `rows` (<= 4) k starting at kk: every accumulator and column sum updated."""
        nonlocal sums
        zero_row = ir.Constant(row_t, [0] * VNNI_LANES)
        new_sums = []
        columns = []
        for v in range(vectors):
            b_rows = [builder.load(at(b, i8, (builder.add(kk, ir.Constant(I64, q)), b0), (v * VNNI_LANES, b1)),
                                   typ=row_t, align=1) if q < rows else zero_row for q in range(4)]
            low = builder.shuffle_vector(b_rows[0], b_rows[1], pair)
            high = builder.shuffle_vector(b_rows[2], b_rows[3], pair)
            columns.append(builder.shuffle_vector(low, high, interleave))
            new_sums.append(builder.call(dot, [sums[v], ones, columns[-1]]))
        sums = new_sums
        for row in range(m):
            if rows == 4 and unit_a:  # A[row, kk..kk+3] + 128 as unsigned bytes: one little-endian word
                word = builder.xor(builder.load(at(a, i8, (row, a0), (kk, a1)), typ=i32, align=1),
                                   ir.Constant(i32, 0x80808080))
            else:
                word = ir.Constant(i32, 0)
            for q in range(rows if not (rows == 4 and unit_a) else 0):  # byte by byte: a strided or short group
                byte = builder.load(at(a, i8, (row, a0), (builder.add(kk, ir.Constant(I64, q)), a1)), typ=i8)
                unsigned = builder.zext(builder.xor(byte, ir.Constant(i8, 0x80)), i32)
                word = builder.or_(word, builder.shl(unsigned, ir.Constant(i32, 8 * q)))
            splat = builder.bitcast(builder.shuffle_vector(
                builder.insert_element(ir.Constant(acc_t, ir.Undefined), word, ir.Constant(i32, 0)),
                ir.Constant(acc_t, ir.Undefined), ir.Constant(ir.VectorType(i32, VNNI_LANES), [0] * VNNI_LANES)),
                bytes_t)
            acc[row] = [builder.call(dot, [acc[row][v], splat, columns[v]]) for v in range(vectors)]

    for kk in range(0, k - k % 4, 4):  # k is the call's block: unrolled, as LLVM would
        quad(ir.Constant(I64, kk), 4)
    if k % 4:
        quad(ir.Constant(I64, k - k % 4), k % 4)
    for row in range(m):
        for v in range(vectors):
            fixed = builder.sub(acc[row][v], builder.shl(sums[v], ir.Constant(acc_t, [7] * VNNI_LANES)))
            builder.store(fixed, at(c, i32, (row, c0), (v * VNNI_LANES, c1)), align=4)
    builder.ret_void()
    return fn


PAIR_LANES = 8  # int32 accumulators per AVX2 vector
CHUNK = 8  # bytes of an A row loaded at once (four pairs)


def _gemm_i8_pairs(module: ir.Module, fn_type: ir.FunctionType, name: str, m: int, n: int, k: int,
                   unit_a: bool) -> ir.Function:
    """C[m, n] (int32) += A[m, k] (int8) . B[k, n] (int8) with AVX2's `vpmaddwd`, where there is no VNNI.

    vpmaddwd multiplies int16 pairs and adds each pair's two products into an int32 lane: exact for
    sign-extended bytes (|product| <= 2^14), where `vpmaddubsw`'s int16 sums of byte products
    saturate (onnxruntime's AVX2 kernels take that, and its outputs move by up to a step of the
    output scale).  Two k at a time: B's rows k and k + 1 interleaved column by column, A's two
    bytes repeated in every lane; an odd last k pairs with zeros."""
    fn = ir.Function(module, fn_type, name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    c, a, b, _, _, _, c0, c1, a0, a1, b0, b1 = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    i8, i16, i32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
    acc_t, pairs_t, row_t = ir.VectorType(i32, PAIR_LANES), ir.VectorType(i16, 2 * PAIR_LANES), ir.VectorType(i8, PAIR_LANES)
    madd = module.globals.get("llvm.x86.avx2.pmadd.wd") or ir.Function(
        module, ir.FunctionType(acc_t, [pairs_t, pairs_t]), "llvm.x86.avx2.pmadd.wd")
    interleave = ir.Constant(ir.VectorType(i32, 2 * PAIR_LANES), [j // 2 + (j % 2) * PAIR_LANES
                                                                    for j in range(2 * PAIR_LANES)])
    chunk_t = ir.VectorType(i16, CHUNK)

    def at(base, etype, *terms):
        return _element(builder, base, etype, *terms)

    def byte(row: int, kk: int) -> ir.Value:
        return builder.sext(builder.load(at(a, i8, (row, a0), (kk, a1)), typ=i8), i16) if kk < k else ir.Constant(i16, 0)

    def pairs(row: int, kk: int) -> ir.Value:
        """A[row, kk..kk+7] sign-extended: one load where A's row is contiguous and holds them, else
        byte by byte (zeros past k)."""
        if unit_a and kk + CHUNK <= k:
            return builder.sext(builder.load(at(a, i8, (row, a0), (kk, a1)), typ=ir.VectorType(i8, CHUNK), align=1),
                                chunk_t)
        words = ir.Constant(chunk_t, [0] * CHUNK)
        for q in range(min(CHUNK, k - kk)):
            words = builder.insert_element(words, byte(row, kk + q), ir.Constant(i32, q))
        return words

    vectors = n // PAIR_LANES
    acc = [[builder.load(at(c, i32, (row, c0), (v * PAIR_LANES, c1)), typ=acc_t, align=4) for v in range(vectors)]
           for row in range(m)]
    zero_row = ir.Constant(row_t, [0] * PAIR_LANES)
    for start in range(0, k, CHUNK):  # k is the call's block: unrolled, as LLVM would
        a_words = [pairs(row, start) for row in range(m)]  # each row's bytes loaded once, not per pair
        for kk in range(start, min(start + CHUNK, k), 2):
            columns = []
            for v in range(vectors):
                rows = [builder.load(at(b, i8, (q, b0), (v * PAIR_LANES, b1)), typ=row_t, align=1) if q < k
                        else zero_row for q in (kk, kk + 1)]
                columns.append(builder.sext(builder.shuffle_vector(rows[0], rows[1], interleave), pairs_t))
            repeat = ir.Constant(ir.VectorType(i32, 2 * PAIR_LANES), [kk - start + j % 2 for j in range(2 * PAIR_LANES)])
            for row in range(m):
                both = builder.shuffle_vector(a_words[row], ir.Constant(chunk_t, ir.Undefined), repeat)
                acc[row] = [builder.add(acc[row][v], builder.call(madd, [both, columns[v]])) for v in range(vectors)]
    for row in range(m):
        for v in range(vectors):
            builder.store(acc[row][v], at(c, i32, (row, c0), (v * PAIR_LANES, c1)), align=4)
    builder.ret_void()
    return fn


_BUILT = {"gemm": _gemm, "gemm_i8": _gemm_i8}

__all__ = ["Intrinsic", "intrinsic_function", "linked_ir"]
