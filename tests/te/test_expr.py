"""The expression IR: construction, dtype promotion, printing, identity, misuse."""

from __future__ import annotations

import pytest

import ptowsp as pw
from ptowsp.te import Expr, Op, Tensor


@pytest.fixture
def env():
    wl = pw.Workload("t")
    a = wl.input("A", (4, 5))
    b = wl.input("B", (5, 3))
    n = wl.input("N", (4,), "int32")
    h = wl.input("H", (4,), "float16")
    i = Expr(Op.VAR, "int64", (), ("i", 4))
    j = Expr(Op.VAR, "int64", (), ("j", 3))
    return wl, a, b, n, h, i, j


def test_matmul_prints_as_written(env):
    _, a, b, _, _, i, j = env
    k = pw.reduce_axis(5, "k")
    assert str(pw.sum(a[i, k] * b[k, j], axis=k)) == "sum(A[i, k] * B[k, j], k)"


def test_printing_keeps_precedence_and_tree_shape(env):
    _, a, b, _, _, i, j = env
    assert str(a[i + 1, 2 * j] - (a[i, 0] - 1.0)) == "A[i + 1, 2 * j] - (A[i, 0] - 1.0)"
    assert str(pw.where((i > 0) & (j < 2), a[i - 1, j], 0.0)) == "where((i > 0) & (j < 2), A[i - 1, j], 0.0)"
    assert str(-(a[i, j] + 1.0) * 2.0) == "-(A[i, j] + 1.0) * 2.0"
    r, s = pw.reduce_axis(2, "r"), pw.reduce_axis(3, "s")
    assert str(pw.max(a[i, r + s], (r, s))) == "max(A[i, r + s], r, s)"


@pytest.mark.parametrize(
    "build, dtype",
    [
        (lambda a, n, h, i: a[i, 0] + 1.0, "float32"),  # weak Python float keeps float32
        (lambda a, n, h, i: a[i, 0] + 1, "float32"),
        (lambda a, n, h, i: n[i] + 1, "int32"),  # weak Python int keeps int32
        (lambda a, n, h, i: n[i] + 1.5, "float64"),  # Python float next to an int: float64
        (lambda a, n, h, i: n[i] * a[i, 0], "float64"),  # numpy: int32 * float32 -> float64
        (lambda a, n, h, i: h[i] * a[i, 0], "float32"),
        (lambda a, n, h, i: n[i] / n[i], "float64"),  # true division of integers
        (lambda a, n, h, i: n[i] // 2, "int32"),
        (lambda a, n, h, i: pw.exp(n[i]), "float64"),
        (lambda a, n, h, i: pw.exp(h[i]), "float16"),
        (lambda a, n, h, i: pw.pow(n[i], 2), "float64"),
        (lambda a, n, h, i: pw.floor(n[i]), "int32"),
        (lambda a, n, h, i: a[i, 0] < 1.0, "bool"),
        (lambda a, n, h, i: i + 1, "int64"),
        (lambda a, n, h, i: pw.cast(a[i, 0], "int32"), "int32"),
        (lambda a, n, h, i: pw.where(a[i, 0] > 0, n[i], 0), "int32"),
    ],
)
def test_numpy_style_promotion(env, build, dtype):
    _, a, _, n, h, i, _ = env
    assert build(a, n, h, i).dtype == dtype


def test_binary_operands_share_one_dtype(env):
    _, a, _, n, _, i, _ = env
    e = n[i] * a[i, 0]
    assert [s.dtype for s in e.src] == ["float64", "float64"]
    assert str(e) == "float64(N[i]) * float64(A[i, 0])"


def test_expressions_are_hash_consed(env):
    _, a, b, _, _, i, j = env
    k = pw.reduce_axis(5, "k")
    e1 = pw.sum(a[i, k] * b[k, j], k)
    e2 = pw.sum(a[i, k] * b[k, j], k)
    assert e1 is e2 and e1.same_as(e2) and hash(e1) == hash(e2)  # structural equality is identity
    assert {e1: "x"}[e2] == "x"
    assert not e1.same_as(pw.sum(a[i, k] * b[k, j] + 0.0, k))
    assert isinstance(e1 == e2, Expr) and (e1 == e2).op is Op.EQ
    with pytest.raises(AttributeError):
        e1.op = Op.ADD  # frozen


def test_hash_consing_keeps_constants_apart_survives_pickling_and_lets_nodes_go():
    import gc
    import pickle
    import weakref

    from ptowsp.te.expr import const
    assert const(-0.0, "float32") is not const(0.0, "float32")  # different bits, different values
    assert const(float("nan"), "float32") is const(float("nan"), "float32")
    assert const(1, "int32") is not const(1, "int64") and const(1, "int32") is const(1.0, "int32")
    x = pw.reduce_axis(8, "x") * 2 + 1
    assert pickle.loads(pickle.dumps(x)) is x  # an unpickled node is the live one
    probe = weakref.ref(pw.reduce_axis(3, "only_here") + 7)
    gc.collect()
    assert probe() is None  # the table holds nodes weakly


def test_expression_has_no_truth_value(env):
    _, a, _, _, _, i, _ = env
    with pytest.raises(TypeError, match="pw.where"):
        if a[i, 0] > 0:
            pass


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda a, n, i: a[i], pw.ShapeError, "2 dimension"),
        (lambda a, n, i: a[i, 0, 1], pw.ShapeError, "indexed with 3"),
        (lambda a, n, i: a[i, 0:2], pw.ShapeError, "slices"),
        (lambda a, n, i: a[i, 0.5], pw.DTypeError, "index 1"),
        (lambda a, n, i: a[i, a[i, 0]], pw.DTypeError, "float32"),
        (lambda a, n, i: a[i, a[i, 0]], pw.DTypeError, "indices must be integer"),
        (lambda a, n, i: (a[i, 0] > 0) + (a[i, 0] < 1), pw.DTypeError, "two bool"),
        (lambda a, n, i: -(a[i, 0] > 0), pw.DTypeError, "negate"),
        (lambda a, n, i: a[i, 0] & a[i, 0], pw.DTypeError, "bool or integer"),
        (lambda a, n, i: ~a[i, 0], pw.DTypeError, "bool or integer"),
        (lambda a, n, i: pw.where(a[i, 0], 1.0, 0.0), pw.DTypeError, "bool condition"),
        (lambda a, n, i: pw.sum(a[i, 0] > 0, pw.reduce_axis(3, "r")), pw.DTypeError, "cast"),
        (lambda a, n, i: pw.sum(a[i, 0], i), pw.WorkloadError, "not a reduce axis"),
        (lambda a, n, i: pw.sum(a[i, 0], []), pw.WorkloadError, "at least one"),
        (lambda a, n, i: n[i] + 2**40, pw.DTypeError, "does not fit the int32"),
        (lambda a, n, i: pw.cast(a[i, 0], "complex64"), pw.DTypeError, "unsupported dtype"),
        (lambda a, n, i: a + 1, pw.ShapeError, "without indices"),
        (lambda a, n, i: pw.exp(a), pw.ShapeError, "without indices"),
        (lambda a, n, i: pw.reduce_axis(-1, "r"), pw.ShapeError, ">= 0"),
    ],
)
def test_misuse_raises_typed_errors(env, build, error, match):
    _, a, _, n, _, i, _ = env
    with pytest.raises(error, match=match):
        build(a, n, i)


def test_duplicate_axis_in_one_reduction(env):
    _, a, _, _, _, i, _ = env
    r1, r2 = pw.reduce_axis(2, "r"), pw.reduce_axis(3, "r")
    with pytest.raises(pw.WorkloadError, match="twice"):
        pw.sum(a[i, r1 + r2], (r1, r2))


def test_tensor_is_a_plain_value():
    t = Tensor("A", (2, 3), "float32")
    assert t.ndim == 2 and t.size == 6 and str(t) == "A"
