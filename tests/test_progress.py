"""The progress line: drawn on a terminal only, after a second, and cleared when the work is done."""

from __future__ import annotations

import io
import time

from ptowsp.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_slow_build_on_a_terminal_shows_its_phase_then_clears_the_line():
    out = Terminal()
    with Progress("building m for cpu", stream=out, after=0.05, every=0.01) as p:
        p.phase("compiling")
        deadline = time.monotonic() + 5
        while "compiling" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    text = out.getvalue()
    assert "building m for cpu: compiling (" in text and text.endswith("\r\x1b[K")


def test_quick_work_and_pipes_get_nothing():
    quick, pipe = Terminal(), io.StringIO()
    with Progress("x", stream=quick, after=5.0):
        pass
    with Progress("x", stream=pipe, after=0.0, every=0.01):
        time.sleep(0.05)
    assert quick.getvalue() == "" and pipe.getvalue() == ""
