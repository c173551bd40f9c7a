"""Shapes and constant values as a workload accepts them: checked, normalised, copied."""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from ptowsp.errors import DTypeError, ShapeError
from ptowsp.te import Expr, dtypes, sizes
from ptowsp.te.sizes import Extent

ALIGN = 64  # bytes: a cache line, and enough for any vector load


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """np.empty whose data starts on an ALIGN-byte boundary (malloc gives 16): kernels may then
    load and store whole vectors aligned (non-temporal stores need it), and a constant made here
    is used by a build as it is, not copied again."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def normalize_shape(shape: object, what: str) -> tuple[Extent, ...]:
    """A shape as a tuple of positive ints and symbolic sizes (te/sizes.py), or ShapeError naming `what`."""
    items = (shape,) if isinstance(shape, (int, str, Expr)) else shape
    try:
        items = tuple(items)  # type: ignore[arg-type]
    except TypeError:
        raise ShapeError(f"{what}: shape must be a tuple of positive ints or size names, got {shape!r}") from None
    return tuple(sizes.dimension(n, what) for n in items)


def constant_array(what: str, value: object, dtype: object) -> np.ndarray:
    """A private copy of a constant's value in a supported dtype, or DTypeError / ShapeError naming it."""
    try:
        found = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(f"{what}: the value is not a rectangular array: {e}") from None
    if dtype is None:
        if isinstance(value, np.ndarray):
            dtype = found.dtype
        else:  # Python data: floats take the workload default, as wl.input does
            dtype = "float32" if found.dtype.kind == "f" else found.dtype
    try:
        name = dtypes.normalize(dtype)
    except DTypeError as e:
        raise DTypeError(f"{what}: {e}; pass dtype= or convert the array") from None
    numbers = found.dtype.kind in "biuf" or dtypes.is_bfloat16(found.dtype)  # ml_dtypes' kind is "V"
    if not numbers or not np.can_cast(found.dtype, name, casting="same_kind"):
        raise DTypeError(f"{what}: a {found.dtype} value does not convert to {name} without changing its kind; "
                         "convert it explicitly")
    array = aligned_empty(found.shape, np.dtype(name))  # (ml_dtypes registers bfloat16's name with numpy)
    array[...] = found  # always a copy: the caller's array stays theirs
    if array.dtype.kind in "iu" and not np.array_equal(array, found):
        raise DTypeError(f"{what}: some values do not fit {name}")
    return array


# every constant array a workload holds (read-only, its own), by id, with its digest: a workload built
# from another (the cpu's passes copy a model's hundreds of weights several times) shares them
_frozen: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
_digests: dict[int, str] = {}


def frozen_constant(what: str, value: object, dtype: object) -> tuple[np.ndarray, str]:
    """A constant's private read-only array and the digest of its bytes.  An array that a workload holds
    already (read-only, never changed) is shared, not copied and hashed again."""
    if isinstance(value, np.ndarray) and _frozen.get(id(value)) is value and \
            (dtype is None or dtypes.normalize(dtype) == value.dtype.name):
        return value, _digests[id(value)]
    array = constant_array(what, value, dtype)
    return array, _freeze(array)


def _freeze(array: np.ndarray) -> str:
    """Make `array` read-only and known as frozen; its digest (hashed in place: a copy of a 2 GiB
    constant's bytes is 2 GiB more at the import's peak)."""
    array.flags.writeable = False
    digest = hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()[:16]
    key = id(array)
    _frozen[key], _digests[key] = array, digest
    weakref.finalize(array, _digests.pop, key, None)
    return digest


def adopt(array: np.ndarray) -> np.ndarray:
    """`array`, frozen where it lies, for a caller that gives it up (the ONNX importer's folded and read
    constants): a workload's `constant` then shares it instead of copying it, so a large constant is
    held once at the import's peak, not twice.  An array of another dtype than the workload would
    keep, or not laid out in one piece, is left as it is (`constant` copies it as usual)."""
    if not isinstance(array, np.ndarray) or array.ndim == 0 or not array.flags.c_contiguous \
            or not array.flags.owndata or _frozen.get(id(array)) is array:
        return array
    try:
        kept = dtypes.normalize(array.dtype)
    except DTypeError:
        return array
    if kept != array.dtype.name:
        return array
    _freeze(array)
    return array
