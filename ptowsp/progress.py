"""A one-line progress report on a terminal for work that takes over a second, as pip and cargo show.

`with Progress("building resnet50 for cpu") as p: p.phase("compiling")` redraws one line on stderr
(`building resnet50 for cpu: compiling (3.2 s)`) from a daemon thread, starting only once the work has
taken `after` seconds, and clears it when done; nothing is written when the stream is no terminal
(logs, pipes, tests), so output that a program reads stays the same."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(self, what: str, stream: TextIO | None = None, after: float = 1.0, every: float = 0.25):
        self.what, self.after, self.every = what, after, every
        self.stream = stream if stream is not None else sys.stderr
        self.label = ""
        self.shown = False
        self._start = time.perf_counter()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        isatty = getattr(self.stream, "isatty", None)
        if isatty is not None and isatty():
            self._thread = threading.Thread(target=self._redraw, name="ptowsp-progress", daemon=True)
            self._thread.start()
        return self

    def phase(self, label: str) -> None:
        self.label = label

    def line(self) -> str:
        elapsed = time.perf_counter() - self._start
        return f"{self.what}: {self.label} ({elapsed:.1f} s)" if self.label else f"{self.what} ({elapsed:.1f} s)"

    def _redraw(self) -> None:
        if self._done.wait(self.after):
            return
        while not self._done.is_set():
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()
            self.shown = True
            self._done.wait(self.every)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
