"""What a trace's reports share: the time unit a person reads, the files they write (a typed
InputError naming the path, never a raw OSError), and how an event's name says its task and stage.  Apart from trace.py so that the Gantt chart,
which draws a Trace, and the timing tables need no import of it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ptowsp.errors import InputError


def time_unit(seconds: float, micro: str = "us") -> tuple[float, str]:
    """The unit a person reads `seconds` in (s, ms, micro, ns: the largest not above it), and its scale."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, micro)):
        if abs(seconds) >= scale:
            return scale, unit
    return 1e-9, "ns"


def output_path(path: object, method: str) -> Path:
    """`path` as a Path; InputError unless it is a str or os.PathLike naming a file."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InputError(f"trace.{method}: expected a file path (str or pathlib.Path), got {path!r}")
    if Path(path).is_dir():
        raise InputError(f"trace.{method}: cannot write {str(path)!r}: it is a folder; name a file in it")
    return Path(path)


@contextlib.contextmanager
def writing(path: Path, method: str) -> Iterator[None]:
    """Turn an OSError of writing `path` into an InputError that names the path and the reason."""
    try:
        yield
    except OSError as e:
        reason = e.strerror or str(e)
        hint = " (its folder does not exist)" if isinstance(e, FileNotFoundError) else ""
        raise InputError(f"trace.{method}: cannot write {str(path)!r}: {reason}{hint}") from e


_STAGED = re.compile(r"^(?P<task>.+?)(?:@\d+)?(?: (?P<stage>load|store))?$")


def task_of(name: str) -> tuple[str, str | None]:
    """An event's task and stage: "y@1 load" -> ("y", "load"), "y" -> ("y", None)."""
    m = _STAGED.match(name)
    return (m["task"], m["stage"]) if m else (name, None)
