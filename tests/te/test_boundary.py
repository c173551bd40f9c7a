"""Boundary conditions: a view any integer index reads, matching numpy.pad's modes exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptowsp as pw

PAD = {"repeat_edge": ("edge", {}), "mirror": ("symmetric", {}), "constant": ("constant", {"constant_values": -2})}


def _view(X, kind):
    return X.boundary("constant", -2.0) if kind == "constant" else X.boundary(kind)


def _padded(a: np.ndarray, kind: str, margin: int) -> np.ndarray:
    mode, extra = PAD[kind]
    return np.pad(a, margin, mode=mode, **extra)


@settings(max_examples=40)
@given(kind=st.sampled_from(list(PAD)), rows=st.integers(1, 5), cols=st.integers(1, 5),
       dy=st.integers(-12, 12), dx=st.integers(-12, 12))
def test_a_shifted_read_matches_numpy_pad(kind, rows, cols, dy, dx):
    wl = pw.Workload("shift")
    X = wl.input("X", (rows, cols))
    E = _view(X, kind)
    wl.output(wl.compute("Y", (rows, cols), lambda y, x: E[y + dy, x + dx]))
    a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    m = 13
    want = _padded(a, kind, m)[m + dy:m + dy + rows, m + dx:m + dx + cols]
    np.testing.assert_array_equal(pw.reference(wl, X=a)["Y"], want)


@pytest.mark.parametrize("kind", list(PAD))
@pytest.mark.parametrize("target", ["cpu", "aicore"])
def test_a_blur_over_a_view_is_exact_on_compiled_targets(kind, target):
    wl = pw.Workload("blur")
    X = wl.input("X", (12, 20))
    E = _view(X, kind)
    wl.output(wl.compute("Y", (12, 20), lambda y, x: (E[y - 1, x - 2] + E[y, x] + E[y + 1, x + 2]) / 3.0))
    s = wl.schedule().split("Y", "y", 4).parallel("Y", "y.outer").split("Y", "x", 8).vectorize("Y", "x.inner")
    a = np.random.default_rng(0).standard_normal((12, 20)).astype(np.float32)
    P = _padded(a, kind, 2)
    want = (P[1:13, 0:20] + P[2:14, 2:22] + P[3:15, 4:24]) / 3.0
    np.testing.assert_allclose(pw.build(s, target=target).run(X=a)["Y"], want, rtol=1e-6)


def test_a_view_with_symbolic_sizes():
    wl = pw.Workload("rows")
    X = wl.input("X", ("n",))
    E = X.boundary("mirror")
    wl.output(wl.compute("Y", ("n",), lambda i: E[i - 3] + E[i + 3]))
    a = np.arange(5, dtype=np.float32)
    P = np.pad(a, 3, mode="symmetric")
    np.testing.assert_array_equal(pw.build(wl, target="cpu").run(X=a)["Y"], P[0:5] + P[6:11])


@pytest.mark.parametrize("make, error, message", [
    (lambda X: X.boundary("wrap"), pw.ShapeError, "the boundary conditions are repeat_edge, constant, mirror"),
    (lambda X: X.boundary("constant"), pw.ShapeError, "give the value read outside"),
    (lambda X: X.boundary("mirror", 0), pw.ShapeError, "takes no value"),
    (lambda X: X.boundary("repeat_edge")[0], pw.ShapeError, "2 dimension.*1 index"),
    (lambda X: X.boundary("constant", X), pw.DTypeError, "the value is a scalar"),
])
def test_misuse_is_refused(make, error, message):
    X = pw.Workload("w").input("X", (3, 4))
    with pytest.raises(error, match=message):
        make(X)


@pytest.mark.parametrize("shape", [(64, 64), ("n", 64)])
def test_a_tile_of_a_stencil_over_a_view_reads_its_halo_not_the_whole_tensor(shape):
    wl = pw.Workload("halo")
    X = wl.input("X", shape)
    E = X.boundary("repeat_edge")
    wl.output(wl.compute("Y", shape, lambda y, x: E[y - 1, x] + E[y + 1, x + 70]))
    s = wl.schedule().split("Y", "y", 16).parallel("Y", "y.outer")
    prog = pw.build(s, target="cpu")
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_array_equal(prog.run(X=a)["Y"], pw.reference(wl, X=a)["Y"])
    for inst in prog._executable.table_for({"n": 64} if shape[0] == "n" else {}).instances:
        (rows, cols), = [box for name, box in inst.reads if name == "X"]
        first = 16 * inst.coords[0]
        assert rows[0] <= max(first - 1, 0) and rows[1] >= min(first + 17, 64) and rows[1] - rows[0] <= 18
        assert cols == (0, 64)
