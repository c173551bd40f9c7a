"""Static memory planning: intermediate tensors share one arena by liveness.

After fusion, the tensors a program still stores between tasks (not inputs,
constants or outputs) get byte offsets in one arena.  A tensor is live from
the step that writes it to the last step that reads it, steps being the
program's tasks in launch order; two tensors whose lifetimes overlap never
overlap in the arena.  Offsets come from greedy placement (each tensor in
turn at the lowest offset free for its whole lifetime) in three orders,
largest first as in TFLite's arena planner, earliest first and
longest-lived first, keeping the smallest arena.

Liveness by launch order is not enough on a runtime that overlaps tasks:
the instances of a later task may start while those of an earlier one still
run (tile-level pipelining).  So the plan also says, for each tensor, which
earlier tensors' bytes it takes over (`reuses`), and the runtime orders every
write of it after every access of those (TaskTable's `after`).  A task that
may run at the same time as a reader of a buffer therefore never writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ptowsp.workloads.arrays import ALIGN



@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]  # tensor -> byte offset in the arena
    sizes: dict[str, int]  # tensor -> bytes
    lifetimes: dict[str, tuple[int, int]]  # tensor -> (step writing it, last step reading it)
    arena_bytes: int  # the planned peak: the arena's size
    reuses: dict[str, tuple[str, ...]]  # tensor -> earlier tensors whose bytes it takes over

    @property
    def unshared_bytes(self) -> int:
        """The peak without planning: every intermediate in its own buffer for the whole run."""
        return sum(self.sizes.values())

    @property
    def live_peak_bytes(self) -> int:
        """The lower bound: the most bytes live at one step (alignment aside)."""
        steps = {s for span in self.lifetimes.values() for s in span}
        return max((sum(self.sizes[t] for t, (a, b) in self.lifetimes.items() if a <= s <= b) for s in steps),
                   default=0)

    def overlapping(self) -> list[tuple[str, str]]:
        """Pairs of tensors live at the same time whose bytes overlap (always empty for a plan made here)."""
        names = sorted(self.offsets)
        return [(a, b) for n, a in enumerate(names) for b in names[n + 1:]
                if _meet(self.lifetimes[a], self.lifetimes[b])
                and _meet((self.offsets[a], self.offsets[a] + self.sizes[a] - 1),
                          (self.offsets[b], self.offsets[b] + self.sizes[b] - 1))]

    def __str__(self) -> str:
        lines = [f"intermediates: {_mib(self.arena_bytes)} in one arena, {_mib(self.unshared_bytes)} unshared "
                 f"(live peak {_mib(self.live_peak_bytes)})"]
        for t in sorted(self.offsets, key=self.offsets.get):
            first, last = self.lifetimes[t]
            shares = f", takes over {', '.join(self.reuses[t])}" if self.reuses.get(t) else ""
            lines.append(f"  {t:<16} {_mib(self.sizes[t]):>10} at +{self.offsets[t]:<10} steps {first}..{last}{shares}")
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def plan_memory(steps: Iterable[tuple[Iterable[str], Iterable[str]]], sizes: Mapping[str, int]) -> MemoryPlan:
    """Offsets for the tensors in `sizes`, given (reads, writes) of each step in launch order.

    Tensors not in `sizes` (inputs, constants, outputs) are ignored; a tensor
    written but never read lives for its writing step only.
    """
    lifetimes: dict[str, list[int]] = {}
    for n, (reads, writes) in enumerate(steps):
        for t in writes:
            if t in sizes:
                lifetimes.setdefault(t, [n, n])
        for t in reads:
            if t in lifetimes:
                lifetimes[t][1] = n
    spans = {t: (a, b) for t, (a, b) in lifetimes.items()}
    orders = (lambda t: (-sizes[t], spans[t][0], t),  # greedy by size (TFLite)
              lambda t: (spans[t][0], -sizes[t], t),  # by first use
              lambda t: (spans[t][0] - spans[t][1], -sizes[t], t))  # longest-lived first
    offsets = min((_place(sorted(spans, key=order), spans, sizes) for order in orders),
                  key=lambda o: max((o[t] + sizes[t] for t in o), default=0))
    arena = max((offsets[t] + sizes[t] for t in offsets), default=0)
    return MemoryPlan(offsets, {t: sizes[t] for t in offsets}, spans, _aligned(arena),
                      _reuses(offsets, spans, sizes))


def _reuses(offsets: dict[str, int], spans: dict[str, tuple[int, int]], sizes: Mapping[str, int]
            ) -> dict[str, tuple[str, ...]]:
    """Per tensor, the tensors dead before it starts whose bytes it overlaps, by first use (numpy
    over all of them at once: a decoder's 28 layers have 700 tensors, 490,000 pairs)."""
    names = sorted(offsets, key=lambda u: spans[u][0])
    first, last = (np.array([spans[u][k] for u in names], np.int64) for k in (0, 1))
    start = np.array([offsets[u] for u in names], np.int64)
    end = start + np.array([sizes[u] for u in names], np.int64)
    found = {}
    for t in offsets:
        at = offsets[t]
        taken = np.flatnonzero((last < spans[t][0]) & (start < at + sizes[t]) & (at < end))
        if len(taken):
            found[t] = tuple(names[k] for k in taken)
    return found


def _place(order: list[str], spans: dict[str, tuple[int, int]], sizes: Mapping[str, int]) -> dict[str, int]:
    """Each tensor in turn at the lowest aligned offset free for its whole lifetime."""
    offsets: dict[str, int] = {}
    first, last, low, high = (np.zeros(len(order), np.int64) for _ in range(4))  # the placed: lifetimes, bytes
    for n, t in enumerate(order):
        live = (first[:n] <= spans[t][1]) & (spans[t][0] <= last[:n])
        busy = sorted(zip(low[:n][live].tolist(), high[:n][live].tolist()))
        at = 0
        for start, end in busy:
            if at + sizes[t] <= start:
                break
            at = max(at, _aligned(end))
        offsets[t] = at
        first[n], last[n] = spans[t]
        low[n], high[n] = at, at + sizes[t]
    return offsets


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
