"""Software prefetch for long streams of vector loads and stores.

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
"""

from __future__ import annotations

import math

from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare

DISTANCE_BYTES = 4096  # measured on the exp chain: 2 KB clearly short, 4-16 KB equal
MIN_STREAM_BYTES = 1 << 20  # shorter walks may be data re-read from the L2, where a prefetch only costs
MAX_STEP_BYTES = 512  # each iteration moves on by at most this much: a dense stream, not a strided walk

I32 = ir.IntType(32)


def prefetch_ahead(step_bytes: int | None, extent: int) -> int | None:
    """Bytes ahead to prefetch for an access moving `step_bytes` per iteration of an `extent`-long loop
    (None: no prefetch).  A whole number of steps, so the line is one this access will touch."""
    if step_bytes is None or not 0 < step_bytes <= MAX_STEP_BYTES or step_bytes * extent < MIN_STREAM_BYTES:
        return None
    return step_bytes * math.ceil(DISTANCE_BYTES / step_bytes)


def prefetch(builder: ir.IRBuilder, module: ir.Module, pointer: ir.Value, ahead: int, write: bool) -> None:
    """llvm.prefetch of `pointer + ahead` bytes, into all cache levels (for a store: in exclusive state)."""
    target = builder.gep(pointer, [ir.Constant(ir.IntType(64), ahead)], source_etype=ir.IntType(8))
    fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType(), I32, I32, I32])
    fn = declare(module, "llvm.prefetch", [ir.PointerType()], fn_type)
    # rw, locality 3 (keep in every level), data cache
    builder.call(fn, [target, ir.Constant(I32, int(write)), ir.Constant(I32, 3), ir.Constant(I32, 1)])
