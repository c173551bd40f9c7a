"""Tensor cores on the cuda target: `gemm_f16` and `gemm_bf16` calls as warp-wide `mma.sync`.

A tensorized call `C[m x n] += A[m x k] @ B[k x n]` (A and B 16-bit floats, C float32) is carried
out by the 32 lanes of a warp together, TVM's warp-level intrinsics: every lane reaches the call
with the same operand windows, holds a fragment of each operand in registers, and one
`mma.sync.aligned.m16n8k16` multiplies a 16 x 16 block of A by a 16 x 8 block of B into a 16 x 8
block of C.  The call covers its m x n x k by (m / 16) x (n / 8) such blocks, their accumulators
kept in registers across the k loop: C is read once and written once per call, or once per loop
around the call where that loop holds them (accumulators.py: k blocks staged in shared memory).
An operand in shared memory whose rows hold 8 elements side by side at 16-byte boundaries is read
by `ldmatrix` (four 8 x 8 blocks per instruction, transposed for B); any other window one 16-bit
element at a time.

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
import math

from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.errors import BuildError
from ptowsp.lower.ir import SHARED, Operand, Stmt, Tensorized
from ptowsp.te import Expr, Op
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
    return tuple(math.prod(shape[d + 1:]) * o.step(p) for p, d in enumerate(o.dims))  # type: ignore[return-value]


def divisible(e: Expr, d: int) -> bool:
    """e is a multiple of d whatever its variables hold (a conservative proof: False when unsure)."""
    if d == 1:
        return True
    if e.op is Op.CONST:
        return int(e.arg) % d == 0
    if e.op in (Op.ADD, Op.SUB):
        return all(divisible(x, d) for x in e.src)
    if e.op is Op.MUL:
        a, b = e.src
        for x, y in ((a, b), (b, a)):
            if x.op is Op.CONST and divisible(y, d // math.gcd(int(x.arg), d)):
                return True
        return divisible(a, d) or divisible(b, d)
    return False


def rows_by_ldmatrix(o: Operand) -> bool:
    """`ldmatrix` can read the window's 8 x 8 blocks: in shared memory, 8 elements (16 bytes) of a
    row side by side, every row starting at a multiple of 8 elements of the (16-byte aligned) buffer."""
    if o.buffer.scope != SHARED:
        return False
    rows, columns = _strides(o)
    shape = o.buffer.shape
    return columns == 1 and rows % 8 == 0 and all(
        divisible(index, 8 // math.gcd(math.prod(shape[d + 1:]), 8)) for d, index in enumerate(o.base))


@functools.cache
def _asm(text: str, outputs: tuple[ir.Type, ...], inputs: tuple[ir.Type, ...], constraints: str,
         reads_memory: bool = False) -> ir.InlineAsm:
    """Inline PTX.  One that reads memory is volatile and clobbers memory: to LLVM an asm statement
    is otherwise a pure function of its operands, and an `ldmatrix` of the same shared address in
    the next k block (refilled in between) was merged with the first (found on an H100)."""
    result = outputs[0] if len(outputs) == 1 else ir.LiteralStructType(list(outputs))
    clobbers = ",~{memory}" if reads_memory else ""
    return ir.InlineAsm(ir.FunctionType(result, list(inputs)), text, constraints + clobbers, side_effect=reads_memory)


def _mma(ptx_type: str) -> ir.InlineAsm:
    return _asm(f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32 "
                "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                (F32,) * 4, (I32,) * 6 + (F32,) * 4, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")


def _ldmatrix(count: int, transposed: bool) -> ir.InlineAsm:
    registers = ",".join(f"${r}" for r in range(count))
    return _asm(f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if transposed else ''}.shared.b16 "
                f"{{{registers}}}, [${count}];", (I32,) * count, (I32,), ",".join(["=r"] * count + ["r"]), True)


class _Lane:
    """One lane's view of a call: where its fragment elements are, how it loads and stores them."""

    def __init__(self, em, call: Tensorized):
        m, n, k = call.extents
        if m % SHAPE[0] or n % SHAPE[1] or k % SHAPE[2]:
            raise BuildError(f"task {em.kernel.name!r}: {call.intrinsic}<{m}x{n}x{k}> on cuda runs mma.sync "
                             f"m16n8k16, so m, n and k must be multiples of 16, 8 and 16; tile the loops "
                             "the call replaces by such sizes")
        self.em, self.b, self.call = em, em.b, call
        self.m_blocks, self.n_blocks = m // SHAPE[0], n // SHAPE[1]
        self.blocks = list(itertools.product(range(self.m_blocks), range(self.n_blocks)))
        self.steps = k // SHAPE[2]
        b = self.b
        lane = em.env["threadIdx.x"]
        self.group, self.quad2 = b.lshr(lane, self.i64(2)), b.shl(b.and_(lane, self.i64(3)), self.i64(1))
        self.row16, self.half = b.and_(lane, self.i64(15)), b.shl(b.lshr(lane, self.i64(4)), self.i64(3))
        out = call.operands[0]
        (c0, c1) = _strides(out)
        self.c_lane = self.pointer(out, F32, self.group, self.quad2)
        self.c_offsets = [(16 * i + r) * c0 + (8 * j + c) * c1 for i, j in self.blocks for r, c in C_ELEMENTS]

    def i64(self, value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def pointer(self, o: Operand, etype: ir.Type, rows: ir.Value, cols: ir.Value) -> ir.Value:
        """The window's base + rows * (row stride) + cols * (column stride)."""
        b, (s0, s1) = self.b, _strides(o)
        offset = b.add(b.mul(rows, self.i64(s0)), b.mul(cols, self.i64(s1)))
        return b.gep(self.em.address(o.buffer, o.base, None), [offset], source_etype=etype)

    def at(self, pointer: ir.Value, etype: ir.Type, offset: int | ir.Value) -> ir.Value:
        return self.b.gep(pointer, [self.i64(offset) if isinstance(offset, int) else offset], source_etype=etype)

    def load_c(self) -> list[ir.Value]:
        return [self.b.load(self.at(self.c_lane, F32, o), typ=F32) for o in self.c_offsets]

    def store_c(self, values: list[ir.Value]) -> None:
        for o, value in zip(self.c_offsets, values, strict=True):
            self.b.store(value, self.at(self.c_lane, F32, o))

    def load_held(self, held: ir.Value) -> list[ir.Value]:
        """The accumulators from the registers a loop holds them in (an alloca LLVM promotes)."""
        b = self.b
        return [b.load(b.gep(held, [self.i64(e)], source_etype=F32), typ=F32) for e in range(len(self.c_offsets))]

    def store_held(self, held: ir.Value, values: list[ir.Value]) -> None:
        for e, value in enumerate(values):
            self.b.store(value, self.b.gep(held, [self.i64(e)], source_etype=F32))

    def warp_sync(self) -> None:
        sync = declare(self.em.module, "llvm.nvvm.bar.warp.sync", [], ir.FunctionType(ir.VoidType(), [I32]))
        self.b.call(sync, [ir.Constant(I32, -1)])

    def fragments(self, step: ir.Value) -> tuple[list[list[ir.Value]], list[list[ir.Value]]]:
        """The A registers of each block row and the B registers of each block column at k step `step`."""
        _, a_win, b_win = self.call.operands
        return self.a_fragments(a_win, step, self.m_blocks), self.b_fragments(b_win, step, self.n_blocks)

    def a_fragments(self, o: Operand, step: ir.Value, m_blocks: int) -> list[list[ir.Value]]:
        b, (s0, s1) = self.b, _strides(o)
        k = b.mul(step, self.i64(16 * s1))
        if rows_by_ldmatrix(o):  # lanes 0-15 name rows 0-15 at column 0, lanes 16-31 at column 8
            rows = self.pointer(o, I16, self.row16, self.half)
            return [self.ldmatrix(self.at(rows, I16, b.add(k, self.i64(16 * i * s0))), 4, False)
                    for i in range(m_blocks)]
        lane = self.pointer(o, I16, self.group, self.quad2)
        return [[self.pair(lane, k, (16 * i + r0) * s0 + c0 * s1, (16 * i + r1) * s0 + c1 * s1)
                 for (r0, c0), (r1, c1) in zip(A_ELEMENTS[::2], A_ELEMENTS[1::2], strict=True)]
                for i in range(m_blocks)]

    def b_fragments(self, o: Operand, step: ir.Value, n_blocks: int) -> list[list[ir.Value]]:
        b, (s0, s1) = self.b, _strides(o)
        k = b.mul(step, self.i64(16 * s0))
        if rows_by_ldmatrix(o):  # B's rows are k: transposed, lanes 0-15 name k 0-15 of a block column,
            rows = self.pointer(o, I16, self.row16, self.half)  # lanes 16-31 those of the next
            registers = []
            for j in range(0, n_blocks, 2):
                count = 4 if j + 1 < n_blocks else 2
                loaded = self.ldmatrix(self.at(rows, I16, b.add(k, self.i64(8 * j * s1))), count, True)
                registers += [loaded[:2], loaded[2:]] if count == 4 else [loaded]
            return registers
        lane = self.pointer(o, I16, self.quad2, self.group)
        return [[self.pair(lane, k, r0 * s0 + (8 * j + c0) * s1, r1 * s0 + (8 * j + c1) * s1)
                 for (r0, c0), (r1, c1) in zip(B_ELEMENTS[::2], B_ELEMENTS[1::2], strict=True)]
                for j in range(n_blocks)]

    def pair(self, lane: ir.Value, k: ir.Value, first: int, second: int) -> ir.Value:
        """Two 16-bit elements in one 32-bit register, the first in the low half."""
        b = self.b
        low, high = (b.zext(b.load(self.at(lane, I16, b.add(k, self.i64(o))), typ=I16), I32) for o in (first, second))
        return b.or_(low, b.shl(high, ir.Constant(I32, 16)))

    def ldmatrix(self, pointer: ir.Value, count: int, transposed: bool) -> list[ir.Value]:
        b = self.b
        shared = b.ptrtoint(b.addrspacecast(pointer, ir.PointerType(addrspace=3)), I32)
        loaded = b.call(_ldmatrix(count, transposed), [shared])
        return [b.extract_value(loaded, r) for r in range(count)]

    def multiply(self, accumulators: list[ir.Value]) -> list[ir.Value]:
        """The k loop: every block's accumulators updated at each step; the last values."""
        b, em = self.b, self.em
        before = b.block
        loop, done = em.fn.append_basic_block("mma.k"), em.fn.append_basic_block("mma.done")
        b.branch(loop)
        b.position_at_end(loop)
        step = b.phi(I64, name="mma.step")
        phis = [b.phi(F32) for _ in accumulators]
        for phi, value in zip(phis, accumulators, strict=True):
            phi.add_incoming(value, before)
        a_regs, b_regs = self.fragments(step)
        mma, new = _mma(_PTX_TYPES[self.call.intrinsic]), []
        for block, (i, j) in enumerate(self.blocks):
            result = b.call(mma, [*a_regs[i], *b_regs[j], *phis[4 * block:4 * block + 4]])
            new += [b.extract_value(result, e) for e in range(4)]
        following = b.add(step, self.i64(1))
        step.add_incoming(self.i64(0), before)
        step.add_incoming(following, loop)
        for phi, value in zip(phis, new, strict=True):
            phi.add_incoming(value, loop)
        b.cbranch(b.icmp_signed("<", following, self.i64(self.steps)), loop, done)
        b.position_at_end(done)
        return new


def emit(em, call: Tensorized) -> None:
    """The call as mma.sync instructions, emitted by the GpuEmitter `em` at its builder.  Where a loop
    around it holds its accumulators (`hold`), they are read from and written to those registers."""
    lane = _Lane(em, call)
    held = em.accumulators.get(id(call))
    if held is None:
        lane.warp_sync()  # the lane that zeroed C wrote before anyone reads it
        lane.store_c(lane.multiply(lane.load_c()))
        lane.warp_sync()  # C is whole before one lane reads it on
        return
    lane.store_held(held, lane.multiply(lane.load_held(held)))


def hold(em, call: Tensorized, body) -> None:
    """Emit `body` (a loop around `call`) with the call's accumulators in registers: loaded from C
    before it, stored to C after it (accumulators.py)."""
    lane = _Lane(em, call)
    held = ir.IRBuilder(em.entry).alloca(F32, size=ir.Constant(I64, len(lane.c_offsets)), name="mma.acc")
    lane.warp_sync()  # the lane that zeroed C wrote before anyone reads it
    lane.store_held(held, lane.load_c())
    em.accumulators[id(call)] = held
    em.stmt(body)
    del em.accumulators[id(call)]
    lane.store_c(lane.load_held(held))
    lane.warp_sync()  # C is whole before one lane reads it on
