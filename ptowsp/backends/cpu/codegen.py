"""Render a kernel of loop IR as an LLVM function with llvmlite.

Signature: `void name(ptr noalias buf..., i64 grid...)`; buffers are C-contiguous
arrays in the kernel's order (inputs, then outputs).  The semantics follow the
reference model exactly where numpy defines them:

- `//` and `%` floor (integers: division by zero gives 0; floats: numpy's divmod);
- integers wrap in their dtype; unsigned dtypes divide, compare and convert unsigned;
- maximum/minimum propagate NaN and pick between equal zeros as numpy does;
- float -> int casts saturate (NaN gives 0) instead of being undefined (types.py);
- a bfloat16 operation computes in float32 and rounds once (types.py);
- a float multiply feeding an add may be fused into one FMA (LLVM `contract`):
  one rounding instead of two, never a reordering of a reduction;
- `where` reads only the chosen side: a load off the chosen side reads element 0.

Loops marked `unrolled` are unrolled here; a `vectorized` loop becomes one
vector of its extent's lanes, its loads and stores emitted by vector_access.py.
"""

from __future__ import annotations

import contextlib
import functools
import math

from llvmlite import ir

from ptowsp.backends.cpu.arith import DivMod
from ptowsp.backends.cpu.intrinsics import declare
from ptowsp.backends.cpu.isa import TargetCpu, target_cpu
from ptowsp.backends.cpu.microkernel import intrinsic_function
from ptowsp.backends.cpu.streams import L2, prefetch, store_fence, streamed_outputs
from ptowsp.backends.cpu.types import (
    I32, I64, ITEMSIZE, MEMORY, REGISTER, Conversions, is_float, is_unsigned, signed_constant,
)
from ptowsp.backends.cpu.vecmath import VectorMath
from ptowsp.backends.cpu.vector_access import VectorAccess
from ptowsp.lower import Kernel
from ptowsp.lower.ir import Allocate, Barrier, Block, Buffer, For, IfThen, Let, Prefetch, Stmt, Store, Tensorized
from ptowsp.te import Expr, Op, sizes, walk
from ptowsp.te.indices import collapsed
from ptowsp.workloads.intrinsic import LOOPS, lookup

STACK_LIMIT = 64 * 1024  # larger local buffers are taken from the heap
_FLOAT_INTRINSICS = {Op.EXP: "llvm.exp", Op.LOG: "llvm.log", Op.SQRT: "llvm.sqrt", Op.TANH: "llvm.tanh",
                     Op.FLOOR: "llvm.floor", Op.CEIL: "llvm.ceil", Op.ROUND: "llvm.roundeven", Op.ABS: "llvm.fabs"}
_VECTOR_MATH = {Op.EXP: "exp", Op.LOG: "log", Op.TANH: "tanh", Op.SIGMOID: "sigmoid", Op.ERF: "erf"}
_FCMP = {Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.EQ: "=="}
_ICMP = {Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.EQ: "==", Op.NE: "!="}
# ops whose bfloat16 result is a bfloat16 value already (a choice, a sign, a whole number): no rounding
_EXACT_IN_BFLOAT16 = frozenset({Op.CONST, Op.VAR, Op.RVAR, Op.SIZE, Op.LOAD, Op.WHERE, Op.CAST, Op.MAX, Op.MIN,
                                Op.NEG, Op.ABS, Op.FLOOR, Op.CEIL, Op.ROUND})


def _straight_line(s: Stmt) -> bool:
    """Only guarded stores: a body that vectorizes lane by lane (no inner loops or locals)."""
    if isinstance(s, Block):
        return all(_straight_line(c) for c in s.stmts)
    if isinstance(s, IfThen):
        return _straight_line(s.then)
    if isinstance(s, Let):
        return _straight_line(s.body)
    return isinstance(s, Store)


_LEAVES = frozenset({Op.CONST, Op.VAR, Op.RVAR, Op.SIZE, Op.LOAD})


def _number(value: ir.Value) -> float | None:
    """The float a constant (or a splat of one) holds, unless it is NaN; None for anything else."""
    if not isinstance(value, ir.Constant):
        return None
    held = value.constant
    if isinstance(held, list):
        if not held or any(not isinstance(c, ir.Constant) or c.constant != held[0].constant for c in held):
            return None
        held = held[0].constant
    return held if isinstance(held, (int, float)) and not math.isnan(held) else None


class KernelEmitter(Conversions, DivMod, VectorAccess):
    """Emits one kernel into a module; `emit()` returns the function."""

    target = "cpu"  # whose implementation of an intrinsic a call uses

    def __init__(self, module: ir.Module, kernel: Kernel, symbol: str, cpu: TargetCpu | None = None):
        self.module, self.kernel = module, kernel
        self.cpu = target_cpu() if cpu is None else cpu  # the CPU whose vectors the built-in micro-kernels use
        buffers = list(kernel.inputs) + list(kernel.outputs)
        scalars = len(kernel.grid) + len(kernel.sizes)
        fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType()] * len(buffers) + [I64] * scalars)
        self.fn = ir.Function(module, fn_type, symbol)
        self.pointers: dict[str, ir.Value] = {}
        self.buffers: dict[str, Buffer] = {}
        for arg, b in zip(self.fn.args, buffers, strict=False):
            arg.add_attribute("noalias")
            arg.name = b.name
            self.pointers[b.name], self.buffers[b.name] = arg, b
        self.env: dict[str, ir.Value] = {}
        for arg, (name, _) in zip(self.fn.args[len(buffers):], kernel.grid, strict=False):
            arg.name = name
            self.env[name] = arg
        self.sizes: dict[str, ir.Value] = {}  # symbolic sizes, the last arguments
        for arg, name in zip(self.fn.args[len(buffers) + len(kernel.grid):], kernel.sizes, strict=True):
            arg.name = f"size.{name}"
            self.sizes[name] = arg
        self.lanes = 0  # > 0 inside a vectorized loop: every value is a vector of this many lanes
        self.lane_var: str | None = None
        self.store_mask: ir.Value | None = None  # lanes whose stores the enclosing guards allow
        self.serial: list[For] = []  # the serial loops around the statement being emitted, outermost first
        self.entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.fn.append_basic_block("body"))
        self.heap: list[ir.Value] = []
        self.streamed = streamed_outputs(kernel)  # outputs written with non-temporal stores (streams.py)
        self.fence = False  # a non-temporal store was emitted: the kernel ends with a fence

    def emit(self) -> ir.Function:
        """The kernel's function: its body, run only for grid coordinates inside the grid it was compiled
        for (a kernel-cache manifest whose grid was altered calls it with others: they do nothing)."""
        inside = None
        for name, extent in self.kernel.grid:
            coordinate = Expr(Op.VAR, "int64", (), (name, extent))
            check = (coordinate >= 0) & (coordinate < extent)
            inside = check if inside is None else inside & check
        if inside is None:
            self.stmt(self.kernel.body)
        else:
            with self.b.if_then(self.value(inside, None), likely=True):
                self.stmt(self.kernel.body)
        if self.fence:
            store_fence(self.b, self.module)  # non-temporal stores are weakly ordered: done before the task is
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])
        return self.fn

    # -- statements -----------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Let):  # a value computed once (a vector in vector mode), read by name in the body
            self.env[s.var] = self.value(s.value, self.store_mask)
            self.stmt(s.body)
            del self.env[s.var]
        elif self.lanes and isinstance(s, (IfThen, Store)):
            self.vector_stmt(s)
        elif isinstance(s, Block):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThen):
            with self.b.if_then(self.value(s.cond, None)):
                self.stmt(s.then)
        elif isinstance(s, Store):
            address = self.address(s.buffer, s.indices, None)
            self.b.store(self.to_memory(self.value(s.value, None), s.buffer.dtype), address)
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, Tensorized):
            self.call_intrinsic(s)
        elif isinstance(s, Prefetch):
            prefetch(self.b, self.module, self.address(s.buffer, s.indices, None), 0, write=False, level=L2)
        elif not isinstance(s, Barrier):  # one thread: a barrier is a no-op
            raise TypeError(f"cannot emit {s!r}")

    def loop(self, s: For) -> None:
        if s.kind == "vectorized" and not self.lanes and _straight_line(s.body):
            self.vector_loop(s)
            return
        if s.kind == "unrolled":
            for v in range(s.extent):
                self.env[s.var] = ir.Constant(I64, v)
                self.stmt(s.body)
            del self.env[s.var]
            return
        if not isinstance(s.extent, int) and s.kind in ("unrolled", "vectorized"):
            raise TypeError(f"loop {s.var} is {s.kind} over the symbolic extent {s.extent}")
        counter = ir.IRBuilder(self.entry).alloca(I64, name=f"{s.var}.ptr")
        self.b.store(ir.Constant(I64, 0), counter)
        header = self.fn.append_basic_block(f"{s.var}.head")
        body = self.fn.append_basic_block(f"{s.var}.body")
        done = self.fn.append_basic_block(f"{s.var}.done")
        self.b.branch(header)
        self.b.position_at_end(header)
        index = self.b.load(counter, typ=I64)
        self.b.cbranch(self.b.icmp_signed("<", index, self.extent(s.extent)), body, done)
        self.b.position_at_end(body)
        self.env[s.var] = index
        self.serial.append(s)
        self.stmt(s.body)
        self.serial.pop()
        self.b.store(self.b.add(index, ir.Constant(I64, 1)), counter)
        self.b.branch(header)
        self.b.position_at_end(done)
        del self.env[s.var]

    def call_intrinsic(self, s: Tensorized) -> None:
        """A call of the intrinsic's implementation for this target (microkernel.py): each operand
        window's first element, the pattern's extents, then every operand dimension's stride; or, where
        the target carries the pattern out as plain loops (LOOPS), the loops the call stands for."""
        if lookup(s.intrinsic).implementations.get(self.target) == LOOPS:
            self.stmt(s.body)
            return
        fn = intrinsic_function(self.module, s, self.target, self.kernel.name, self.cpu)
        strides = []
        for o in s.operands:
            for p, d in enumerate(o.dims):
                strides.append(self.extent(functools.reduce(sizes.mul, o.buffer.shape[d + 1:], o.step(p))))
        pointers = [self.address(o.buffer, o.base, None) for o in s.operands]
        self.b.call(fn, [*pointers, *(ir.Constant(I64, e) for e in s.extents), *strides])

    def extent(self, extent: int | Expr) -> ir.Value:
        """A loop bound or stride: a constant, or computed from the size arguments (scalar code)."""
        if isinstance(extent, int):
            return ir.Constant(I64, extent)
        saved, self.lanes = self.lanes, 0
        try:
            return self.value(extent, None)
        finally:
            self.lanes = saved

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        count = math.prod(buf.shape)
        if count * ITEMSIZE[buf.dtype] <= STACK_LIMIT:
            entry = ir.IRBuilder(self.entry)
            typed = entry.alloca(MEMORY[buf.dtype], size=ir.Constant(I64, count), name=buf.name)
            self.pointers[buf.name] = entry.bitcast(typed, ir.PointerType())
            self.buffers[buf.name] = buf
            self.stmt(s.body)
            return
        malloc = self.libc("malloc", ir.PointerType(), [I64])
        pointer = self.b.call(malloc, [ir.Constant(I64, count * ITEMSIZE[buf.dtype])], name=buf.name)
        self.pointers[buf.name], self.buffers[buf.name] = pointer, buf
        self.stmt(s.body)
        self.b.call(self.libc("free", ir.VoidType(), [ir.PointerType()]), [pointer])

    def libc(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        return existing if existing is not None else ir.Function(self.module, ir.FunctionType(ret, args), name)

    # -- memory ---------------------------------------------------------------------
    def flat_index(self, buf: Buffer, indices: tuple[Expr, ...], mask: ir.Value | None) -> ir.Value:
        """Row-major element offset (a vector of offsets in vector mode)."""
        flat = self.k(I64, 0)
        stride: int | Expr = 1
        shape, indices = collapsed(buf.shape, indices)
        for index, size in reversed(list(zip(indices, shape, strict=True))):
            term = self.value(index, mask)
            if isinstance(stride, int):
                flat = self.b.add(flat, self.b.mul(term, self.k(I64, stride)) if stride != 1 else term)
            else:
                scale = self.extent(stride)
                flat = self.b.add(flat, self.b.mul(term, self.splat(scale) if self.lanes else scale))
            stride = sizes.mul(stride, size)
        if mask is not None:  # off the chosen side of a where: read element 0, always in bounds
            flat = self.b.select(mask, flat, self.k(I64, 0))
        return flat

    def address(self, buf: Buffer, indices: tuple[Expr, ...], mask: ir.Value | None) -> ir.Value:
        return self.b.gep(self.pointers[buf.name], [self.flat_index(buf, indices, mask)],
                          source_etype=MEMORY[buf.dtype])

    # -- vector mode ----------------------------------------------------------------
    def ty(self, dtype: str) -> ir.Type:
        t = REGISTER[dtype]
        return ir.VectorType(t, self.lanes) if self.lanes else t

    def k(self, t: ir.Type, v: object) -> ir.Constant:
        """A constant of scalar type t, splat across the lanes in vector mode."""
        c = ir.Constant(t, v)
        return ir.Constant(ir.VectorType(t, self.lanes), [c] * self.lanes) if self.lanes else c

    def splat(self, x: ir.Value) -> ir.Value:
        vector_type = ir.VectorType(x.type, self.lanes)
        one = self.b.insert_element(ir.Constant(vector_type, ir.Undefined), x, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, one, ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

    @contextlib.contextmanager
    def scalar_mode(self, lane: int = 0):
        """Emit scalar code for one lane (the lane variable reads `lane`)."""
        saved = self.lanes, self.env.get(self.lane_var)
        self.lanes = 0
        self.env[self.lane_var] = ir.Constant(I64, lane)
        try:
            yield
        finally:
            self.lanes, self.env[self.lane_var] = saved

    def per_lane(self, fn, x: ir.Value, out: ir.Type) -> ir.Value:
        result = ir.Constant(ir.VectorType(out, self.lanes), ir.Undefined)
        for lane in range(self.lanes):
            element = self.b.extract_element(x, ir.Constant(I32, lane))
            with self.scalar_mode(lane):
                value = fn(element)
            result = self.b.insert_element(result, value, ir.Constant(I32, lane))
        return result

    def vector_loop(self, s: For) -> None:
        """The loop becomes one vector of s.extent lanes: no loop at all."""
        self.lanes, self.lane_var = s.extent, s.var
        self.env[s.var] = ir.Constant(ir.VectorType(I64, s.extent), [ir.Constant(I64, v) for v in range(s.extent)])
        try:
            self.stmt(s.body)
        finally:
            self.lanes, self.lane_var, self.store_mask = 0, None, None
            del self.env[s.var]

    def vector_stmt(self, s: Stmt) -> None:
        if isinstance(s, IfThen):  # guards become lane masks, not branches
            saved = self.store_mask
            cond = self.value(s.cond, saved)
            self.store_mask = cond if saved is None else self.b.and_(saved, cond)
            self.stmt(s.then)
            self.store_mask = saved
            return
        assert isinstance(s, Store)
        self.vector_store(s)

    # -- expressions ----------------------------------------------------------------
    def value(self, e: Expr, mask: ir.Value | None) -> ir.Value:
        """e's value in registers; a bfloat16 result is rounded to bfloat16 here, once per operation."""
        v = self.compute(e, mask)
        return v if e.dtype != "bfloat16" or e.op in _EXACT_IN_BFLOAT16 else self.round_bfloat16(v)

    def compute(self, e: Expr, mask: ir.Value | None) -> ir.Value:
        op, t = e.op, REGISTER[e.dtype]
        if self.lanes and op not in _LEAVES and self.uniform(e):  # a row's bounds check: once, not per lane
            with self.scalar_mode():
                scalar = self.compute(e, None)
            return self.splat(scalar)
        if op is Op.CONST:
            return self.k(t, e.arg if is_float(e.dtype) else signed_constant(int(e.arg), t.width))
        if op in (Op.VAR, Op.RVAR):
            bound = self.env[e.arg[0]]
            return self.splat(bound) if self.lanes and not isinstance(bound.type, ir.VectorType) else bound
        if op is Op.SIZE:
            return self.splat(self.sizes[e.arg]) if self.lanes else self.sizes[e.arg]
        if op is Op.LOAD and self.lanes:
            return self.vector_load(e, mask)
        if op is Op.LOAD:
            return self.from_memory(self.b.load(self.address(e.arg, e.src, mask), typ=MEMORY[e.dtype]), e.dtype)
        if op is Op.WHERE:
            cond = self.value(e.src[0], mask)
            yes = cond if mask is None else self.b.and_(mask, cond)
            no = self.b.not_(cond) if mask is None else self.b.and_(mask, self.b.not_(cond))
            return self.b.select(cond, self.value(e.src[1], yes), self.value(e.src[2], no))
        args = [self.value(s, mask) for s in e.src]
        if op is Op.CAST:
            return self.cast(args[0], e.src[0].dtype, e.dtype)
        if len(args) == 1:
            return self.unary(op, args[0], e.dtype)
        return self.binary(op, args[0], args[1], e.src[0].dtype)

    def uniform(self, e: Expr) -> bool:
        """e reads no memory and no value that differs between the lanes of the vector being emitted."""
        for n in walk(e):
            if n.op is Op.LOAD:
                return False
            if n.op in (Op.VAR, Op.RVAR):
                bound = self.env.get(n.arg[0])
                if n.arg[0] == self.lane_var or bound is None or isinstance(bound.type, ir.VectorType):
                    return False
        return True

    def intrinsic(self, name: str, t: ir.Type, args: list[ir.Value]) -> ir.Value:
        """An overloaded intrinsic on its arguments' type (the signature is never guessed)."""
        t = args[0].type
        fn_type = ir.FunctionType(t, [t] * len(args))
        return self.b.call(declare(self.module, name, [t], fn_type), args)

    def unary(self, op: Op, x: ir.Value, dtype: str) -> ir.Value:
        t = REGISTER[dtype]
        if self.lanes and dtype in ("float32", "bfloat16") and op in _VECTOR_MATH:
            return getattr(VectorMath(self.b, self.module, self.lanes), _VECTOR_MATH[op])(x)
        if is_float(dtype):
            if op in _FLOAT_INTRINSICS:
                return self.intrinsic(_FLOAT_INTRINSICS[op], t, [x])
            one = self.k(t, 1.0)
            if op is Op.NEG:
                return self.b.fneg(x)
            if op is Op.RSQRT:
                return self.b.fdiv(one, self.intrinsic("llvm.sqrt", t, [x]))
            if op is Op.SIGMOID:
                return self.b.fdiv(one, self.b.fadd(one, self.intrinsic("llvm.exp", t, [self.b.fneg(x)])))
            if op is Op.ERF:
                return self.erf(x, dtype)
        else:
            zero = self.k(t, 0)
            if op is Op.NEG:
                return self.b.sub(zero, x)
            if op is Op.ABS:
                return self.b.select(self.b.icmp_signed("<", x, zero), self.b.sub(zero, x), x)
            if op is Op.NOT:
                return self.b.not_(x)
        raise TypeError(f"no {op.name} for {dtype}")

    def float_max_min(self, op: Op, a: ir.Value, b: ir.Value) -> ir.Value:
        """numpy's rule: `a` if it is NaN or ahead, else `b`.  x86's max/min rule is `first` if ahead,
        else `second`: that is numpy's with `first` a number (`a`), or with `first` a number other than
        zero (`b`: the two differ only on a tie, where `a` and `b` are equal and of one sign), so a
        clamp to constants (ReLU6's min(x, 6)) is one instruction; else x86 max/min + one blend."""
        ahead = ">" if op is Op.MAX else "<"
        if _number(a) is not None:
            return self.b.select(self.b.fcmp_ordered(ahead, a, b), a, b)
        if _number(b):
            return self.b.select(self.b.fcmp_ordered(ahead, b, a), b, a)
        chosen = self.b.select(self.b.fcmp_ordered(ahead, a, b), a, b)
        return self.b.select(self.b.fcmp_unordered("uno", a, a), a, chosen)

    def erf(self, x: ir.Value, dtype: str) -> ir.Value:
        if self.lanes:  # libm per lane (float32 lanes never get here: see unary)
            return self.per_lane(lambda lane: self.erf(lane, dtype), x, REGISTER[dtype])
        wide = "float64" if dtype == "float64" else "float32"
        fn = self.libc("erf" if wide == "float64" else "erff", REGISTER[wide], [REGISTER[wide]])
        if dtype == "float16":
            return self.b.fptrunc(self.b.call(fn, [self.b.fpext(x, REGISTER[wide])]), REGISTER[dtype])
        return self.b.call(fn, [x])

    def binary(self, op: Op, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        t = REGISTER[dtype]
        if op in _ICMP:
            if is_float(dtype):
                return self.b.fcmp_unordered("!=", a, b) if op is Op.NE else self.b.fcmp_ordered(_FCMP[op], a, b)
            return self.int_compare(_ICMP[op], a, b, dtype)
        if is_float(dtype):
            if op in (Op.ADD, Op.SUB, Op.MUL):  # `contract`: a*b+c may become one fused multiply-add
                emit = {Op.ADD: self.b.fadd, Op.SUB: self.b.fsub, Op.MUL: self.b.fmul}[op]
                return emit(a, b, flags=("contract",))
            if op is Op.DIV:
                return self.b.fdiv(a, b)
            if op in (Op.MAX, Op.MIN):
                return self.float_max_min(op, a, b)
            if op is Op.POW:
                return self.intrinsic("llvm.pow", t, [a, b])
            if op in (Op.FLOORDIV, Op.MOD):
                return self.float_divmod(a, b, t)[0 if op is Op.FLOORDIV else 1]
        else:
            simple = {Op.ADD: self.b.add, Op.SUB: self.b.sub, Op.MUL: self.b.mul, Op.AND: self.b.and_,
                      Op.OR: self.b.or_}
            if op in simple:
                return simple[op](a, b)
            if op in (Op.MAX, Op.MIN):
                if dtype == "bool":
                    return self.b.or_(a, b) if op is Op.MAX else self.b.and_(a, b)
                return self.b.select(self.int_compare(">" if op is Op.MAX else "<", a, b, dtype), a, b)
            if op in (Op.FLOORDIV, Op.MOD):
                divmod_ = self.uint_divmod if is_unsigned(dtype) else self.int_divmod
                return divmod_(a, b, t)[0 if op is Op.FLOORDIV else 1]
        raise TypeError(f"no {op.name} for {dtype}")

    def int_compare(self, cmp: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        unsigned = dtype == "bool" or is_unsigned(dtype)
        return (self.b.icmp_unsigned if unsigned else self.b.icmp_signed)(cmp, a, b)
