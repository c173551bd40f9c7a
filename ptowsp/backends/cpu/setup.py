"""What every run of a cpu program at one binding of its sizes shares, worked out once.

A run's own work is then only what differs from one run to the next: the input arrays, the
buffers of the outputs and of the arena (reused through the Recycler), and the pointer table
the native loop reads.  Worked out per run, this set-up cost more than a small run's kernels:
25-40 us of Python per run before a 1x2048 -> 1000 dense layer's 170 us (docs/performance.md and
its git history).

The arena's tensors are addresses only: the native loop never needs them as arrays, so their
numpy views are made only when Python code runs a task (an opaque task, the aicore target's
device clock, debug checks) or the run's arrays decide which tiles have work (tasks with a domain).
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from typing import NamedTuple

import numpy as np

from ptowsp.backends.buffers import Recycler
from ptowsp.backends.host import Domains
from ptowsp.runtime import TaskTable
from ptowsp.runtime.native import NativeTasks
from ptowsp.schedules.passes.memory import MemoryPlan
from ptowsp.workloads import Workload

ARENA = " arena"  # the Recycler's name for the arena (no tensor's name starts with a space)


class Stored(NamedTuple):
    """A tensor a task stores: at `offset` in the arena, or in a buffer of its own (offset None)."""
    name: str
    shape: tuple[int, ...]  # as stored (its layout's shape when it has one)
    dtype: np.dtype
    offset: int | None
    zeroed: bool  # filled with zeros before the run (a task with a domain may skip tiles)


class Placed(NamedTuple):
    """One run's memory: the arena (ALIGN-aligned, as the Recycler's arrays are), where it starts,
    and the tensors with buffers of their own (outputs, zero-filled tensors) and where they start."""
    arena: np.ndarray
    at: int
    own: dict[str, np.ndarray]
    own_at: dict[str, int]


class RunSetup:
    """The bound workload, its memory plan, where each stored tensor lives, and the native loop's
    pointer table with what is known before a run (the constants' addresses) filled in."""

    def __init__(self, key: tuple[int, ...], bound: Workload, plan: MemoryPlan, stored: list[Stored],
                 arguments: tuple[str, ...], constant_addresses: Mapping[str, int]):
        self.key = key  # the sizes' values, in the workload's order of its sizes
        self.bound, self.plan = bound, plan
        self.memory = {"planned": plan.arena_bytes, "unshared": plan.unshared_bytes}  # what each run's trace reports
        self.own = [s for s in stored if s.offset is None]
        self.in_arena = [s for s in stored if s.offset is not None]
        slot = {name: k for k, name in enumerate(arguments)}
        self.template = np.zeros(max(1, len(arguments)), np.int64)
        for name, address in constant_addresses.items():
            if name in slot:
                self.template[slot[name]] = address
        self.arena_slots = np.array([slot[s.name] for s in self.in_arena if s.name in slot], np.int64)
        self.arena_offsets = np.array([s.offset for s in self.in_arena if s.name in slot], np.int64)
        self.input_slots = [(slot[name], name) for name in bound.inputs if name in slot]
        self.own_slots = [(slot[s.name], s.name) for s in self.own if s.name in slot]
        # filled in by the executable once it has them: the table (None when each run's arrays pick
        # the kernel versions of its tiles), its instances as the native loop calls them (None: some
        # run in Python), and its tiles of tasks with a domain (each run's data decides which work)
        self.table: TaskTable | None = None
        self.native: NativeTasks | None = None
        self.domains: Domains | None = None

    def place(self, buffers: Recycler, unfilled: Container[str] = ()) -> Placed:
        """The run's arena and own buffers, from the recycler, the outputs of tasks with a domain
        zero-filled but those in `unfilled` (a task none of whose tiles the run skips: a tile that
        runs writes its zeros itself)."""
        arena = buffers.empty(ARENA, (self.plan.arena_bytes,), np.uint8)
        own, own_at = {}, {}
        for s in self.own:
            own[s.name] = array = buffers.empty(s.name, s.shape, s.dtype)
            own_at[s.name] = buffers.address(s.name)
            if s.zeroed and s.name not in unfilled:
                array.fill(0)
        return Placed(arena, buffers.address(ARENA), own, own_at)

    def fill_pointers(self, table: np.ndarray, filled: dict, placed: Placed, inputs: Mapping[str, np.ndarray]) -> None:
        """Write a native run's addresses into the pointer table its buffer keeps (`arguments` order;
        a runtime.native Fill): the constants' once per buffer, the arena's and the own buffers'
        only when they moved (the Recycler hands out the same ones run after run), an input's
        unless it is the very array of the last run (a Recording's replay passes the caller's
        arrays themselves: a decoder's hundreds of weights; `filled` holds it, so its memory
        stays where it was).  Each numpy call skipped matters: after a run that streamed
        megabytes they run with cold caches, several microseconds each (docs/performance.md and
        its git history)."""
        if not filled:
            table[:] = self.template
            filled[ARENA] = None
        if filled[ARENA] != placed.at and len(self.arena_slots):
            table[self.arena_slots] = self.arena_offsets + placed.at
            filled[ARENA] = placed.at
        for k, name in self.input_slots:
            array = inputs[name]
            if filled.get(k) is not array:
                table[k] = array.ctypes.data
                filled[k] = array
        for k, name in self.own_slots:
            at = placed.own_at[name]
            if filled.get(k) != at:
                table[k] = filled[k] = at

    def arrays(self, placed: Placed, inputs: Mapping[str, np.ndarray],
               constants: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every tensor of the run as an array (the arena's as views into it), for Python code."""
        arrays = {**constants, **inputs, **placed.own}
        for s in self.in_arena:
            nbytes = math.prod(s.shape) * s.dtype.itemsize
            arrays[s.name] = placed.arena[s.offset:s.offset + nbytes].view(s.dtype).reshape(s.shape)
        return arrays
