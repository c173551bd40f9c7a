"""Schedules: how a workload runs, as replayable pydantic steps (and, later, graph passes)."""

from ptowsp.schedules.loopnest import Loop, LoopNest
from ptowsp.schedules.schedule import Schedule
from ptowsp.schedules.steps import ScheduleRecord, Step
from ptowsp.workloads.workload import register_schedule_factory

register_schedule_factory(Schedule)

__all__ = ["Loop", "LoopNest", "Schedule", "ScheduleRecord", "Step"]
