"""Kernels that are the same code: compiled once.

A model repeats its blocks (ResNet's stages, a transformer's layers), and their tasks lower to the
same LLVM IR but for names: the kernel's symbol, and the local names of its parameters, values,
buffers and blocks, which carry tensor and task names (`%"w.addr"`, `%"blk3_mean_acc"`).  A build
compiles the first kernel of each such group and points every later task at its symbol; each task
keeps its own arguments, so the one kernel reads each task's tensors (the pointers are parameters).

Two kernels are twins when their IR is the same text once the kernel's symbol is a placeholder and
every local name (LLVM's `%`-names and block labels, which never change what the code does) is
numbered in order of first appearance.  Global names (`@llvm.fma`, intrinsics, constants) are
compared as written, so kernels that call different functions are never twins.
"""

from __future__ import annotations

import re

_NAME = r'"[^"]*"|[-A-Za-z$._0-9]+'
_LOCAL = re.compile(rf"%({_NAME})|^({_NAME}):", re.MULTILINE)  # a use or definition, or a block's label


def shape_of(ir_text: str, symbol: str) -> str:
    """The kernel's IR with its symbol as `@k` and its local names numbered by first appearance."""
    text = ir_text.replace(f'@"{symbol}', '@"k').replace(f"@{symbol}", "@k")
    numbers: dict[str, int] = {}

    def local(m: re.Match) -> str:
        name = (m.group(1) or m.group(2)).strip('"')
        n = numbers.setdefault(name, len(numbers))
        return f"%{n}" if m.group(1) is not None else f"{n}:"
    return _LOCAL.sub(local, text)
