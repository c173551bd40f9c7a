"""The typed errors every ptowsp layer raises.

Each error says what is at fault (task, step, tensor or value) and what was
expected.  They also subclass the closest builtin so generic handlers work.
"""


class PtowspError(Exception):
    """Base of every error ptowsp raises on purpose."""


class WorkloadError(PtowspError, ValueError):
    """A workload is ill-formed: duplicate names, a stray reduce axis, a bad output."""


class ShapeError(PtowspError, ValueError):
    """A shape or an index count does not match what the tensor or task declares."""


class DTypeError(PtowspError, TypeError):
    """A dtype is unsupported, or an operation does not accept the operand dtypes."""


class BoundsError(PtowspError, IndexError):
    """An access may fall outside a tensor; found when the task is defined."""


class ScheduleError(PtowspError, ValueError):
    """An illegal schedule step: names the task, the step and the reason."""


class BuildError(PtowspError, RuntimeError):
    """A program cannot be built for the requested target."""


class InputError(PtowspError, ValueError):
    """Run inputs are missing, unexpected, or of the wrong shape or dtype."""


class TaskError(PtowspError, RuntimeError):
    """A task failed while running: names the task (and its grid coordinates)."""


class DeadlockError(PtowspError, RuntimeError):
    """Every live virtual thread is blocked: lists them and what they wait on."""


class RunTimeout(PtowspError, TimeoutError):
    """A run passed its `timeout=`; every virtual thread was cancelled first."""
