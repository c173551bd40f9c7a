"""docs/onnx_operators.md: the importer's operators, one row each, with what a run of the ONNX backend
suite measured of them (`python -m tests.onnx_backend --write-expected` writes it with expected.toml).

Every operator of the importer's registry (frontend/onnx_import.py `registered_operators`) and every
one the node cases use is a row: how it is imported (the module whose handler takes it, onnx's
function body, or only folded at import), how many of its node cases pass on every target of the run
(and of those onnxruntime passes), and the opsets and input dtypes of the cases that pass.
"""

from __future__ import annotations

import collections
from pathlib import Path

import onnx

from ptowsp.frontend import onnx_functions
from ptowsp.frontend.onnx_import import registered_operators
from ptowsp.frontend.onnx_shapes import OPS
from tests.onnx_backend.suite import cases, peer_passes

TABLE = Path(__file__).parents[2] / "docs" / "onnx_operators.md"


def _facts(name: str) -> tuple[set[str], int, set[str]]:
    """(the operators, the opset and the input dtypes of a node case's model)."""
    model, _ = cases()[name].model_and_data()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    dtypes = {onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name
              for i in model.graph.input if i.type.WhichOneof("value") == "tensor_type"
              and i.type.tensor_type.elem_type not in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING)}
    return {n.op_type for n in model.graph.node}, opset, dtypes


def _how(op: str) -> str:
    if op in OPS:
        return f"handler ({OPS[op].__module__.rsplit('.', 1)[-1]}.py)"
    if onnx_functions.has_body(op, onnx.defs.onnx_opset_version()):
        return "onnx's function body (onnx_functions.py)"
    return "no handler: folded when every input is a constant, else refused"


def write_table(results: dict[str, dict]) -> None:
    """The table from a run's {case: {target: Outcome}} (node cases only count)."""
    peer = peer_passes()
    rows: dict[str, dict] = collections.defaultdict(
        lambda: {"cases": 0, "passed": 0, "peer": 0, "peer_passed": 0, "opsets": set(), "dtypes": set()})
    for name, found in results.items():
        if cases()[name].suite != "node":
            continue
        ops, opset, dtypes = _facts(name)
        passed = all(o.kind == "pass" for o in found.values())
        for op in ops:
            row = rows[op]
            row["cases"] += 1
            row["passed"] += passed
            row["peer"] += name in peer
            row["peer_passed"] += passed and name in peer
            if passed:
                row["opsets"].add(opset)
                row["dtypes"] |= dtypes
    lines = [
        "# ONNX operators: what the importer takes, as the backend suite measured it",
        "",
        "Written by `python -m tests.onnx_backend --write-expected` (tests/onnx_backend/table.py) from the",
        "importer's registry and a full run of onnx's backend suite; tests/test_docs.py checks that every",
        "registered operator has its row.  *Passed*: node cases passing on every target the run used",
        "(pw.reference and cpu, a sample on aicore); *of onnxruntime's*: among the cases onnxruntime",
        "passes.  *Opsets* and *input dtypes*: of the passing cases.  Why each other case fails:",
        "tests/onnx_backend/expected.toml.  What each operator's attributes do: docs/frontend.md.",
        "",
        "| operator | imported by | passed | of onnxruntime's | opsets | input dtypes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for op in sorted(set(rows) | set(registered_operators())):
        row = rows.get(op)
        if row is None:
            lines.append(f"| {op} | {_how(op)} | no node case | | | |")
            continue
        opsets = ", ".join(map(str, sorted(row["opsets"])))
        lines.append(f"| {op} | {_how(op)} | {row['passed']} of {row['cases']} | {row['peer_passed']} of "
                     f"{row['peer']} | {opsets} | {', '.join(sorted(row['dtypes']))} |")
    TABLE.write_text("\n".join(lines) + "\n")
