"""Workloads: the task graph, task categories, input validation, the numpy reference, the zoo."""

from ptowsp.workloads import zoo
from ptowsp.workloads.inline import inline_producers
from ptowsp.workloads.inputs import input_sizes, random_inputs, validate_inputs
from ptowsp.workloads.reference import matches, reference
from ptowsp.workloads.task import Category, ComputeTask, OpaqueTask, Task
from ptowsp.workloads.workload import Workload

__all__ = ["Category", "ComputeTask", "OpaqueTask", "Task", "Workload", "inline_producers", "input_sizes", "matches",
           "random_inputs", "reference", "validate_inputs", "zoo"]
