"""What a user-given name may be: the one rule for workloads, tensors, tasks, sizes and loops.

Names reach generated code (LLVM symbols and IR, printed loop nests, file
names in the kernel cache) and error messages, so they are plain ASCII
identifiers: letters, digits and `_`, not starting with a digit, at most
MAX_LENGTH characters, and not a Python keyword (the loop nests print as
Python-like text).  Names the compiler generates itself always contain a
character outside that set (`.`, as in `i.outer` or a kernel's variant
symbol), so a user's name can never collide with one.
"""

from __future__ import annotations

import hashlib
import keyword
import re

from ptowsp.errors import PtowspError, WorkloadError

MAX_LENGTH = 64
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: object, what: str, error: type[PtowspError] = WorkloadError) -> str:
    """`name` if it is a legal name for `what` ("task", "size", ...); `error` naming it otherwise."""
    if not isinstance(name, str):
        raise error(f"{what} name must be a string, got {type(name).__name__} {name!r:.60}")
    if not _IDENTIFIER.fullmatch(name):
        raise error(f"{what} name {name!r:.80} is not an identifier of ASCII letters, digits and _ "
                            "(not starting with a digit)")
    if len(name) > MAX_LENGTH:
        raise error(f"{what} name {name[:20]!r}... is {len(name)} characters; at most {MAX_LENGTH}")
    if keyword.iskeyword(name):
        raise error(f"{what} name {name!r} is a Python keyword; choose another")
    return name


def fit_name(wanted: str) -> str:
    """`wanted` itself when it is short enough; else its first characters, `_` and 8 hex digits of a
    hash of all of it: a name a pass or an importer derives from a long one (a transformer's parameter
    path plus a suffix) stays legal, the same on every run, and apart from names derived from others."""
    if len(wanted) <= MAX_LENGTH:
        return wanted
    return f"{wanted[:MAX_LENGTH - 9]}_{hashlib.sha256(wanted.encode()).hexdigest()[:8]}"
