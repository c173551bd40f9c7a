"""The tutorial and the README quickstart run as written."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_blocks(path: pathlib.Path) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S))


@pytest.mark.parametrize("page", ["docs/tutorial.md", "README.md", "docs/schedules.md", "docs/runtime.md",
                                  "docs/fusion.md", "docs/aicore.md", "docs/cuda.md", "docs/dynamic.md",
                                  "docs/llm.md"])
def test_page_runs(page, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pages write trace.json, tune.jsonl, ... where they run
    code = python_blocks(ROOT / page)
    assert code.strip()
    exec(compile(code, page, "exec"), {"__name__": "__docs__"})


def test_schedule_page_printouts_are_what_lowering_prints():
    from tests.doc_printouts import PAGE, printouts

    pairs = printouts(PAGE.read_text())
    assert len(pairs) >= 12
    for shown, written in pairs:
        assert written == shown, "docs/schedules.md is stale: run .venv/bin/python -m tests.doc_printouts --write"


def test_the_frontend_page_names_every_operator_the_importer_takes():
    """docs/frontend.md's operator table is written by hand: every operator with a handler is on it."""
    from ptowsp.frontend.onnx_import import registered_operators

    text = (ROOT / "docs" / "frontend.md").read_text()
    missing = [op for op in registered_operators() if not re.search(rf"\b{op}\b", text)]
    assert not missing, f"docs/frontend.md does not name {missing}"


def test_the_generated_operator_table_has_a_row_for_every_registered_operator():
    """docs/onnx_operators.md is written by a full run of the ONNX backend suite (tests/onnx_backend/table.py):
    a handler added since the last run has no row, and the table must be written again."""
    from ptowsp.frontend.onnx_import import registered_operators

    rows = {line.split("|")[1].strip() for line in (ROOT / "docs" / "onnx_operators.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith(("| operator", "| ---"))}
    missing = sorted(set(registered_operators()) - rows)
    assert not missing, f"docs/onnx_operators.md has no row for {missing}: run python -m tests.onnx_backend " \
                        "--write-expected"
