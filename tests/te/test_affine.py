"""te/affine.py: the one affine reading of index expressions every pass shares."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ptowsp.te import Expr, Op, cast, const, substitute
from ptowsp.te.affine import EVERYTHING, LOOPS, Affine, affine, atom, in_loops, loops_named
from ptowsp.te.bounds import shift_of
from tests.te.scalar_eval import scalar_eval


def _var(name: str, extent: int = 8) -> Expr:
    return Expr(Op.VAR, "int64", (), (name, extent))


def _size(name: str) -> Expr:
    return Expr(Op.SIZE, "int64", (), name)


I, J, N = _var("i"), _var("j"), _size("n")


def test_loops_constants_and_the_rest():
    form = affine(I * 4 + 3 - J + N * 2)
    assert form is not None and form.coefs == {"i": 4, "j": -1} and form.offset == 3
    assert str(form.rest) == str(N * 2)  # free of every loop: kept whole
    assert affine(-(I * 2)).coefs == {"i": -2}
    assert affine(const(3, "int64") * I).coefs == {"i": 3}  # a constant on either side


def test_a_loop_entering_non_linearly_gives_none():
    assert affine(I * J) is None
    assert affine(I // 2) is None
    assert affine(I * N) is None  # a symbolic scale is not a constant


def test_one_cast_rule_index_casts_are_read_through_others_stop():
    assert affine(cast(cast(I, "int32") + 1, "int64")).coefs == {"i": 1}
    assert affine(cast(I, "int8")) is None  # may wrap: not an index-keeping cast
    assert affine(cast(I, "float32")) is None


def test_only_the_moving_loops_are_terms():
    form = affine(I * 2 + J * 3, loops_named("j"))
    assert form.coefs == {"j": 3} and str(form.rest) == str(I * 2)


def test_in_loops_refuses_anything_but_loops_and_constants():
    assert in_loops(I + J * 2 - 1).coefs == {"i": 1, "j": 2}
    assert in_loops(I + N) is None
    assert in_loops(I % 4) is None


def test_the_caller_reads_what_the_rules_do_not():
    def clamp(n: Expr) -> Affine | None:
        return affine(n.src[0], other=clamp) if n.op is Op.MIN else None

    form = affine(Expr(Op.MIN, "int64", (I + 2, const(9, "int64"))) * 3, other=clamp)
    assert form.coefs == {"i": 3} and form.offset == 6
    assert shift_of(Expr(Op.MAX, "int64", (I - 1, const(0, "int64"))), "i", through_clamps=True) == -1
    assert shift_of(Expr(Op.MAX, "int64", (I - 1, const(0, "int64"))), "i") is None
    assert shift_of(I + 1, "j") is None and shift_of(I * 2, "i") is None


def _rebuilt(form: Affine) -> Expr:
    total = const(form.offset, "int64") if form.rest is None else form.rest + form.offset
    for e, c in form.terms.values():
        total = total + e * c
    return total


_ATOMS = [I, J, N, I // 3, J % 5]


@st.composite
def _indices(draw, depth: int = 3) -> Expr:
    if depth == 0 or draw(st.booleans()):
        pick = draw(st.integers(-1, len(_ATOMS) - 1))
        return const(draw(st.integers(-9, 9)), "int64") if pick < 0 else _ATOMS[pick]
    op = draw(st.sampled_from(["add", "sub", "neg", "mul", "cast"]))
    a = draw(_indices(depth=depth - 1))
    if op == "neg":
        return -a
    if op == "cast":
        return cast(cast(a, "int32"), "int64")
    if op == "mul":
        return a * draw(st.integers(-4, 4))
    b = draw(_indices(depth=depth - 1))
    return a + b if op == "add" else a - b


@settings(max_examples=200, deadline=None)
@given(_indices(), st.integers(0, 7), st.integers(0, 7), st.integers(1, 40))
def test_every_form_has_the_value_of_its_expression(e, i, j, n):
    point = {"i": i, "j": j, "n": n}

    def value(x: Expr) -> int:  # the scalar evaluator knows loops, not sizes: n is bound here
        return int(scalar_eval(substitute(x, lambda m: const(n, "int64") if m.op is Op.SIZE else None), point, {}))

    for moving in (LOOPS, loops_named("i"), EVERYTHING):
        def whole(x: Expr) -> Affine:  # what the rules leave becomes an atom of its own
            return atom(str(x), x)
        form = affine(e, moving, whole)
        assert form is not None
        assert value(_rebuilt(form)) == value(e)
