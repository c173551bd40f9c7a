"""Print the loop-nest IR as readable pseudo-code, the way Halide's tutorials show loop nests."""

from __future__ import annotations

from ptowsp.lower.ir import Allocate, Barrier, Block, For, IfThen, Let, Prefetch, Stmt, Store, Tensorized

INDENT = "  "


def to_source(s: Stmt, depth: int = 0) -> str:
    pad = INDENT * depth
    if isinstance(s, Block):
        return "\n".join(to_source(c, depth) for c in s.stmts)
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else f"{s.kind} "
        return f"{pad}{kind}for {s.var} in 0..{s.extent}:\n{to_source(s.body, depth + 1)}"
    if isinstance(s, IfThen):
        return f"{pad}if {s.cond}:\n{to_source(s.then, depth + 1)}"
    if isinstance(s, Allocate):
        b = s.buffer
        return f"{pad}{b.scope} {b.name}: {b.dtype}{list(b.shape)}\n{to_source(s.body, depth)}"
    if isinstance(s, Let):
        return f"{pad}let {s.var}: {s.value.dtype} = {s.value}\n{to_source(s.body, depth)}"
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{', '.join(str(i) for i in s.indices)}] = {s.value}"
    if isinstance(s, Tensorized):  # the call, then the loops it stands for as comments
        windows = ", ".join(f"{o.buffer.name}[{', '.join(map(str, o.base))}]" for o in s.operands)
        replaced = "\n".join(f"{pad}#{line[len(pad) + 1:]}" for line in to_source(s.body, depth + 1).splitlines())
        return (f"{pad}{s.intrinsic}<{'x'.join(map(str, s.extents))}>({windows})  # in place of:\n"
                f"{replaced}")
    if isinstance(s, Barrier):
        return f"{pad}barrier({s.scope})"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch {s.buffer.name}[{', '.join(str(i) for i in s.indices)}]"
    raise TypeError(f"unknown statement {s!r}")
