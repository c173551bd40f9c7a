"""Split reductions: a graph pass of the cpu's default build (TVM's rfactor, as a graph rewrite).

A sum with few outputs and a long reduction that reads a fresh operand element per term (a
matrix-vector product, `C[0, j] = sum(A[0, k] * B[k, j], k)`: dense 1x2048 -> 1000) is bound by
reading that operand once.  Its only parallel loop is over the outputs, and tasks over blocks of
columns each read a strided slice of every row of B: two cores read it no faster than one
(docs/performance.md and its git history).  As BLAS's gemv splits the rows among its threads,
the pass splits the reduction into PARTS contiguous slices, a partial sum per slice, and adds the partial sums:

    C_parts[s, 0, j] = sum(A[0, s*256 + k] * B[s*256 + k, j], k)      (PARTS x the outputs)
    C[0, j]          = sum(C_parts[s, 0, j], s)

so each task streams a contiguous block of rows.  A task is rewritten when its body is one sum
over one axis that walks the rows of an operand (not its last index: a softmax's row sums split
into rows already) and whose extent PARTS divides (at least MIN_SLICE terms per slice), it has at most
MAX_OUTPUTS outputs, and some operand it reads has at least MIN_OPERAND elements and as many
as a quarter of its terms (little reuse: a matmul's operands are read many times and stay as they
are).  The workload must be plain compute tasks with static shapes; anything else is left as written.
"""

from __future__ import annotations

import math

from ptowsp.schedules.passes.tiles import contiguous
from ptowsp.te import Expr, Op, reduce_axis, reduce_sum, substitute
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, fresh_name, names_in, plain, rebuild, retarget

PARTS = 8  # slices of a split reduction: a few tasks per worker on this project's machines
MIN_SLICE = 64  # terms per slice, at least
MAX_OUTPUTS = 16384  # outputs of a task worth splitting: its partial sums stay in the caches
MIN_OPERAND = 1 << 18  # elements of the operand streamed: below this one task reads it fast enough


def split_reductions(wl: Workload, min_operand: int = MIN_OPERAND) -> Workload:
    """`wl` with every long, memory-bound sum of few outputs split into PARTS partial sums (see the
    module docstring; `min_operand` lets tests split small ones); `wl` itself when there is none."""
    if wl.sizes or any(not plain(wl.task(t)) for t in wl.tasks):
        return wl
    found = [t for t in wl.tasks if _splittable(wl.task(t), min_operand)]
    if not found:
        return wl
    return rebuild(wl, dict.fromkeys(found, _rewrite))


def _splittable(task: ComputeTask, min_operand: int) -> bool:
    body = task.body
    if body.op is not Op.REDUCE or body.arg != "sum" or len(body.src) != 2:
        return False
    terms = body.src[1].arg[1]
    outputs = math.prod(task.tensor.shape)
    if terms % PARTS or terms // PARTS < MIN_SLICE or outputs > MAX_OUTPUTS:
        return False
    streamed = max((math.prod(t.shape) for t in task.inputs), default=0)
    # a reduction along rows' last index (a softmax's sum) splits into contiguous rows already
    return streamed >= min_operand and 4 * streamed >= outputs * terms and not contiguous(body, body.src[1].arg[0])


def _rewrite(out: Workload, task: ComputeTask) -> None:
    """The partial sums, then the task adding them."""
    value, axis = task.body.src
    k, terms = axis.arg
    chunk = terms // PARTS
    loops = task.loop_names
    part = fresh_name("s", set(loops))

    def partial(s: Expr, *_: Expr) -> Expr:
        inner = reduce_axis(chunk, k)
        at = s * chunk + inner

        def slice_of(e: Expr) -> Expr | None:
            return at if e.op is Op.RVAR and e.arg[0] == k else None

        return reduce_sum(retarget(out, substitute(value, slice_of)), axis=inner)

    parts = compute_as(out, fresh_name(f"{task.name}_parts", names_in(out)), (PARTS, *task.tensor.shape),
                       (part, *loops), partial)

    def total(*index: Expr) -> Expr:
        s = reduce_axis(PARTS, part)
        return reduce_sum(parts[(s, *index)], axis=s)

    compute_as(out, task.name, task.tensor.shape, loops, total)
