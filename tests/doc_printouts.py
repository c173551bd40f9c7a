"""The loop-nest printouts of docs/schedules.md: each ```python block that sets `shown` is
followed by a ```text block that must equal it.

    .venv/bin/python -m tests.doc_printouts --write   # regenerate the text blocks
"""

from __future__ import annotations

import pathlib
import re
import sys

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "schedules.md"
PAIR = re.compile(r"(```python\n(.*?)```\s*```text\n)(.*?)(```)", flags=re.S)


def printouts(text: str) -> list[tuple[str, str]]:
    """(shown, as written) for every python block that sets `shown`, run in page order."""
    namespace: dict = {"__name__": "__docs__"}
    exec("import ptowsp as pw", namespace)
    out = []
    for block in re.finditer(r"```python\n(.*?)```(\s*```text\n(.*?)```)?", text, flags=re.S):
        namespace.pop("shown", None)
        exec(compile(block.group(1), str(PAGE), "exec"), namespace)
        if "shown" in namespace and block.group(2):
            out.append((namespace["shown"].rstrip("\n"), block.group(3).rstrip("\n")))
    return out


def regenerate(text: str) -> str:
    shown = iter(s for s, _ in printouts(text))

    def fill(m: re.Match) -> str:
        return m.group(1) + next(shown) + "\n" + m.group(4) if "shown =" in m.group(2) else m.group(0)

    return PAIR.sub(fill, text)


if __name__ == "__main__" and "--write" in sys.argv:
    PAGE.write_text(regenerate(PAGE.read_text()))
