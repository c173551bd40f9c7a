"""`python -m tests.isa_levels`: the x86-64 level `make test` runs its second pass for, the one the
host is not (x86-64-v3 on an AVX-512 host, x86-64-v4 on an AVX2 one), so that a developer machine
of either kind catches what breaks on the other.  Prints nothing where neither level applies (a
host without AVX2, or not x86-64): the second pass is then left out."""

from __future__ import annotations

import llvmlite.binding as llvm

from ptowsp.backends.cpu.isa import target_cpu


def other_level(host_width: int | None = None) -> str | None:
    """The level for the second pass; `host_width` stands in for the host's vector bytes (tests)."""
    if not llvm.get_process_triple().startswith("x86_64"):
        return None
    width = target_cpu("host").vector_bytes if host_width is None else host_width
    if width == 64:
        return "x86-64-v3"
    return "x86-64-v4" if target_cpu("x86-64-v3").unrunnable_reason() is None else None


if __name__ == "__main__":
    print(other_level() or "")
