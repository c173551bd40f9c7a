"""The loop nest of one task while it is being scheduled: loops, extents, relations.

A `LoopNest` is immutable; every transformation returns a new one, and
`checked()` states the invariants every step must keep:

- a vectorized loop is the innermost loop (on a reduction loop it computes
  one partial result per lane, combined at the end: the schedule's explicit
  permission to reassociate the reduction);
- parallel loops are the outermost loops (they form the task grid);
- a thread axis is bound once, and at most 1024 threads make a block.

Split and fuse record *relations* (Halide's split/fuse terms), from which
lowering recovers each original loop variable:
`v = v.outer * factor + v.inner` (guarded by `v < extent` when the factor
does not divide the extent) and `a = f // extent(b)`, `b = f % extent(b)` for
`f = a.b.fused`.

Extents may be symbolic (te/sizes.py): splitting a loop of extent `n` by 8
gives `(n + 7) // 8` outer iterations and a guarded tail, since no factor
is known to divide a size.  Loops that vectorize, unroll or form a GPU block
need a number: split a symbolic loop and annotate its inner part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ptowsp.te import sizes
from ptowsp.te.sizes import Extent


# -- loop names: made and read here only -------------------------------------------------------
# A loop is an original loop (one of the task's variables or reduce axes, a name without a dot), or
# `X.outer` / `X.inner` (the parts of a split of X), or `X.Y.fused` (X and Y fused).  Every module
# that needs the name of a part, or the original loops behind a name, asks these functions.
_SPLIT_PARTS = ("outer", "inner")


def outer_of(loop: str) -> str:
    """The outer loop a split of `loop` makes."""
    return f"{loop}.outer"


def inner_of(loop: str) -> str:
    """The inner loop a split of `loop` makes."""
    return f"{loop}.inner"


def fused_of(outer: str, inner: str) -> str:
    """The loop a fuse of `outer` and `inner` makes."""
    return f"{outer}.{inner}.fused"


def is_outer_part(loop: str) -> bool:
    """Whether `loop` is the outer part of a split."""
    return _parsed(loop.split("."))[0] == "outer"


def roots_of(loop: str) -> tuple[str, ...]:
    """The original loops a loop name derives from, outermost first (one for a split part, two or more
    for a fused loop).  Read from the name's structure, so an original loop may itself be named
    `outer` or `inner` (a legal axis name): `outer.inner` is the inner part of a loop named outer.
    One case stays ambiguous until loops are typed handles: a fuse whose inner loop is a split part
    of a loop named `outer` or `inner` reads as the fuse of a split part (`i.outer.inner.fused`)."""
    return tuple(_roots(_parsed(loop.split("."))))


def renamed(loop: str, names: dict[str, str]) -> str:
    """`loop` with the original loops it derives from renamed by `names` (the others kept)."""
    return _joined(_parsed(loop.split(".")), names)


def _parsed(tokens: list[str]) -> tuple:
    """('root', name) | ('outer'|'inner', part) | ('fused', outer, inner) for a loop name's tokens; a
    single token is an original loop, else its last token says how it was made."""
    found = _parse(tokens)
    if found is None:
        raise ValueError(f"{'.'.join(tokens)!r} is not a loop name")
    return found


def _parse(tokens: list[str]) -> tuple | None:
    if len(tokens) == 1:
        return ("root", tokens[0]) if tokens[0] else None
    if tokens[-1] in _SPLIT_PARTS:
        inner = _parse(tokens[:-1])
        return None if inner is None else (tokens[-1], inner)
    if tokens[-1] == "fused":  # the longest left operand first: `i.outer.inner.fused` fuses i.outer and inner
        for k in range(len(tokens) - 2, 0, -1):
            a, b = _parse(tokens[:k]), _parse(tokens[k:-1])
            if a is not None and b is not None:
                return ("fused", a, b)
    return None


def _roots(tree: tuple) -> list[str]:
    if tree[0] == "root":
        return [tree[1]]
    return [r for part in tree[1:] for r in _roots(part)]


def _joined(tree: tuple, names: dict[str, str]) -> str:
    if tree[0] == "root":
        return names.get(tree[1], tree[1])
    if tree[0] == "fused":
        return fused_of(_joined(tree[1], names), _joined(tree[2], names))
    return f"{_joined(tree[1], names)}.{tree[0]}"

SERIAL, VECTORIZED, UNROLLED, PARALLEL = "serial", "vectorized", "unrolled", "parallel"
MAX_VECTOR_LANES = 64
MAX_UNROLL = 256
MAX_THREADS_PER_BLOCK = 1024


class StepError(Exception):
    """Why a step is illegal; the schedule adds the step and task to the message."""


@dataclass(frozen=True)
class Loop:
    name: str
    extent: Extent
    reduce: bool  # iterates a reduction axis (or a part of one)
    annotation: str = SERIAL  # serial, vectorized, unrolled, parallel, or a GPU thread axis


@dataclass(frozen=True)
class SplitRelation:
    parent: str
    outer: str
    inner: str
    factor: int
    parent_extent: Extent

    @property
    def guarded(self) -> bool:
        """True when the factor may leave a tail: the inner loop runs past the extent."""
        if not isinstance(self.parent_extent, int):
            return self.factor > 1
        return self.parent_extent % self.factor != 0 and self.factor < self.parent_extent


@dataclass(frozen=True)
class FuseRelation:
    outer: str
    inner: str
    fused: str
    inner_extent: Extent


@dataclass(frozen=True)
class LoopNest:
    loops: tuple[Loop, ...]  # outermost first
    relations: tuple[SplitRelation | FuseRelation, ...] = ()

    @staticmethod
    def of(spatial: list[tuple[str, Extent]], reduce: list[tuple[str, Extent]]) -> LoopNest:
        """The initial nest: spatial loops outermost, then the reduction's loops."""
        return LoopNest(tuple(Loop(n, e, False) for n, e in spatial) + tuple(Loop(n, e, True) for n, e in reduce))

    @property
    def names(self) -> list[str]:
        return [loop.name for loop in self.loops]

    def index(self, name: str) -> int:
        for position, loop in enumerate(self.loops):
            if loop.name == name:
                return position
        raise StepError(f"has no loop {name!r}; its loops are {', '.join(self.names) or '(none)'}")

    def loop(self, name: str) -> Loop:
        return self.loops[self.index(name)]

    def roots(self, name: str) -> frozenset[str]:
        """The task's own loops (its variables and reduce axes) that loop `name` iterates a part of."""
        for rel in self.relations:
            if isinstance(rel, SplitRelation) and name in (rel.outer, rel.inner):
                return self.roots(rel.parent)
            if isinstance(rel, FuseRelation) and name == rel.fused:
                return self.roots(rel.outer) | self.roots(rel.inner)
        return frozenset({name})

    def _with(self, loops: list[Loop], relation: SplitRelation | FuseRelation | None = None) -> LoopNest:
        relations = self.relations + ((relation,) if relation else ())
        return LoopNest(tuple(loops), relations).checked()

    # -- transformations ------------------------------------------------------------
    def split(self, name: str, factor: int) -> LoopNest:
        if isinstance(factor, bool) or not isinstance(factor, int) or not 1 <= factor <= MAX_FACTOR:
            raise StepError(f"split factor must be an integer in 1..{MAX_FACTOR}, got {factor!r:.40}")
        position, loop = self.index(name), self.loop(name)
        self._require_serial(loop, "split")
        outer = Loop(outer_of(name), sizes.ceil_div(loop.extent, factor), loop.reduce)
        inner = Loop(inner_of(name), _split_inner(factor, loop.extent), loop.reduce)
        for new in (outer, inner):
            if new.name in self.names:
                raise StepError(f"splitting {name} would create {new.name}, which exists already")
        loops = list(self.loops)
        loops[position: position + 1] = [outer, inner]
        return self._with(loops, SplitRelation(name, outer.name, inner.name, factor, loop.extent))

    def fuse(self, outer: str, inner: str) -> LoopNest:
        a, b = self.index(outer), self.index(inner)
        if b != a + 1:
            raise StepError(f"fuse needs {inner} directly inside {outer}; the loops are {', '.join(self.names)}")
        la, lb = self.loops[a], self.loops[b]
        if la.reduce != lb.reduce:
            raise StepError(f"cannot fuse the reduction loop {(la if la.reduce else lb).name} with a spatial loop")
        for loop in (la, lb):
            self._require_serial(loop, "fused")
        fused = Loop(fused_of(outer, inner), sizes.mul(la.extent, lb.extent), la.reduce)
        loops = list(self.loops)
        loops[a: b + 1] = [fused]
        return self._with(loops, FuseRelation(outer, inner, fused.name, lb.extent))

    def reorder(self, order: list[str]) -> LoopNest:
        for name in order:
            self.index(name)
        if len(set(order)) != len(order):
            raise StepError(f"reorder lists a loop twice: {', '.join(order)}")
        missing = [n for n in self.names if n not in order]
        if missing:
            raise StepError(f"reorder drops {', '.join(missing)}; list every loop: {', '.join(self.names)}")
        return self._with([self.loop(n) for n in order])

    def annotate(self, names: list[str], annotation: str) -> LoopNest:
        """Mark loops; the invariants are checked once all of them are marked."""
        marked = set()
        for name in names:
            loop = self.loop(name)
            self._require_serial(loop, annotation)
            if loop.reduce and annotation not in (UNROLLED, VECTORIZED):
                raise StepError(f"{name} is a reduction loop; {annotation} iterations would race on the same outputs")
            if annotation != PARALLEL and not annotation.startswith("blockIdx.") and not isinstance(loop.extent, int):
                raise StepError(f"{name} has the symbolic extent {loop.extent}; split it and make the inner loop "
                                f"{annotation}")
            if annotation == VECTORIZED and loop.extent > MAX_VECTOR_LANES:
                raise StepError(f"{name} has extent {loop.extent}; split it to at most {MAX_VECTOR_LANES} lanes first")
            if annotation == UNROLLED and loop.extent > MAX_UNROLL:
                raise StepError(f"{name} has extent {loop.extent}; unroll at most {MAX_UNROLL} iterations")
            marked.add(name)
        return self._with([replace(lp, annotation=annotation) if lp.name in marked else lp for lp in self.loops])

    def with_root_extents(self, roots: dict[str, Extent]) -> LoopNest:
        """The same splits, fusions, order and annotations over root loops of other extents.

        A task computed at another task's loop runs its own schedule over the
        region that loop needs, not over its whole domain.
        """
        extent = dict(roots)
        relations: list[SplitRelation | FuseRelation] = []
        for rel in self.relations:
            if isinstance(rel, SplitRelation):
                n = extent[rel.parent]
                extent[rel.outer], extent[rel.inner] = sizes.ceil_div(n, rel.factor), _split_inner(rel.factor, n)
                relations.append(replace(rel, parent_extent=n))
            else:
                extent[rel.fused] = sizes.mul(extent[rel.outer], extent[rel.inner])
                relations.append(replace(rel, inner_extent=extent[rel.inner]))
        return LoopNest(tuple(replace(lp, extent=extent[lp.name]) for lp in self.loops), tuple(relations))

    # -- invariants -------------------------------------------------------------------
    @staticmethod
    def _require_serial(loop: Loop, action: str) -> None:
        if loop.annotation != SERIAL:
            raise StepError(f"{loop.name} is already {loop.annotation}; it cannot be {action}")

    def checked(self) -> LoopNest:
        annotations = [loop.annotation for loop in self.loops]
        for position, loop in enumerate(self.loops):
            if loop.annotation == VECTORIZED and position != len(self.loops) - 1:
                raise StepError(f"the vectorized loop {loop.name} must stay innermost; the loops are {self._show()}")
        parallel = [p for p, a in enumerate(annotations) if a == PARALLEL]
        if parallel != list(range(len(parallel))):
            raise StepError(f"parallel loops must be the outermost loops (the task grid); the loops are {self._show()}")
        threads = [a for a in annotations if "Idx." in a]
        if len(set(threads)) != len(threads):
            raise StepError(f"a GPU thread axis is bound to two loops: {self._show()}")
        block = math.prod(lp.extent for lp in self.loops if lp.annotation.startswith("threadIdx."))  # static
        if block > MAX_THREADS_PER_BLOCK:
            raise StepError(f"{block} threads per block exceed the limit of {MAX_THREADS_PER_BLOCK}")
        return self

    def _show(self) -> str:
        return ", ".join(f"{lp.name}[{lp.annotation}]" if lp.annotation != SERIAL else lp.name for lp in self.loops)


MAX_FACTOR = 2**31 - 1  # loop extents are int64 in generated code: a larger factor only overflows


def _split_inner(factor: int, extent: Extent) -> int:
    """The inner loop of a split: the factor, or a static extent it exceeds (a symbolic one may be
    smaller at run time; the split's guard covers that)."""
    return min(factor, extent) if isinstance(extent, int) else factor
