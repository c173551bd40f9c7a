"""Lowering: a workload and its schedule become kernels (loop-nest IR) plus a task table."""

from ptowsp.lower.ir import Allocate, Barrier, Block, Buffer, For, IfThen, Let, Stmt, Store
from ptowsp.lower.kernel import Kernel, lower_task
from ptowsp.lower.printer import to_source
from ptowsp.lower.program import Program, TaskInstance, lower_program

__all__ = ["Allocate", "Barrier", "Block", "Buffer", "For", "IfThen", "Kernel", "Let", "Program", "Stmt", "Store",
           "TaskInstance", "lower_program", "lower_task", "to_source"]
