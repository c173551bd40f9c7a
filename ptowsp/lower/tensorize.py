"""Tensorize: the loop nest under a loop replaced by a call of a declared intrinsic (TVM's tensorize).

`bind(task, loop, kernel=name)` (or `tensorize`) asks for it; here, after the task is lowered,
each nest under `loop` that stores the task's values is matched against the intrinsic's pattern
(workloads/intrinsic.py), after the schedule's splits:

1. The nest is perfect: loops (whole, no guard) around one store.  A reduction pattern needs the
   store to be an update, `acc[idx] = acc[idx] + f`; an elementwise one, `out[idx] = f`.
2. The region's loops are grouped into axes: the loops of one pattern axis appear in every index
   as one mixed-radix number (`16 * j.inner.outer + j.inner.inner` is one axis of 32: a split
   inside the region is undone).  Spatial axes are read off the store's indices, reduce axes off
   the loads.  Each axis is then paired with a pattern axis of the same kind and extent (a
   pattern's size, "k", is bound by its first pairing).
3. With the pairing, `f` must be the pattern's body node for node: the same operations, dtypes
   and constants, and each load a read of one operand at `base + pattern index`, the base free
   of the region's loops and each pattern dimension on its own buffer dimension, in any order:
   a transposed operand (Q @ K.T reads K[j, k] where the pattern reads B[k, j]) is a window
   whose dimensions' strides the implementation is given (`Operand.dims`).

A nest that does not match is a ScheduleError saying what differs.  A match becomes a
`Tensorized` statement holding the operand windows and, as its body, the loops it replaces.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ptowsp.errors import ScheduleError
from ptowsp.lower.ir import Buffer, For, Operand, Stmt, Store, Tensorized, walk_stmts
from ptowsp.lower.simplify import simplify_expr
from ptowsp.lower.tidy import tidy
from ptowsp.te import Expr, Op, const, substitute_vars, walk
from ptowsp.te.affine import affine, loops_named
from ptowsp.workloads.intrinsic import Intrinsic, lookup


class NoMatch(Exception):
    """Why a nest is not the intrinsic's pattern; `paired`: raised once the axes were paired (a
    more telling reason than a pairing that failed)."""

    def __init__(self, reason: str, paired: bool = False):
        super().__init__(reason)
        self.paired = paired


@dataclass(frozen=True)
class _Axis:
    loops: tuple[tuple[str, int], ...]  # (loop, weight) of the region's loops on this axis
    extent: int
    reduce: bool


def tensorize(stmt: Stmt, task: str, found: tuple[str | None, str] | None, reduce_loops: set[str]) -> Stmt:
    """`stmt` with the nests under the tensorized loop (`found`: (loop, intrinsic)) replaced; with no
    loop named (`bind(task, kernel=name)`), under the loop whose matching nest is the largest."""
    if found is None:
        return stmt
    loop, name = found
    intrinsic = lookup(name)
    if loop is None:  # every loop tried: the match whose calls cover the most iterations wins
        reasons, best, most = [], None, 0
        for candidate in dict.fromkeys(s.var for s in walk_stmts(stmt) if isinstance(s, For)):
            try:
                done = tensorize(stmt, task, (candidate, name), reduce_loops)
            except ScheduleError as e:
                reasons.append(str(e).split("does not match: ")[-1])
                continue
            covered = max(math.prod(c.extents) for c in walk_stmts(done) if isinstance(c, Tensorized))
            if covered > most:
                best, most = done, covered
        if best is None:
            why = reasons[-1] if reasons else "the kernel has no loop"
            raise ScheduleError(f"task {task!r}: bind({task!r}, kernel={name!r}): no loop's nest matches; the last "
                                f"tried: {why}")
        return best
    matched: list[bool] = []
    reasons = []

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.var == loop:
            region = tidy(s)
            try:
                call = _match(region, intrinsic, reduce_loops)
            except NoMatch as e:
                reasons.append(str(e))
                return s
            matched.append(True)
            return call
        children = [visit(c) for c in s.children()]
        return s if all(a is b for a, b in zip(children, s.children(), strict=True)) else s.with_children(children)

    out = visit(stmt)
    if not matched:
        why = reasons[-1] if reasons else f"loop {loop} is not in the lowered kernel (a loop of one iteration is dropped)"
        raise ScheduleError(f"task {task!r}: bind({task!r}, {loop!r}, kernel={name!r}) does not match: {why}")
    return out


def _match(region: Stmt, intrinsic: Intrinsic, reduce_loops: set[str]) -> Tensorized:
    loops: list[For] = []
    s = region
    while isinstance(s, For):
        if not isinstance(s.extent, int):
            raise NoMatch(f"loop {s.var} has the symbolic extent {s.extent}; the intrinsic needs whole tiles")
        loops.append(s)
        s = s.body
    if not isinstance(s, Store):
        raise NoMatch(f"the nest is not loops around one store (it holds {type(s).__name__}: a guard of a split "
                      "that does not divide, a hoisted reduction or several statements)")
    pattern = intrinsic.task
    body, reduce = pattern.body, pattern.body.op is Op.REDUCE
    value = _update_value(s) if reduce else s.value
    if reduce and value is None:
        raise NoMatch(f"the pattern is a reduction but the store {s.buffer.name}[...] = {s.value} is not an "
                      "update of its target")
    names = {lp.var: lp.extent for lp in loops}
    axes = _axes(s, value, names, reduce_loops)
    p_axes = [(a.arg[0], a.arg[1], False) for a in pattern.axes] + (
        [(a.arg[0], a.arg[1], True) for a in body.src[1:]] if reduce else [])
    missing = len(p_axes) - len(axes)  # pattern axes of extent 1 here: their loops were dropped
    if missing < 0:
        raise NoMatch(f"the nest runs over {len(axes)} axes ({_show(axes)}); the pattern over {len(p_axes)} "
                      f"({', '.join(f'{n} in 0..{e}' for n, e, _ in p_axes)})")
    p_body = body.src[0] if reduce else body
    failures: list[NoMatch] = []
    for units in itertools.combinations(range(len(p_axes)), missing):
        if any(isinstance(p_axes[u][1], int) and p_axes[u][1] != 1 for u in units):
            continue
        for order in itertools.permutations(axes):
            placed = iter(order)
            aligned = [_Axis((), 1, p_axes[k][2]) if k in units else next(placed) for k in range(len(p_axes))]
            try:
                return _pair(aligned, p_axes, s, value, p_body, intrinsic, region)
            except NoMatch as e:
                failures.append(e)
    if not failures:
        raise NoMatch(f"the nest runs over {len(axes)} axes ({_show(axes)}); the pattern over {len(p_axes)} "
                      f"({', '.join(f'{n} in 0..{e}' for n, e, _ in p_axes)}), whose others cannot be 1")
    raise next((e for e in failures if e.paired), failures[0])


def _update_value(s: Store) -> Expr | None:
    """f of `acc[idx] = acc[idx] + f`, or None."""
    if s.value.op is not Op.ADD:
        return None
    for acc, f in (s.value.src, reversed(s.value.src)):
        if acc.op is Op.LOAD and acc.arg == s.buffer and all(a.same_as(b) for a, b in zip(acc.src, s.indices)):
            return f
    return None


def _linear(e: Expr, names: dict[str, int]) -> dict[str, int] | None:
    """Coefficients of the loops `names` in e when e is affine in them (other parts free of them)."""
    form = affine(e, loops_named(*names))
    return None if form is None else form.coefs


def _axes(store: Store, value: Expr, names: dict[str, int], reduce_loops: set[str]) -> list[_Axis]:
    """The region's loops grouped into axes, each a mixed-radix number of its loops."""
    groups: list[_Axis] = []
    placed: set[str] = set()
    indices = [*store.indices, *(i for n in walk(value) if n.op is Op.LOAD for i in n.src)]
    for index in indices:
        form = _linear(index, names)
        if form is None:
            raise NoMatch(f"the index {index} is not affine in the nest's loops")
        fresh = {n: c for n, c in form.items() if c != 0 and n not in placed}
        if not fresh:
            continue
        if any(n in placed for n, c in form.items() if c != 0):
            raise NoMatch(f"the index {index} mixes loops of different axes")
        ordered = sorted(fresh.items(), key=lambda nc: abs(nc[1]))
        unit, weight = abs(ordered[0][1]), 1
        for n, c in ordered:
            if abs(c) != unit * weight:
                raise NoMatch(f"the loops of index {index} do not form one dense axis (a strided access)")
            weight *= names[n]
        kinds = {n in reduce_loops for n in fresh}
        if len(kinds) != 1:
            raise NoMatch(f"the index {index} mixes reduction and spatial loops")
        groups.append(_Axis(tuple((n, abs(c) // unit) for n, c in ordered), weight, kinds.pop()))
        placed |= fresh.keys()
    unused = [n for n in names if n not in placed]
    if unused:
        raise NoMatch(f"loop {unused[0]} is not used by the computation it repeats")
    return groups


def _show(axes: list[_Axis]) -> str:
    return ", ".join(f"{'+'.join(n for n, _ in a.loops)} in 0..{a.extent}" for a in axes)


def _pair(order, p_axes, store: Store, value: Expr, p_body: Expr, intrinsic: Intrinsic, region: Stmt) -> Tensorized:
    """The call when the region's axes, in `order`, are the pattern's axes; else NoMatch."""
    bound: dict[str, int] = {}
    for axis, (p_name, p_extent, p_reduce) in zip(order, p_axes, strict=True):
        if axis.reduce != p_reduce:
            raise NoMatch(f"axis {_show([axis])} and the pattern's {p_name} are not both reductions or both spatial")
        extent = p_extent if isinstance(p_extent, int) else bound.setdefault(str(p_extent), axis.extent)
        if extent != axis.extent:
            raise NoMatch(f"axis {_show([axis])} has extent {axis.extent}; the pattern's {p_name} has {extent}")
    mapping = {loop: (p_name, weight) for axis, (p_name, _, _) in zip(order, p_axes, strict=True)
               for loop, weight in axis.loops}
    operands: dict[str, Operand] = {}
    pattern = intrinsic.task
    try:
        if store.buffer.dtype != pattern.tensor.dtype:
            raise NoMatch(f"the nest stores {store.buffer.dtype}; the pattern's output is {pattern.tensor.dtype}")
        _same(value, p_body, mapping, operands)
        out_indices = tuple(Expr(Op.VAR, "int64", (), (n, e)) for n, e, reduced in p_axes if not reduced)
        output = _window(store.buffer, store.indices, out_indices, mapping)
    except NoMatch as e:
        raise NoMatch(str(e), paired=True) from None
    ins = [operands.get(t.name) for t in pattern.inputs]
    if any(o is None for o in ins):
        raise NoMatch("the nest does not read every operand of the pattern", paired=True)
    return Tensorized(intrinsic.name, (output, *ins), tuple(axis.extent for axis in order), region)  # type: ignore


def _same(e: Expr, p: Expr, mapping, operands: dict[str, Operand]) -> None:
    """e (the nest's value) is p (the pattern's body) node for node, loads as operand windows."""
    if p.op is Op.LOAD:
        if e.op is not Op.LOAD or e.dtype != p.dtype:
            raise NoMatch(f"{e} stands where the pattern reads {p}")
        window = _window(e.arg, e.src, p.src, mapping)
        known = operands.setdefault(p.arg.name, window)
        if known.buffer != window.buffer or known.dims != window.dims or not all(
                a.same_as(b) for a, b in zip(known.base, window.base)):
            raise NoMatch(f"the pattern's {p.arg.name} is read from two different windows ({e})")
        return
    if e.op is not p.op or e.dtype != p.dtype or len(e.src) != len(p.src):
        raise NoMatch(f"the nest computes {e} where the pattern computes {p}")
    if p.op in (Op.VAR, Op.RVAR):
        raise NoMatch(f"the pattern uses its loop variable {p} as a value; tensorize matches loads only")
    if e.arg != p.arg:
        raise NoMatch(f"{e} and the pattern's {p} differ")
    for a, b in zip(e.src, p.src, strict=True):
        _same(a, b, mapping, operands)


def _window(buffer: Buffer, indices: tuple[Expr, ...], p_indices: tuple[Expr, ...], mapping) -> Operand:
    """The operand window a load (or store) at `indices` covers when the pattern reads at `p_indices`:
    its base (the loops at 0) and the buffer dimension each pattern dimension moves along."""
    loops = dict.fromkeys(mapping, 1)
    moves: list[dict[str, int]] = []  # per buffer dimension: {pattern axis: coefficient}
    base: list[Expr] = []
    for index in indices:
        form = _linear(index, loops)
        if form is None:
            raise NoMatch(f"the index {index} of {buffer.name} is not affine in the nest's loops")
        by_axis: dict[str, int] = {}
        for loop, c in form.items():
            if c == 0:
                continue
            p_name, weight = mapping[loop]
            if c % weight or by_axis.setdefault(p_name, c // weight) != c // weight:
                raise NoMatch(f"the index {index} of {buffer.name} is strided along {p_name}")
        moves.append(by_axis)
        base.append(simplify_expr(substitute_vars(index, dict.fromkeys(loops, const(0, "int64")))))
    p_loops = {name: 1 for name, _ in mapping.values()}
    dims: list[int] = []
    steps: list[int] = []
    for p_index in p_indices:
        p_form = {k: v for k, v in (_linear(p_index, p_loops) or {}).items() if v}
        # the buffer dimension this pattern dimension runs along, in any order (a transposed operand,
        # B[j, k] for the pattern's B[k, j], is a window whose strides the implementation is given),
        # a whole number of elements at a time (`x * 2` of a strided convolution: 2); an axis of extent
        # 1 here takes the first dimension left that does not move
        found = next(((d, step) for d, move in enumerate(moves)
                      if d not in dims and (step := _step(move, p_form)) is not None), None)
        if found is None:
            if not p_form:
                raise NoMatch(f"{buffer.name} has no dimension left for the pattern's [{p_index}] of one element")
            raise NoMatch(f"{buffer.name} is accessed at [{', '.join(map(str, indices))}], not as the pattern's "
                          f"window [{', '.join(map(str, p_indices))}] (in any order of its dimensions)")
        dims.append(found[0])
        steps.append(found[1])
    if any(move for d, move in enumerate(moves) if d not in dims):
        raise NoMatch(f"{buffer.name} is accessed at [{', '.join(map(str, indices))}]: more of its dimensions "
                      "move than the pattern's")
    return Operand(buffer, tuple(base), tuple(dims), () if all(s == 1 for s in steps) else tuple(steps))


def _step(move: dict[str, int], p_form: dict[str, int]) -> int | None:
    """How many elements a buffer dimension moving as `move` takes per step of the pattern's index
    `p_form` (both {pattern axis: coefficient}): a positive whole multiple, the same for every axis."""
    if move.keys() != p_form.keys():
        return None
    if not move:
        return 1
    ratios = {(c // p if c % p == 0 else 0) for c, p in ((move[k], p_form[k]) for k in move)}
    return ratios.pop() if len(ratios) == 1 and min(ratios) > 0 else None
