"""ptowsp: describe a computation once as a workload, decide separately how it runs.

This module only re-exports the public API of DESIGN.md section 3; the
implementation lives in the layer packages (te, workloads, ...), in
pipeline order as docs/architecture.md lists them.
"""

from ptowsp.errors import (
    BoundsError, BuildError, DeadlockError, DTypeError, InputError, PtowspError, ScheduleError,
    RunTimeout, ShapeError, TaskError, WorkloadError,
)
from ptowsp.te import (
    Expr, Tensor, argmax, argmin, cast, ceil, clamp, erf, exp, floor, log, maximum, minimum, reduce_axis, reducer,
    round, rsqrt, saturating_cast, sigmoid, sqrt, tanh, where,
)
from ptowsp.te import absolute as abs  # noqa: A001 - the expression language's name
from ptowsp.te import power as pow  # noqa: A001
from ptowsp.te import reduce_max as max  # noqa: A001
from ptowsp.te import reduce_min as min  # noqa: A001
from ptowsp.te import reduce_sum as sum  # noqa: A001
from ptowsp.workloads import Category, Workload, reference, zoo
from ptowsp.workloads.intrinsic import intrinsic
from ptowsp.schedules import Schedule  # noqa: E402 - also registers Workload.schedule()
from ptowsp.backends import DeviceModel, build, targets  # noqa: E402
from ptowsp.runtime import Trace, csp, dispatch  # noqa: E402
from ptowsp import autoschedule  # noqa: E402
from ptowsp.autoschedule import AutoScheduler  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    # workloads and the golden model
    "Workload", "Category", "Tensor", "Expr", "reference", "zoo", "Schedule", "build", "targets", "DeviceModel",
    "intrinsic",
    # runtime: custom CSP pipelines, dispatch policies, traces
    "csp", "dispatch", "Trace",
    # tuning: the AutoScheduler and its records
    "AutoScheduler", "autoschedule",
    # other formats' models (imported on first use: it loads the onnx package)
    "frontend",
    # expression language
    "reduce_axis", "sum", "max", "min", "argmax", "argmin", "reducer", "exp", "log", "sqrt", "rsqrt", "tanh",
    "sigmoid", "abs", "erf",
    "pow", "floor", "ceil", "round", "maximum", "minimum", "where", "cast", "saturating_cast", "clamp",
    # errors
    "PtowspError", "ShapeError", "DTypeError", "BoundsError", "ScheduleError", "BuildError", "InputError",
    "TaskError", "DeadlockError", "WorkloadError", "RunTimeout",
]


def __getattr__(name: str) -> object:
    """`pw.frontend` loads on first use (it imports the onnx package, which plain use never needs)."""
    if name == "frontend":
        import importlib

        return importlib.import_module("ptowsp.frontend")
    raise AttributeError(f"module 'ptowsp' has no attribute {name!r}")
