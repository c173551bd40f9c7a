"""The CSP runtime: pw.csp on two clocks, task tables, dispatch policies, the executors and traces.

It imports nothing of te, workloads, schedules or lower: a backend hands it a
`TaskTable` (instances with regions) and a `Launcher` (code per stage).
"""

from ptowsp.runtime import csp, dispatch
from ptowsp.runtime.device import DeviceCosts, execute_device
from ptowsp.runtime.executor import execute, rouse
from ptowsp.runtime.scheduler import Launcher, Options, worker_classes
from ptowsp.runtime.table import Instance, RegionIndex, TaskTable
from ptowsp.runtime.trace import Event, Summary, Trace, Wait

__all__ = ["DeviceCosts", "Event", "Instance", "Launcher", "Options", "RegionIndex", "Summary", "TaskTable", "Trace",
           "Wait",
           "csp", "dispatch", "execute", "execute_device", "rouse", "worker_classes"]
