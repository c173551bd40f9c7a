"""The dtypes ptowsp supports and NumPy-style promotion between them.

Python scalars are *weak* (NumPy 2 / NEP 50): `x + 1.0` keeps x's float
dtype, `x + 1` keeps x's integer dtype, and a Python float next to an integer
gives float64.  Concrete dtypes promote with `numpy.result_type`.
"""

from __future__ import annotations

import numpy as np

from ptowsp.errors import DTypeError

DTYPES = ("float32", "float64", "float16", "int32", "int64", "bool")
FLOATS = frozenset({"float16", "float32", "float64"})
INTS = frozenset({"int32", "int64"})
INDEX_DTYPE = "int64"  # dtype of loop variables, as numpy.arange's default


def normalize(dtype: object) -> str:
    """Return the canonical name of a supported dtype, or raise DTypeError."""
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


def promote(a: str, b: str) -> str:
    """NumPy's promotion of two concrete dtypes (always one of DTYPES here)."""
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
            info = np.iinfo(partner)
            if not info.min <= value <= info.max:
                raise DTypeError(f"constant {value} does not fit the {partner} operand it meets")
        return partner
    return partner if partner in FLOATS else "float64"
