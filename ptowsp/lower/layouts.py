"""Tensors stored in another layout (transform_layout): every global read and write at its stored position.

Lowering works on the tensors' own indices; this pass, once the kernel's statements are made
(after read caches and computed-at producers are placed: their local buffers keep the logical
layout), rewrites each read and write of a global tensor that has a layout through its map,
`W[o, c, r, s]` -> `W[o // 8, c, r, s, o % 8]`, on a buffer of the stored shape.  The simplifier
then folds `(8 * o.outer + o.inner) // 8` to `o.outer` where a split lines up with the map.
"""

from __future__ import annotations

from collections.abc import Mapping

from ptowsp.lower.ir import GLOBAL, Buffer, Stmt, Store, map_exprs
from ptowsp.schedules.layouts import Layout
from ptowsp.te import Expr, Op, rewrite, rules


def stored_buffer(buffer: Buffer, layouts: Mapping[str, Layout]) -> Buffer:
    """The buffer a global tensor is stored in: its layout's shape when it has one."""
    layout = layouts.get(buffer.name) if buffer.scope == GLOBAL else None
    return buffer if layout is None else Buffer(buffer.name, layout.shape, buffer.dtype)


def in_stored_layouts(stmt: Stmt, layouts: Mapping[str, Layout]) -> Stmt:
    """`stmt` with every global read and write of a tensor in `layouts` at its stored position."""
    if not layouts:
        return stmt

    def read(n: Expr) -> Expr | None:  # its indices already read at their stored positions
        buffer = stored_buffer(n.arg, layouts)
        return None if buffer is n.arg else Expr(Op.LOAD, n.dtype, layouts[buffer.name].read(n.src), buffer)

    reads = rules(read, Op.LOAD)

    def writes(s: Stmt) -> Stmt:
        if isinstance(s, Store):
            buffer = stored_buffer(s.buffer, layouts)
            return s if buffer is s.buffer else Store(buffer, layouts[buffer.name].read(s.indices), s.value)
        children = [writes(c) for c in s.children()]
        return s if all(a is b for a, b in zip(children, s.children(), strict=True)) else s.with_children(children)

    return writes(map_exprs(stmt, lambda e: rewrite(e, reads, fixpoint=False)))
