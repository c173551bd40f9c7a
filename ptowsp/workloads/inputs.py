"""Validate the arrays a caller passes for a workload's inputs."""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from ptowsp.errors import InputError, WorkloadError
from ptowsp.te import dtypes, sizes
from ptowsp.workloads.workload import Workload


def read_only(array: np.ndarray) -> np.ndarray:
    """A view that raises on writes, so no task can modify a caller's array."""
    view = array.view()
    view.flags.writeable = False
    return view


def random_inputs(wl: Workload, seed: int = 0, sizes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs of the declared shapes and dtypes: normal floats, small 32/64-bit integers (-5..5,
    unsigned 0..10), 8/16-bit integers over their whole range (pixels, quantized values: wrap-around
    shows), coin-flip booleans.  What tests, the AutoScheduler's checking run and the CLI feed a
    workload.  A workload with symbolic sizes needs their values (`sizes`)."""
    rng = np.random.default_rng(seed)
    bound = wl.bind(sizes or {})
    out = {}
    for name in wl.inputs:
        t = bound.tensor(name)
        if t.dtype == "bool":
            out[name] = rng.integers(0, 2, t.shape).astype(bool)
        elif t.dtype in ("int32", "int64"):
            out[name] = rng.integers(-5, 6, t.shape).astype(t.dtype)
        elif dtypes.is_int(t.dtype):
            lo, hi = dtypes.int_range(t.dtype) if np.dtype(t.dtype).itemsize <= 2 else (0, 10)
            out[name] = rng.integers(lo, hi, t.shape, dtype=t.dtype, endpoint=True)
        else:
            out[name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


def validate_inputs(wl: Workload, given: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Check every input is present with its declared shape and dtype; return read-only views."""
    if not wl.outputs:
        raise WorkloadError(f"workload {wl.name!r} declares no outputs; call wl.output(tensor) first")
    declared = wl.constants
    constants = [name for name in given if name in declared]
    if constants:
        raise InputError(f"{constants[0]!r} is a constant of workload {wl.name!r} (its value was given to "
                         "wl.constant) and is not passed at run time")
    unexpected = sorted(set(given) - set(wl.inputs))
    if unexpected:
        known = ", ".join(wl.inputs) or "(none)"
        plain = re.sub(r"[^A-Za-z0-9_]", "_", unexpected[0]).strip("_")
        like = [n for n in wl.inputs if n in (plain, f"t_{plain}")]
        hint = f" ({like[0]!r}: an imported model's names become identifiers, docs/frontend.md)" if like else ""
        raise InputError(f"unexpected input {unexpected[0]!r} for workload {wl.name!r}; its inputs are {known}{hint}")
    arrays = {}
    for name in wl.inputs:
        t = wl.tensor(name)
        value = given.get(name)
        if not isinstance(value, np.ndarray) or value.ndim != t.ndim or value.dtype != np.dtype(t.dtype) or \
                any(isinstance(d, int) and d != n for d, n in zip(t.shape, value.shape)):
            _refuse(wl, name, t, given)
        arrays[name] = read_only(value)
    input_sizes(wl, arrays)
    return arrays


class InputCheck:
    """validate_inputs for one workload, remembering what it accepted: a run whose inputs have the
    types, shapes and dtypes of inputs accepted before (each compared again) skips the full check,
    whose cost showed in small runs (8 us of a 40 us run).  The workload must not change after."""

    REMEMBERED = 64  # signatures kept (a workload with symbolic sizes meets many)

    def __init__(self, wl: Workload):
        self.workload = wl
        self.names = tuple(wl.inputs)
        self.accepted: set[tuple] = set()

    def __call__(self, given: Mapping[str, object]) -> dict[str, np.ndarray]:
        signature = None
        if len(given) == len(self.names):
            values = [given.get(name) for name in self.names]
            if all(isinstance(v, np.ndarray) for v in values):
                signature = tuple((type(v), v.shape, v.dtype) for v in values)  # type: ignore[union-attr]
                if signature in self.accepted:
                    return {name: read_only(v) for name, v in zip(self.names, values)}  # type: ignore[arg-type]
        arrays = validate_inputs(self.workload, given)
        if signature is not None and len(self.accepted) < self.REMEMBERED:
            self.accepted.add(signature)
        return arrays


def _refuse(wl: Workload, name: str, t, given: Mapping[str, object]) -> None:
    """Raise the InputError that says how input `name` differs from what the workload declares."""
    expected = f"a {t.dtype} array of shape {t.shape_text}"
    if name not in given:
        raise InputError(f"missing input {name!r} of workload {wl.name!r}: expected {expected}")
    value = given[name]
    if not isinstance(value, np.ndarray):
        raise InputError(f"input {name!r}: expected {expected}, got {type(value).__name__}")
    if value.ndim != t.ndim or any(isinstance(d, int) and d != n for d, n in zip(t.shape, value.shape)):
        raise InputError(f"input {name!r}: expected {expected}, got shape {value.shape}")
    raise InputError(f"input {name!r}: expected {expected}, got dtype {value.dtype}; convert with .astype({t.dtype!r})")


def input_sizes(wl: Workload, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The value of each symbolic size, read from the input that declares it; InputError when another
    input disagrees (or a size is 0)."""
    found: dict[str, int] = {}
    for size, (name, dim) in wl.size_sources.items():
        found[size] = int(arrays[name].shape[dim])
        if found[size] < 1:
            raise InputError(f"input {name!r} gives size {size} = 0 (dimension {dim}); sizes must be at least 1")
    for name in wl.inputs:
        t = wl.tensor(name)
        for d, dim in enumerate(t.shape):
            if isinstance(dim, int):
                continue
            want = sizes.value(dim, found)
            if arrays[name].shape[d] != want:
                given = ", ".join(f"{k}={v}" for k, v in found.items() if k in sizes.names_in(dim))
                source = wl.size_sources
                origin = "; ".join(f"{k} from input {source[k][0]!r}" for k in sorted(sizes.names_in(dim)))
                raise InputError(f"input {name!r}: dimension {d} is {dim} = {want} ({given}; {origin}), "
                                 f"got shape {arrays[name].shape}")
    return found
