"""`make demo` (examples/transformer_demo.py): the side-by-side table, the checks against
pw.reference, the trace files, and a tuning log that does not fit the block."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

import ptowsp as pw
from ptowsp.autoschedule import records

DEMO = Path(__file__).resolve().parents[1] / "examples" / "transformer_demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("transformer_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while the class is made
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def block(demo):
    return pw.zoo.transformer_block(**demo.SIZES, eps=demo.EPS)


def log_of(path: Path, schedule: pw.Schedule, fingerprint: str | None = None) -> Path:
    """A one-record tuning log of `schedule` (as a search writes it), for another definition
    when `fingerprint` is given."""
    record = pw.autoschedule.TrialRecord.of(schedule, "cpu", 0, 1e-3)
    records.append(path, [record.model_copy(update={"fingerprint": fingerprint}) if fingerprint else record])
    return path


def torch_imports() -> bool:
    try:
        import torch  # noqa: F401
    except Exception:
        return False
    return True


def test_demo_prints_the_table_checks_results_and_writes_a_warm_trace(demo, block, tmp_path, capsys):
    # a "tuned" schedule: the default one with another dispatch policy (a real search takes minutes)
    default = pw.build(block, target="cpu").schedule  # of the block as the cpu's default build runs it
    tuned = pw.Schedule.from_json(default.workload, default.to_json()).dispatch("round_robin")
    log = log_of(tmp_path / "tune.jsonl", tuned)
    rows = demo.main(["--rounds", "2", "--runs", "2", "--out", str(tmp_path / "out"), "--log", str(log)])
    printed = capsys.readouterr().out

    names = [r.name for r in rows]
    assert names == ["ptowsp default", "ptowsp tuned", "numpy float32", "torch eager"]
    for row in rows:
        if row.name == "torch eager" and not torch_imports():
            assert row.seconds is None and row.why
            assert re.search(r"torch eager\s+no row: (not installed|import torch failed)", printed)
            continue
        assert row.seconds is not None and 0 < row.seconds < 10, row
        assert row.ok, f"{row.name} differs from pw.reference by {row.error}"
        shown = re.search(rf"^  {row.name}\s.*\s(\d+\.\d\d) ms\s+(\d+\.\d\d)x\s+ok \(", printed, flags=re.M)
        assert shown, f"no table line for {row.name}:\n{printed}"
        assert float(shown[1]) == pytest.approx(row.seconds * 1e3, abs=0.006)
    numpy_line = re.search(r"^  numpy float32\s.*\s(\d+\.\d\d)x", printed, flags=re.M)
    assert numpy_line[1] == "1.00"  # the baseline of the speed-ups

    trace = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert (tmp_path / "out" / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "trace of a warm run" in printed and "makespan" in printed


def test_a_log_without_this_block_skips_the_tuned_row(demo, block, tmp_path):
    inputs = demo.make_inputs(block)
    stale = log_of(tmp_path / "stale.jsonl", pw.build(block, target="cpu").schedule, fingerprint="0" * 64)
    row, prog = demo.tuned_row(block, stale, inputs, None)
    assert prog is None and row.run is None and "fingerprint" in row.why

    row, prog = demo.tuned_row(block, tmp_path / "missing.jsonl", inputs, None)
    assert prog is None and "no tuning log at" in row.why

    row, prog = demo.tuned_row(block, None, inputs, None)  # the demo ships none, and says why
    assert prog is None and "nothing measurably faster than the default" in row.why
    assert "tuned" in demo.table([row], demo.Row("numpy float32", "", seconds=1e-3, error=0.0))
