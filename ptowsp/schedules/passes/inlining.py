"""Which injective producers the default schedule keeps stored: inlining must not multiply work.

Category fusion inlines every injective producer into its one consumer (TVM's rule).  That is
free when the consumer reads the producer at one point per point of its own, and costly for a
stencil: a 3-tap blur inlined into a 3-tap blur evaluates the first one 3 times per output, six
stages of an image pipeline up to 3^k times (camera_pipe and unsharp ran 5x slower than with
fusion off).  So, consumers first, each producer the category plan would inline is weighed
with everything else inlined as decided so far: where its root (the task its value ends up
in) would evaluate each of its elements several times (reads at several distinct indices per
point, or a broadcast: the root has more points than the producer) and the repeated
arithmetic exceeds `MAX_REPEATED_OPS` per element, it stays stored.  The default schedule then computes it per block
of the root's rows with a halo (default.py's grouping), or on its own: every element once.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from ptowsp.te import Expr, Op, walk
from ptowsp.workloads import ComputeTask, Workload, inline_producers

MAX_REPEATED_OPS = 4  # arithmetic a point may repeat rather than store and load the producer once
_FREE = frozenset({Op.LOAD, Op.CONST, Op.VAR, Op.RVAR, Op.CAST})  # no arithmetic of their own


def operations(e: Expr) -> int:
    """Arithmetic on values in an expression (not the index arithmetic of its loads), each node
    counted once however often it is shared."""
    seen: set[int] = set()

    def visit(n: Expr) -> int:
        if id(n) in seen:
            return 0
        seen.add(id(n))
        own = 0 if n.op in _FREE else 1
        return own + (0 if n.op is Op.LOAD else sum(visit(x) for x in n.src))

    return visit(e)


def distinct_reads(body: Expr, tensor: str) -> int:
    """How many different index tuples `body` reads `tensor` at (each read evaluates it once)."""
    return len({tuple(map(str, n.src)) for n in walk(body) if n.op is Op.LOAD and n.arg.name == tensor})


def keep_stored(wl: Workload, inlined: Collection[str]) -> dict[str, str]:
    """{producer: why it stays stored} among the `inlined` ones (the category plan's inlines)."""
    order = {t: n for n, t in enumerate(wl.tasks)}
    left = set(inlined)
    kept: dict[str, str] = {}
    for producer in sorted(inlined, key=lambda t: -order[t]):  # consumers first: their choice shapes the reads
        root = _root(wl, producer, left)
        if root is None:
            continue
        others = left - {producer}
        distinct = distinct_reads(inline_producers(wl.task(root).value, wl, others), producer)
        spread = math.prod(wl.task(root).tensor.shape) / math.prod(wl.task(producer).tensor.shape)
        reads = distinct * max(1.0, spread)  # evaluations per element of the producer (a broadcast repeats it)
        cost = operations(inline_producers(wl.task(producer).value, wl, others))
        if reads > 1 and cost * (reads - 1) > MAX_REPEATED_OPS:
            left.discard(producer)
            kept[producer] = (f"inlined into {root!r}, {producer!r} would be computed {reads:g} times per element "
                              f"({cost} operations each); the default keeps it stored")
    return kept


def _root(wl: Workload, task: str, inlined: Collection[str]) -> str | None:
    """The task `task`'s value ends up in when the `inlined` tasks are inlined (None: several)."""
    here = task
    while here in inlined:
        readers = list(wl.graph.successors(here))
        if len(readers) != 1 or not isinstance(wl.task(readers[0]), ComputeTask):
            return None
        here = readers[0]
    return here
