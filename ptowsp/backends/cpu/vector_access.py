"""Vector loads and stores of the cpu codegen: contiguous (with a software prefetch or a non-temporal
store where streams.py says so), masked, clamped at a boundary's edge, or element by element."""

from __future__ import annotations

from llvmlite import ir

from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.backends.cpu.streams import lane_stride, prefetch, prefetch_ahead, vector_aligned
from ptowsp.backends.cpu.types import I1, I32, I64, ITEMSIZE, MEMORY
from ptowsp.lower.ir import Buffer, Store
from ptowsp.te import Expr
from ptowsp.te.indices import unclamped


class VectorAccess:
    """Mixin for the kernel emitter (codegen.py): its IRBuilder `b`, `module`, `lanes` and `lane_var`,
    buffer `pointers`, `address`/`flat_index`, `scalar_mode`, `value`, `splat`, the memory conversions,
    the `store_mask` of enclosing guards, the `serial` loops, the `streamed` outputs and the `fence` flag."""

    def vector_store(self, s: Store) -> None:
        value = self.to_memory(self.value(s.value, self.store_mask), s.buffer.dtype)
        mask = self.store_mask
        if lane_stride(s.buffer, s.indices, self.lane_var, self.lanes) == 1:
            with self.scalar_mode():
                pointer = self.vector_pointer(self.address(s.buffer, s.indices, None), value.type)
            width = self.lanes * ITEMSIZE[s.buffer.dtype]
            if mask is None and s.buffer.name in self.streamed and width in (16, 32, 64) and vector_aligned(
                    s.buffer, s.indices, self.lane_var, self.lanes):
                stored = self.b.store(value, pointer, align=width)
                stored.set_metadata("nontemporal", self.module.add_metadata([ir.Constant(I32, 1)]))
                self.fence = True
                return
            self.prefetch_stream(s.buffer, s.indices, pointer, write=True)
            if mask is None:
                self.b.store(value, pointer, align=ITEMSIZE[s.buffer.dtype])
            else:
                align = ir.Constant(I32, ITEMSIZE[s.buffer.dtype])
                self.masked("llvm.masked.store", value.type, [value, pointer, align, mask])
            return
        offsets = self.flat_index(s.buffer, s.indices, None)
        for lane in range(self.lanes):  # scattered lanes store one by one, in lane order
            at = ir.Constant(I32, lane)
            pointer = self.b.gep(self.pointers[s.buffer.name], [self.b.extract_element(offsets, at)],
                                 source_etype=MEMORY[s.buffer.dtype])
            element = self.b.extract_element(value, at)
            if mask is None:
                self.b.store(element, pointer)
            else:
                with self.b.if_then(self.b.extract_element(mask, at)):
                    self.b.store(element, pointer)

    def vector_load(self, e: Expr, mask: ir.Value | None) -> ir.Value:
        buf, memory = e.arg, ir.VectorType(MEMORY[e.dtype], self.lanes)
        stride = lane_stride(buf, e.src, self.lane_var, self.lanes)
        if stride == 0:  # the same element in every lane: one load, splat
            live = None if mask is None else self.reduce_or(mask)
            with self.scalar_mode():
                scalar = self.value(e, live)
            return self.splat(scalar)
        if stride == 1:
            with self.scalar_mode():
                pointer = self.vector_pointer(self.address(buf, e.src, None), memory)
            self.prefetch_stream(buf, e.src, pointer, write=False)
            if mask is None:
                raw = self.b.load(pointer, typ=memory, align=ITEMSIZE[e.dtype])
            else:
                raw = self.masked("llvm.masked.load", memory,
                                  [pointer, ir.Constant(I32, ITEMSIZE[e.dtype]), mask, ir.Constant(memory, None)])
        elif (core := unclamped(e.src)) is not None and lane_stride(buf, core, self.lane_var, self.lanes) == 1:
            raw = self.clamped_load(e, core, mask, memory)
        else:
            raw = self.gather(e, mask, memory)
        return self.from_memory(raw, e.dtype)

    def gather(self, e: Expr, mask: ir.Value | None, memory: ir.Type) -> ir.Value:
        """Each lane's element from its own address, by one `llvm.masked.gather` (AVX-512's and AVX2's
        gather instructions; LLVM splits it into scalar loads elsewhere).  Lanes off `mask` are not
        read and give 0.  Against a scalar load and an insert per lane: a convolution's unblocking copy
        1.15x faster, BERT's key transpose 1.67x (docs/cpu.md)."""
        lanes = ir.VectorType(I64, self.lanes)
        base = self.splat(self.b.ptrtoint(self.pointers[e.arg.name], I64))
        size = ir.Constant(lanes, [ir.Constant(I64, ITEMSIZE[e.dtype])] * self.lanes)
        addresses = self.b.add(base, self.b.mul(self.flat_index(e.arg, e.src, None), size))
        pointers = self.b.inttoptr(addresses, ir.VectorType(ir.PointerType(), self.lanes))
        mask_type = ir.VectorType(I1, self.lanes)
        every = ir.Constant(mask_type, [ir.Constant(I1, 1)] * self.lanes)
        fn = declare(self.module, "llvm.masked.gather", [memory, pointers.type],
                     ir.FunctionType(memory, [pointers.type, I32, mask_type, memory]))
        return self.b.call(fn, [pointers, ir.Constant(I32, ITEMSIZE[e.dtype]), every if mask is None else mask,
                                ir.Constant(memory, None)])

    def clamped_load(self, e: Expr, core: tuple[Expr, ...], mask: ir.Value | None, memory: ir.Type) -> ir.Value:
        """A load whose indices clamp a contiguous run (`core`: the indices without their clamps), as a
        boundary condition's edge reads: one masked vector load of the lanes the clamps leave in place,
        and a gather only where a live lane was moved (none where the load's `where` masks them off)."""
        moved = None
        for index, inner in zip(e.src, core, strict=True):
            if index is not inner:
                differs = self.b.icmp_signed("!=", self.value(index, None), self.value(inner, None))
                moved = differs if moved is None else self.b.or_(moved, differs)
        kept = self.b.not_(moved) if mask is None else self.b.and_(mask, self.b.not_(moved))
        live = moved if mask is None else self.b.and_(mask, moved)
        with self.scalar_mode():
            pointer = self.vector_pointer(self.address(e.arg, core, None), memory)
        fast = self.masked("llvm.masked.load", memory,
                           [pointer, ir.Constant(I32, ITEMSIZE[e.dtype]), kept, ir.Constant(memory, None)])
        before = self.b.block
        with self.b.if_then(self.reduce_or(live), likely=False):
            blended = self.b.select(live, self.gather(e, live, memory), fast)
            moving = self.b.block
        merged = self.b.phi(memory)
        merged.add_incoming(fast, before)
        merged.add_incoming(blended, moving)
        return merged

    def prefetch_stream(self, buf: Buffer, indices: tuple[Expr, ...], pointer: ir.Value, write: bool) -> None:
        """A prefetch ahead of a vector access that streams with the innermost serial loop (see streams)."""
        if self.serial and pointer.type.is_opaque:
            loop = self.serial[-1]
            step = lane_stride(buf, indices, loop.var)
            trips = loop.extent if isinstance(loop.extent, int) else 1 << 20  # a symbolic loop: assume long
            ahead = prefetch_ahead(None if step is None else step * ITEMSIZE[buf.dtype], trips)
            if ahead is not None:
                prefetch(self.b, self.module, pointer, ahead, write)

    def vector_pointer(self, pointer: ir.Value, vector: ir.Type) -> ir.Value:
        """Local buffers come from alloca as typed pointers; the vector access needs its own type."""
        return pointer if pointer.type.is_opaque else self.b.bitcast(pointer, ir.PointerType(vector))

    def reduce_or(self, mask: ir.Value) -> ir.Value:
        fn = declare(self.module, "llvm.vector.reduce.or", [mask.type], ir.FunctionType(I1, [mask.type]))
        return self.b.call(fn, [mask])

    def masked(self, name: str, vector: ir.Type, args: list[ir.Value]) -> ir.Value:
        """llvm.masked.load (returns the vector) or llvm.masked.store (vector, ptr, align, mask)."""
        mask_type = ir.VectorType(I1, self.lanes)
        if name.endswith("load"):
            fn_type = ir.FunctionType(vector, [ir.PointerType(), I32, mask_type, vector])
        else:
            fn_type = ir.FunctionType(ir.VoidType(), [vector, ir.PointerType(), I32, mask_type])
        return self.b.call(declare(self.module, name, [vector, ir.PointerType()], fn_type), args)
