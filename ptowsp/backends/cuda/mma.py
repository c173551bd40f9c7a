"""Tensor cores on the cuda target: `gemm_f16` and `gemm_bf16` calls as warp-wide `mma.sync`.

A tensorized call `C[m x n] += A[m x k] @ B[k x n]` (A and B 16-bit floats, C float32) is carried
out by the 32 lanes of a warp together, TVM's warp-level intrinsics: every lane reaches the call
with the same operand windows, holds a fragment of each operand in registers, and one
`mma.sync.aligned.m16n8k16` multiplies a 16 x 16 block of A by a 16 x 8 block of B into a 16 x 8
block of C.  The call covers its m x n x k by (m / 16) x (n / 8) such blocks, their accumulators
kept in registers across the k loop: C is read once and written once per call.

The lanes are `threadIdx.x`: a kernel that calls one launches 32 threads on x, no loop of it may
bind `threadIdx.x` (warps are `threadIdx.y` and `threadIdx.z`), and every other axis the launch
uses is bound around the call (or the call runs on index 0 of it), so one warp does one call
(spmd.py checks this).  The operands are read and written in global or shared memory; a
`bar.warp.sync` before and after orders the lanes' memory accesses with the code around the call,
which one lane runs (the zeroing of C, an epilogue).

Fragments (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"; checked on an
H100): lane = 4 * group + quad; lane holds A[group + 8 h, 2 quad + e + 8 v] (h, e, v in 0..1,
register 2 v + h holding e = 0 in its low half), B[2 quad + e + 8 v, group] (register v), and
C[group + 8 h, 2 quad + e] (value 2 h + e).
"""

from __future__ import annotations

import functools
import itertools

from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.errors import BuildError
from ptowsp.lower.ir import Operand, Stmt, Tensorized
from ptowsp.workloads.intrinsic import BUILTIN, lookup

SHAPE = (16, 8, 16)  # m, n, k of one mma.sync
WARP = 32
_PTX_TYPES = {"gemm_f16": "f16", "gemm_bf16": "bf16"}
I16, I32, I64, F32 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()

# (row, column) of each element a lane holds, as offsets from (group, 2 quad) for A and C and
# from (2 quad, group) for B, in register order (two 16-bit elements per A and B register)
A_ELEMENTS = tuple((8 * h, e + 8 * v) for v in (0, 1) for h in (0, 1) for e in (0, 1))
B_ELEMENTS = tuple((e + 8 * v, 0) for v in (0, 1) for e in (0, 1))
C_ELEMENTS = tuple((8 * h, e) for h in (0, 1) for e in (0, 1))


def is_warp_intrinsic(name: str) -> bool:
    """Calls of intrinsic `name` are carried out by the 32 lanes of a warp together on cuda."""
    return name in _PTX_TYPES and lookup(name).implementations.get("cuda") == BUILTIN


def is_warp_call(s: Stmt) -> bool:
    return isinstance(s, Tensorized) and is_warp_intrinsic(s.intrinsic)


def fragment(lane: int, operand: str) -> list[tuple[int, int]]:
    """(row, column) of every element `lane` holds of one mma's operand "A", "B" or "C", in order."""
    group, quad = divmod(lane, 4)
    if operand == "B":
        return [(2 * quad + r, group + c) for r, c in B_ELEMENTS]
    return [(group + r, 2 * quad + c) for r, c in (A_ELEMENTS if operand == "A" else C_ELEMENTS)]


def _strides(o: Operand) -> tuple[int, int]:
    """Element strides of the window's two pattern dimensions in its buffer."""
    shape = o.buffer.shape
    return tuple(functools.reduce(lambda x, y: x * y, shape[d + 1:], 1) for d in o.dims)  # type: ignore[return-value]


@functools.cache
def _mma_asm(ptx_type: str) -> ir.InlineAsm:
    fn_type = ir.FunctionType(ir.LiteralStructType([F32] * 4), [I32] * 6 + [F32] * 4)
    text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32 "
            "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
    return ir.InlineAsm(fn_type, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=False)


def emit(em, call: Tensorized) -> None:
    """The call as mma.sync instructions, emitted by the GpuEmitter `em` at its builder."""
    m, n, k = call.extents
    if m % SHAPE[0] or n % SHAPE[1] or k % SHAPE[2]:
        raise BuildError(f"task {em.kernel.name!r}: {call.intrinsic}<{m}x{n}x{k}> on cuda runs mma.sync "
                         f"m16n8k16, so m, n and k must be multiples of 16, 8 and 16; tile the loops "
                         "the call replaces by such sizes")
    b = em.b
    out, a_win, b_win = call.operands
    (c0, c1), (a0, a1), (b0, b1) = _strides(out), _strides(a_win), _strides(b_win)
    lane = em.env["threadIdx.x"]
    group, quad2 = b.lshr(lane, ir.Constant(I64, 2)), b.shl(b.and_(lane, ir.Constant(I64, 3)), ir.Constant(I64, 1))

    def lane_pointer(window: Operand, etype: ir.Type, rows: ir.Value, cols: ir.Value, s0: int, s1: int):
        """This lane's first element of the window: its base + rows * s0 + cols * s1."""
        return b.gep(em.address(window.buffer, window.base, None),
                     [b.add(b.mul(rows, ir.Constant(I64, s0)), b.mul(cols, ir.Constant(I64, s1)))],
                     source_etype=etype)

    def element(pointer: ir.Value, etype: ir.Type, offset: int | ir.Value) -> ir.Value:
        index = ir.Constant(I64, offset) if isinstance(offset, int) else offset
        return b.gep(pointer, [index], source_etype=etype)

    c_lane = lane_pointer(out, F32, group, quad2, c0, c1)
    a_lane = lane_pointer(a_win, I16, group, quad2, a0, a1)
    b_lane = lane_pointer(b_win, I16, quad2, group, b0, b1)
    blocks_m, blocks_n = m // SHAPE[0], n // SHAPE[1]
    tiles = list(itertools.product(range(blocks_m), range(blocks_n)))
    warp_sync = declare(em.module, "llvm.nvvm.bar.warp.sync", [], ir.FunctionType(ir.VoidType(), [I32]))
    b.call(warp_sync, [ir.Constant(I32, -1)])  # the lane that zeroed C wrote before anyone reads it
    c_offsets = {(i, j): [(16 * i + r) * c0 + (8 * j + c) * c1 for r, c in C_ELEMENTS] for i, j in tiles}
    acc = {t: [b.load(element(c_lane, F32, o), typ=F32) for o in c_offsets[t]] for t in tiles}

    steps = k // SHAPE[2]
    before = b.block
    loop = em.fn.append_basic_block("mma.k")
    done = em.fn.append_basic_block("mma.done")
    b.branch(loop)
    b.position_at_end(loop)
    step = b.phi(I64, name="mma.step")
    step.add_incoming(ir.Constant(I64, 0), before)
    phis = {t: [b.phi(F32) for _ in range(4)] for t in tiles}
    for t in tiles:
        for phi, value in zip(phis[t], acc[t], strict=True):
            phi.add_incoming(value, before)
    k_a, k_b = b.mul(step, ir.Constant(I64, 16 * a1)), b.mul(step, ir.Constant(I64, 16 * b0))

    def pair(load, first: int, second: int) -> ir.Value:
        """Two 16-bit elements in one 32-bit register, the first in the low half."""
        lo, hi = (b.zext(load(o), I32) for o in (first, second))
        return b.or_(lo, b.shl(hi, ir.Constant(I32, 16)))

    def a_load(o: int) -> ir.Value:
        return b.load(element(a_lane, I16, b.add(k_a, ir.Constant(I64, o))), typ=I16)

    def b_load(o: int) -> ir.Value:
        return b.load(element(b_lane, I16, b.add(k_b, ir.Constant(I64, o))), typ=I16)

    a_offsets = [[(16 * i + r) * a0 + c * a1 for r, c in A_ELEMENTS] for i in range(blocks_m)]
    b_offsets = [[r * b0 + (8 * j + c) * b1 for r, c in B_ELEMENTS] for j in range(blocks_n)]
    a_regs = [[pair(a_load, *o[2 * v:2 * v + 2]) for v in range(4)] for o in a_offsets]
    b_regs = [[pair(b_load, *o[2 * v:2 * v + 2]) for v in range(2)] for o in b_offsets]
    mma = _mma_asm(_PTX_TYPES[call.intrinsic])
    new = {}
    for i, j in tiles:
        result = b.call(mma, [*a_regs[i], *b_regs[j], *phis[(i, j)]])
        new[(i, j)] = [b.extract_value(result, e) for e in range(4)]
    following = b.add(step, ir.Constant(I64, 1))
    step.add_incoming(following, loop)
    for t in tiles:
        for phi, value in zip(phis[t], new[t], strict=True):
            phi.add_incoming(value, loop)
    b.cbranch(b.icmp_signed("<", following, ir.Constant(I64, steps)), loop, done)
    b.position_at_end(done)
    for t in tiles:
        for o, value in zip(c_offsets[t], new[t], strict=True):
            b.store(value, element(c_lane, F32, o))
    b.call(warp_sync, [ir.Constant(I32, -1)])  # C is whole before one lane reads it on
