"""Scatter: writes through an index map, each target at most once (a host step and a gather) or combined.

`wl.scatter(name, shape, over, index, value)` means: start from zeros of
`shape`; for every point p of the iteration space `over` (where `domain`
holds) write value(p) to name[index(p)].  With each target written at most
once, the map from targets back to points is a function, so the scatter is

- `name_source`: a host task (opaque, the orchestrator's kind of work)
  that evaluates the index map over `over` and inverts it: for each
  target, the flat position of the point that writes it, or -1.  It
  checks every index value (BoundsError naming the task, the dimension and
  the value) and that no target is written twice;
- `name`: a compute task that gathers, `value(unravel(source[t]))` where
  source[t] >= 0 (its domain), else zero.

Every backend runs both as it runs any opaque task and any gather, and the
orchestrator skips the gather's tiles that no point writes.

With `combine="add"|"max"|"min"` several points may write one target, and the map back is
no function; the scatter is then

- `name_value`: a compute task over `over` (where `domain` holds), value(p) at every
  point: compiled on every target, and any legal schedule of it is race-free, since each
  point writes its own element;
- `name`: a host task that starts from the combine's identity (0; the dtype's lowest or
  highest value, -inf/+inf for floats) and folds each point's value into its target
  sequentially, in row-major order of the points (`np.add.at` and kin), after the same
  index checks.  The order is the reference's, on every target, so float sums agree
  exactly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ptowsp.errors import BoundsError, ShapeError, WorkloadError
from ptowsp.te import Expr, Op, Tensor, dtypes, lift, sizes, walk
from ptowsp.te.evaluate import evaluate
from ptowsp.te.reducer import reduction_identity
from ptowsp.te.sizes import Extent
from ptowsp.workloads.arrays import normalize_shape
from ptowsp.workloads.checks import loop_names_of

if TYPE_CHECKING:
    from ptowsp.workloads.workload import Workload

SOURCE_SUFFIX = "_source"
VALUE_SUFFIX = "_value"
COMBINES = {"add": np.add, "max": np.maximum, "min": np.minimum}


def scatter_names(name: str, combine: str | None) -> tuple[str, str]:
    """The two tasks a scatter adds: `name`, and the host inversion (no combine) or the values it folds;
    Workload.scatter claims both before either is added.  WorkloadError for an unknown combine."""
    if combine is not None and combine not in COMBINES:
        raise WorkloadError(f"scatter {name!r}: combine={combine!r} is not one of {sorted(COMBINES)} (or None: "
                            "each target written at most once)")
    return name, name + (SOURCE_SUFFIX if combine is None else VALUE_SUFFIX)


def scatter(wl: Workload, name: str, shape: Sequence[Extent], over: Sequence[Extent],
            index: Callable[..., Sequence[object]], value: Callable[..., object],
            domain: Callable[..., object] | None = None, combine: str | None = None) -> Tensor:
    """See Workload.scatter (which has claimed `scatter_names`)."""
    shape, over = normalize_shape(shape, f"scatter {name!r}"), normalize_shape(over, f"scatter {name!r} over")
    loops = loop_names_of(name, over, value)
    points = tuple(Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (n, x)) for n, x in zip(loops, over, strict=True))
    targets = tuple(lift(i) for i in _sequence(index(*points), name))
    if len(targets) != len(shape):
        raise ShapeError(f"scatter {name!r}: index gives {len(targets)} coordinate(s) for a {len(shape)}-d output")
    for k, t in enumerate(targets):
        if not dtypes.is_int(t.dtype):
            raise WorkloadError(f"scatter {name!r}: coordinate {k} of the index is {t.dtype}, not an integer: {t}")
    body = lift(value(*points))
    if combine is not None and not (dtypes.is_int(body.dtype) or dtypes.is_float(body.dtype)):
        raise WorkloadError(f"scatter {name!r}: combine={combine!r} needs numeric values, got {body.dtype}")
    for e in walk(body):
        if e.op is Op.REDUCE:
            raise WorkloadError(f"scatter {name!r} writes an element expression; compute the reduction "
                                f"{e} as a task of its own and scatter its result")
    cond = lift(domain(*points)) if domain is not None else None
    where_ = [*targets, *([cond] if cond is not None else [])]
    read = {n.arg.name: n.arg for e in where_ for n in walk(e) if n.op is Op.LOAD}
    declaring = {wl.size_sources[s][0] for s in sizes.names_in([*over, *shape]) if s in wl.size_sources}
    inputs = [*read.values(), *(wl.tensor(t) for t in sorted(declaring - set(read)))]
    if combine is not None:
        return _combining(wl, name, shape, over, loops, value, domain, combine, inputs, targets, cond)
    source = wl.opaque(name + SOURCE_SUFFIX, _Inversion(name, wl, inputs, over, loops, targets, cond, shape),
                       inputs, [(name + SOURCE_SUFFIX, shape, "int64")])

    def gathered(*at: Expr) -> Expr:
        flat = source[at]
        return value(*_unravel(flat, over))

    def written(*at: Expr) -> Expr:
        return source[at] >= 0

    gathered.__signature__ = _signature(len(shape))  # loop names of the output: t0, t1, ...
    written.__signature__ = gathered.__signature__
    return wl.compute(name, shape, gathered, domain=written)


def _sequence(found: object, name: str) -> tuple:
    if isinstance(found, (tuple, list)):
        return tuple(found)
    raise WorkloadError(f"scatter {name!r}: index must return a tuple of coordinates, one per output dimension, "
                        f"got {found!r}")


def _signature(dims: int) -> inspect.Signature:
    return inspect.Signature([inspect.Parameter(f"t{k}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
                              for k in range(dims)])


def _unravel(flat: Expr, extents: Sequence[Extent]) -> list[Expr]:
    """The coordinates of a row-major flat position over `extents`."""
    coords, stride = [], 1
    for extent in reversed(extents):
        coords.append((flat // stride) % extent if stride != 1 else flat % extent)
        stride = sizes.mul(stride, extent)
    return coords[::-1]


def _combining(wl, name, shape, over, loops, value, domain, combine, inputs, targets, cond) -> Tensor:
    """A scatter whose points may share a target: the values as a compute task, folded on the host."""
    values = wl.compute(name + VALUE_SUFFIX, over, value, domain=domain)
    fold = _Combination(name, wl, inputs, over, loops, targets, cond, shape, values, combine)
    return wl.opaque(name, fold, [values, *inputs], [(name, shape, values.dtype)])


class _Inversion:
    """The host step of a scatter: targets -> flat position of the point that writes them, or -1."""

    def __init__(self, name, wl, inputs, over, loops, targets, cond, shape):
        self.name, self.inputs, self.over, self.loops = name, [t.name for t in inputs], over, loops
        self.targets, self.cond, self.shape = targets, cond, shape
        self.sources = {s: wl.size_sources[s] for s in sizes.names_in([*over, *shape]) if s in wl.size_sources}
        self.__name__ = f"invert {name}"

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        flat, positions, over, shape = self._flat_targets(dict(zip(self.inputs, arrays, strict=True)))
        out = np.full(shape, -1, np.int64)
        seen, first = np.unique(flat, return_index=True)
        if len(seen) != len(flat):
            twice = np.setdiff1d(np.arange(len(flat)), first)[0]
            a, b = (_point(positions[k], over) for k in np.flatnonzero(flat == flat[twice])[:2])
            raise BoundsError(f"scatter {self.name!r}: target {_point(flat[twice], shape)} is written by points "
                              f"{a} and {b}; a scatter writes each target at most once (or give combine=)")
        out.reshape(-1)[flat] = positions
        return out

    def _flat_targets(self, given: dict[str, np.ndarray]):
        """Flat target and flat point of every point in the domain (row-major), after the bounds check."""
        binding = {s: int(given[t].shape[d]) for s, (t, d) in self.sources.items()}
        over = sizes.bind_shape(self.over, binding)
        shape = sizes.bind_shape(self.shape, binding)
        at = [evaluate(sizes.bind(t, binding), self.loops, over, given).reshape(-1) for t in self.targets]
        positions = np.arange(int(np.prod(over)), dtype=np.int64)
        if self.cond is not None:
            keep = evaluate(sizes.bind(self.cond, binding), self.loops, over, given).reshape(-1)
            at, positions = [a[keep] for a in at], positions[keep]
        for k, (a, n) in enumerate(zip(at, shape, strict=True)):
            bad = np.flatnonzero((a < 0) | (a >= n))
            if len(bad):
                read = sorted({m.arg.name for m in walk(self.targets[k]) if m.op is Op.LOAD})
                source = f" (read from {', '.join(read)})" if read else ""
                raise BoundsError(f"scatter {self.name!r}: coordinate {k} of the target of point "
                                  f"{_point(positions[bad[0]], over)} is {int(a[bad[0]])}{source}, outside [0, {n})")
        flat = np.ravel_multi_index(tuple(a.astype(np.int64) for a in at), shape) if at else np.zeros(0, np.int64)
        return flat, positions, over, shape


class _Combination(_Inversion):
    """The host step of a combining scatter: fold each point's value into its target, in row-major order."""

    def __init__(self, name, wl, inputs, over, loops, targets, cond, shape, values, combine):
        super().__init__(name, wl, inputs, over, loops, targets, cond, shape)
        self.dtype, self.combine = values.dtype, combine
        self.__name__ = f"combine {name} ({combine})"

    def __call__(self, values: np.ndarray, *arrays: np.ndarray) -> np.ndarray:
        flat, positions, _, shape = self._flat_targets(dict(zip(self.inputs, arrays, strict=True)))
        out = np.full(shape, identity(self.combine, self.dtype), dtype=values.dtype)
        # ufunc.at is unbuffered and goes through the indices in order: sequential, row-major
        COMBINES[self.combine].at(out.reshape(-1), flat, values.reshape(-1)[positions])
        return out


def identity(combine: str, dtype: str) -> int | float:
    """The start value of a combining scatter's targets: that of the reduction it combines as (0 for add,
    the lowest/highest for max/min)."""
    return reduction_identity({"add": "sum"}.get(combine, combine), dtype).arg


def _point(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(p) for p in np.unravel_index(flat, shape))
