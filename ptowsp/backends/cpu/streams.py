"""Long streams of vector loads and stores: software prefetch, and non-temporal stores.

The hardware's stream prefetchers track addresses within one 4 KB page and
stop at its end, so a long unit-stride loop stalls on memory again at every
page boundary; a loop that also faults in fresh output pages loses its
prefetch streams at every fault.  Compilers' answer (icc's -qopt-prefetch, gcc's
-fprefetch-loop-arrays) is a software prefetch some distance ahead: here, for
each contiguous vector access whose address advances steadily with the
innermost serial loop around the vector loop, when that loop walks at least
`MIN_STREAM_BYTES`, a prefetch of the address `DISTANCE_BYTES` ahead.

Short streams (rows re-read from cache, as in softmax or layernorm) and
strided walks (matmul panels) get none: they gain nothing and each prefetch
costs a load slot.  A prefetch never faults, so running past the end of a
buffer is harmless.

A kernel's output of at least `STREAM_OUT_BYTES` that the kernel never reads
back is written with non-temporal stores where a whole vector lands on a
vector-aligned address (every buffer starts on a 64-byte boundary): the line
goes to memory without first being read into the cache (a plain store reads
it: a third more memory traffic for a stream written once), and without
evicting what the cache holds.  Such a store is not prefetched, and the
kernel ends with a fence, so the task that reads the output next sees it.
"""

from __future__ import annotations

import math

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.lower.ir import Buffer, walk_stmts, stmt_exprs
from ptowsp.lower.kernel import Kernel
from ptowsp.lower.tidy import linear_terms
from ptowsp.te import Expr, Op, const, sizes, walk
from ptowsp.te.affine import Affine, affine, atom, integer, loops_named
from ptowsp.te.indices import collapsed

STREAM_OUT_BYTES = 8 << 20  # more than a core's L2 and a good part of the LLC: it leaves the cache anyway
DISTANCE_BYTES = 4096  # measured on the exp chain: 2 KB clearly short, 4-16 KB equal
MIN_STREAM_BYTES = 1 << 20  # shorter walks may be data re-read from the L2, where a prefetch only costs
MAX_STEP_BYTES = 512  # each iteration moves on by at most this much: a dense stream, not a strided walk

I32 = ir.IntType(32)


def _coefficient(e: Expr, var: str, lanes: int | None = None) -> int | None:
    """d e / d var when e is affine in var (other variables held fixed), else None.  With `lanes`
    (var the lane of a vector: 0 to lanes - 1 from an aligned start), `x // m` and `x % m` of an
    x that moves by one per lane from a multiple of `lanes`, m a multiple of `lanes`, stay in one
    period of m across the vector: 0 and 1 (a flattened index unflattened again, as an imported
    model's Reshape reads it)."""
    if var not in e.loops_read:  # most dimensions of an index do not read the lane at all
        return 0
    moves = loops_named(var)

    def lane_period(n: Expr) -> Affine | None:
        parts = [affine(x, moves, lane_period) for x in n.src]
        if None in parts:
            return None
        if all(p.coef(var) == 0 for p in parts):  # what every lane reads alike (`x // 64 % 13` above)
            return Affine(rest=n)
        m = integer(n.src[1]) if n.op in (Op.FLOORDIV, Op.MOD) else None
        if not lanes or m is None or m <= 0 or m % lanes or parts[0].coef(var) != 1 or \
                not _lane_aligned(n.src[0], var, lanes):
            return None
        return Affine(rest=n) if n.op is Op.FLOORDIV else atom(var, n)

    form = affine(e, moves, lane_period)
    return None if form is None else form.coef(var)


def _lane_aligned(x: Expr, var: str, lanes: int) -> bool:
    """x is var plus multiples of `lanes`: lane 0 of the vector sits at a multiple of `lanes`."""
    terms, offset = linear_terms(x)
    lane = [coef for atom, coef in terms.values() if atom.op is Op.VAR and atom.arg[0] == var]
    others = [coef for atom, coef in terms.values() if not (atom.op is Op.VAR and atom.arg[0] == var)]
    return lane == [1] and offset % lanes == 0 and all(c % lanes == 0 for c in others)


def lane_stride(buf: Buffer, indices: tuple[Expr, ...], var: str | None, lanes: int | None = None) -> int | None:
    """Elements between the addresses of neighbouring lanes (None: not a constant stride); `lanes`:
    var is the lane of a vector that many wide (see _coefficient)."""
    total, stride = 0, 1
    shape, indices = collapsed(buf.shape, indices)
    for index, size in reversed(list(zip(indices, shape, strict=True))):
        c = _coefficient(index, var, lanes)
        if c is None:
            return None
        total, stride = sizes.add(total, sizes.mul(c, stride)), sizes.mul(stride, size)
    return total if isinstance(total, int) else None


def prefetch_ahead(step_bytes: int | None, extent: int) -> int | None:
    """Bytes ahead to prefetch for an access moving `step_bytes` per iteration of an `extent`-long loop
    (None: no prefetch).  A whole number of steps, so the line is one this access will touch."""
    if step_bytes is None or not 0 < step_bytes <= MAX_STEP_BYTES or step_bytes * extent < MIN_STREAM_BYTES:
        return None
    return step_bytes * math.ceil(DISTANCE_BYTES / step_bytes)


ALL_LEVELS, L2 = 3, 2  # llvm.prefetch's locality: prefetcht0 (into L1 and below), prefetcht1 (L2 and below)


def prefetch(builder: ir.IRBuilder, module: ir.Module, pointer: ir.Value, ahead: int, write: bool,
             level: int = ALL_LEVELS) -> None:
    """llvm.prefetch of `pointer + ahead` bytes into the cache levels `level` says (for a store: in
    exclusive state)."""
    target = builder.gep(pointer, [ir.Constant(ir.IntType(64), ahead)], source_etype=ir.IntType(8))
    fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType(), I32, I32, I32])
    fn = declare(module, "llvm.prefetch", [ir.PointerType()], fn_type)
    builder.call(fn, [target, ir.Constant(I32, int(write)), ir.Constant(I32, level), ir.Constant(I32, 1)])


def streamed_outputs(kernel: Kernel) -> set[str]:
    """The outputs a kernel may write with non-temporal stores: at least STREAM_OUT_BYTES of a static
    shape, and never read by the kernel itself (an accumulator is read back at every step)."""
    read = {n.arg.name for s in walk_stmts(kernel.body) for e in stmt_exprs(s) for n in walk(e) if n.op is Op.LOAD}
    found = set()
    for out in kernel.outputs:
        if all(isinstance(n, int) for n in out.shape) and out.name not in read:
            if math.prod(out.shape) * np.dtype(out.dtype).itemsize >= STREAM_OUT_BYTES:
                found.add(out.name)
    return found


def vector_aligned(buf: Buffer, indices: tuple[Expr, ...], lane_var: str, lanes: int) -> bool:
    """Whether a unit-stride vector store's first lane is at a multiple of `lanes` elements from the
    buffer's start for every value of the other loops (the lane variable itself counts from 0)."""
    if not all(isinstance(n, int) for n in buf.shape):
        return False
    flat, stride = const(0, "int64"), 1
    shape, indices = collapsed(buf.shape, indices)
    for index, size in reversed(list(zip(indices, shape, strict=True))):
        flat = flat + index * stride
        stride *= size
    return _lane_aligned(flat, lane_var, lanes)


def store_fence(builder: ir.IRBuilder, module: ir.Module) -> None:
    """Order the non-temporal stores before what follows: `sfence` on x86 (LLVM's seq_cst fence is a
    locked instruction there), a seq_cst fence elsewhere."""
    if llvm.get_process_triple().startswith("x86_64"):
        builder.call(declare(module, "llvm.x86.sse.sfence", [], ir.FunctionType(ir.VoidType(), [])), [])
    else:
        builder.fence("seq_cst")
