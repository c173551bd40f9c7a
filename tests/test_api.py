"""The public namespace matches DESIGN.md section 3 for what has landed."""

from __future__ import annotations

import ptowsp as pw

# Names of DESIGN.md section 3 that have landed; build, runtime and tuning
# names join as their issues land.
CORE_API = [
    "Workload", "Category", "reference", "Schedule", "reduce_axis", "sum", "max", "min", "exp", "log", "sqrt",
    "rsqrt", "tanh", "sigmoid", "abs", "erf", "pow", "floor", "ceil", "maximum", "minimum", "where",
    "cast", "PtowspError", "ShapeError", "DTypeError", "BoundsError", "ScheduleError", "BuildError",
    "InputError", "TaskError", "DeadlockError", "csp", "dispatch", "Trace", "build", "targets", "frontend",
]


def test_the_frontend_loads_on_first_use():
    """`import ptowsp` does not load onnx; `pw.frontend.from_onnx` does (in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys, ptowsp as pw; assert 'onnx' not in sys.modules; "
            "assert callable(pw.frontend.from_onnx); assert 'onnx' in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_design_names_are_exported():
    missing = [n for n in CORE_API if n not in pw.__all__ or not hasattr(pw, n)]
    assert not missing


def test_all_is_exact():
    assert len(pw.__all__) == len(set(pw.__all__))
    assert all(hasattr(pw, n) for n in pw.__all__)


def test_errors_share_one_base():
    for n in CORE_API:
        obj = getattr(pw, n)
        if isinstance(obj, type) and n.endswith("Error") and n != "PtowspError":
            assert issubclass(obj, pw.PtowspError)


def test_categories():
    assert {c.name for c in pw.Category} == {"INJECTIVE", "REDUCTION", "COMPLEX_OUT_FUSABLE", "OPAQUE"}
