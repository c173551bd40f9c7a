"""The dtypes ptowsp supports and their exact rules: promotion, wrapping, casts.

- Two concrete dtypes promote as `numpy.result_type` does for arrays (never by
  value); bfloat16, which numpy lacks (it comes from ml_dtypes), promotes as
  float16 does, and bfloat16 with float16 gives float32.
- Python scalars are *weak* (NumPy 2 / NEP 50): they take the other operand's
  dtype (`x + 1` keeps uint8, `x + 1.0` keeps bfloat16); a Python float next
  to an integer gives float64; a Python int that the integer operand's dtype
  cannot hold is a DTypeError, as in NumPy 2 (uint8 x + 300, uint8 x * -1).
- Integer arithmetic wraps in its dtype (uint8 200 + 100 == 44).
- Casts (`cast_array`): integers wrap (modular); floats round to nearest even,
  and a conversion to bfloat16 from anything but float32 first goes to float32
  (as ml_dtypes does); float -> integer truncates toward zero and saturates at
  the integer's range, NaN giving 0 (LLVM's fptosi.sat / fptoui.sat); -> bool
  is `!= 0` (NaN is True).

docs/expressions.md states the same rules with examples.
"""

from __future__ import annotations

import ml_dtypes  # registers bfloat16 with numpy: np.dtype("bfloat16") works from here on
import numpy as np

from ptowsp.errors import DTypeError

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
SIGNED_DTYPES = ("int8", "int16", "int32", "int64")
UNSIGNED_DTYPES = ("uint8", "uint16", "uint32", "uint64")
DTYPES = ("float32", "float64", "float16", "bfloat16", *SIGNED_DTYPES, *UNSIGNED_DTYPES, "bool")
FLOATS = frozenset(FLOAT_DTYPES)
UNSIGNED = frozenset(UNSIGNED_DTYPES)
INTS = frozenset(SIGNED_DTYPES) | UNSIGNED
INDEX_DTYPE = "int64"  # dtype of loop variables, as numpy.arange's default


_NAMES: dict[np.dtype, str] = {}


def name_of(dtype: np.dtype) -> str:
    """A numpy dtype's name ("float32", "bfloat16"), remembered: numpy computes `dtype.name` in Python
    on every read (about 3 us), and the interpreters ask once per operation they evaluate."""
    found = _NAMES.get(dtype)
    if found is None:
        found = _NAMES[dtype] = dtype.name
    return found


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether a numpy dtype is ml_dtypes' bfloat16."""
    return dtype.type is ml_dtypes.bfloat16
# what bfloat16 promotes to beside each dtype: float16's row of numpy's table, and float32 with float16
_WITH_BFLOAT16 = {"bool": "bfloat16", "int8": "bfloat16", "uint8": "bfloat16", "bfloat16": "bfloat16",
                  "int16": "float32", "uint16": "float32", "float16": "float32", "float32": "float32",
                  "int32": "float64", "uint32": "float64", "int64": "float64", "uint64": "float64",
                  "float64": "float64"}


def normalize(dtype: object) -> str:
    """Return the canonical name of a supported dtype, or raise DTypeError."""
    if isinstance(dtype, str) and dtype in DTYPES:  # already canonical: most calls (no numpy lookup)
        return dtype
    try:
        name = np.dtype(dtype).name  # type: ignore[call-overload]
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise DTypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_unsigned(dtype: str) -> bool:
    return dtype in UNSIGNED


def kind(dtype: str) -> str:
    """numpy's kind letter, with bfloat16 as "f" (ml_dtypes reports "V")."""
    return "f" if dtype in FLOATS else np.dtype(dtype).kind


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def float_max(dtype: str) -> float:
    """The largest finite value of a float dtype."""
    return float(ml_dtypes.finfo(dtype).max)


def holds(wide: str, narrow: str) -> bool:
    """Every value of integer dtype `narrow` is a value of integer dtype `wide`."""
    (lo_w, hi_w), (lo_n, hi_n) = int_range(wide), int_range(narrow)
    return lo_w <= lo_n and hi_n <= hi_w


def keeps_index(src: str, dst: str) -> bool:
    """An integer cast that bounds analysis may look through: one that never changes the value, or
    between int32 and int64 (index values are assumed to fit both)."""
    if not (is_int(src) and is_int(dst)):
        return False
    return holds(dst, src) or {src, dst} <= {"int32", "int64"}


def promote(a: str, b: str) -> str:
    """NumPy's promotion of two concrete dtypes, extended to bfloat16 (module docstring)."""
    if a == b:
        return a
    if "bfloat16" in (a, b):
        return _WITH_BFLOAT16[b if a == "bfloat16" else a]
    return np.result_type(a, b).name


def to_float(dtype: str) -> str:
    """The dtype a float-only operation computes in: floats stay, the rest go to float64."""
    return dtype if dtype in FLOATS else "float64"


def scalar_dtype(value: bool | int | float) -> str:
    """Dtype of a Python scalar standing alone (NumPy's defaults)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int64"
    return "float64"


def weak_scalar_dtype(value: bool | int | float, partner: str) -> str:
    """Dtype a Python scalar takes next to an operand of dtype `partner` (NEP 50)."""
    if isinstance(value, bool):
        return partner
    if isinstance(value, int):
        if partner == "bool":
            return "int64"
        if partner in INTS:
            lo, hi = int_range(partner)
            if not lo <= value <= hi:
                raise DTypeError(f"constant {value} does not fit the {partner} operand it meets (range {lo}..{hi}); "
                                 f"cast the operand to a wider dtype first, e.g. pw.cast(x, 'int32')")
        return partner
    return partner if partner in FLOATS else "float64"


def wrap(value: int, dtype: str) -> int:
    """An integer reduced modulo 2**bits into the range of integer dtype `dtype`."""
    lo, hi = int_range(dtype)
    return (value - lo) % (hi - lo + 1) + lo


def _float_to_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """Truncate toward zero, saturate at the range, NaN -> 0: LLVM's fptosi.sat / fptoui.sat."""
    lo, hi = int_range(dtype)
    t = np.trunc(np.asarray(x, dtype=np.float64))  # exact for every float dtype
    low, high = t < lo, t >= float(hi + 1)  # lo and hi + 1 are powers of two: exact as floats
    inside = np.where(low | high | np.isnan(t), 0, t).astype(dtype)
    return np.where(low, np.asarray(lo, dtype), np.where(high, np.asarray(hi, dtype), inside)).astype(dtype)


def cast_array(x: np.ndarray, dtype: str) -> np.ndarray:
    """The exact conversion of an array (or numpy scalar) to `dtype` (module docstring)."""
    x = np.asarray(x)
    src = name_of(x.dtype)
    if src == dtype:
        return x
    if src in FLOATS and dtype in INTS:
        return _float_to_int(x, dtype)
    if dtype == "bfloat16" and src != "float32":
        x = x.astype(np.float32)
    return x.astype(dtype)


def cast_scalar(value: bool | int | float, src: str, dst: str) -> bool | int | float:
    """A constant of dtype `src` converted to `dst` by the rules of `cast_array`, as a Python value."""
    return cast_array(np.asarray(value, dtype=src), dst).item()


def scalar_value(value: bool | int | float, dtype: str) -> bool | int | float:
    """The Python value a constant of `dtype` holds: bool, an int wrapped into range, a float (bfloat16
    rounded to it, so code generators can hold it in float32)."""
    if dtype == "bool":
        return bool(value)
    if dtype in INTS:
        return wrap(int(value), dtype)
    if dtype == "bfloat16":
        return float(np.asarray(np.float32(value)).astype(dtype))
    return float(value)
