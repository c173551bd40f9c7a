"""The clock a run's task table runs on, as one interface a backend hands the executable that
launches its kernels: the host's own time (`HOST_CLOCK`: worker threads, and the native loop for
compiled kernels) or a device model's discrete-event time (`DeviceClock`, the aicore target's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ptowsp.runtime.device import DeviceCosts, execute_device
from ptowsp.runtime.executor import execute
from ptowsp.runtime.scheduler import Launcher, Options
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Trace


class Clock(Protocol):
    real: bool  # the host's time: its helper threads are woken, compiled kernels may run in the native loop

    def execute(self, table: TaskTable, launcher: Launcher, options: Options) -> Trace: ...


class HostClock:
    real = True

    def execute(self, table: TaskTable, launcher: Launcher, options: Options) -> Trace:
        return execute(table, launcher, options)


HOST_CLOCK = HostClock()


class DeviceClock:
    """A device model's clock.  `prepare` makes, for the table a run launches (its tiles outside a
    domain left out), the table as the device runs it and that run's costs (fresh caches and queues);
    `costs` keeps the last run's, for its statistics."""

    real = False

    def __init__(self, prepare: Callable[[TaskTable], tuple[TaskTable, DeviceCosts]]):
        self.prepare = prepare
        self.costs: DeviceCosts | None = None

    def execute(self, table: TaskTable, launcher: Launcher, options: Options) -> Trace:
        table, self.costs = self.prepare(table)
        return execute_device(table, launcher, options, self.costs)
