"""Which injective producers the default schedule keeps stored: inlining must not multiply work.

Category fusion inlines every injective producer into its one consumer (TVM's rule).  That is
free when the consumer reads the producer at one point per point of its own, and costly for a
stencil: a 3-tap blur inlined into a 3-tap blur evaluates the first one 3 times per output, six
stages of an image pipeline up to 3^k times (camera_pipe and unsharp ran 5x slower than with
fusion off).  So, consumers first, each producer the category plan would inline is weighed
with everything else inlined as decided so far: where its root (the task its value ends up
in) would evaluate each of its elements several times (reads at several distinct indices per
point, a broadcast: the root has more points than the producer, or a reduction over a window
that overlaps its neighbour's: a 3x3 max pool of stride 2 reads each element 2.25 times) and the repeated
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


def evaluations(body: Expr, tensor: str) -> int:
    """How often one point of `body` evaluates its reads of `tensor`: each distinct read once, times
    the iterations of the reductions around it (a 3x3 max pool's one read of its input: 9 times)."""
    weights: dict[tuple[str, ...], int] = {}
    seen: set[tuple[int, int]] = set()

    def visit(n: Expr, times: int) -> None:
        if (id(n), times) in seen:
            return
        seen.add((id(n), times))
        if n.op is Op.LOAD:
            if n.arg.name == tensor:
                key = tuple(map(str, n.src))
                weights[key] = max(weights.get(key, 0), times)
            return
        if n.op is Op.REDUCE:
            iterations = math.prod(a.arg[1] if isinstance(a.arg[1], int) else 1 for a in n.src[1:])
            visit(n.src[0], times * iterations)
            return
        for x in n.src:
            visit(x, times)

    visit(body, 1)
    return sum(weights.values())


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
        body = inline_producers(wl.task(root).value, wl, others)
        spread = math.prod(wl.task(root).tensor.shape) / math.prod(wl.task(producer).tensor.shape)
        # evaluations per element of the producer: each distinct read, more where the root has more points
        # (a broadcast repeats it), and each iteration of a reduction over a window (a max pool's taps)
        reads = max(distinct_reads(body, producer) * max(1.0, spread), evaluations(body, producer) * spread)
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
