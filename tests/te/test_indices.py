"""te/indices.py: an unflattened index pair read as the one index it addresses."""

from __future__ import annotations

from ptowsp.te import Expr, Op
import ptowsp as pw
from ptowsp.te.indices import collapsed, unclamped


def _var(name: str, extent: int) -> Expr:
    return Expr(Op.VAR, "int64", (), (name, extent))


def test_a_pair_over_the_inner_dimension_collapses_into_one_index():
    c, p = _var("c", 4), _var("p", 3136)
    shape, indices = collapsed((1, 4, 56, 56), (c * 0, c, p // 56, p % 56))
    assert shape == (1, 4, 3136) and str(indices[2]) == str(p)


def test_what_would_change_the_address_is_kept():
    p = _var("p", 3136)
    assert collapsed((56, 57), (p // 56, p % 56))[0] == (56, 57)  # the inner dimension is not 56 wide
    assert collapsed((56, 56), (p // 56, (p + 1) % 56))[0] == (56, 56)  # not the same e
    assert collapsed((56, 56), (p % 56, p // 56))[0] == (56, 56)  # the wrong way round
    index = Expr(Op.LOAD, "int64", (p,), None)  # an index read from data: clamped per dimension, kept apart
    assert collapsed((56, 56), (index // 56, index % 56))[0] == (56, 56)



def test_unclamped_strips_clamps_against_fixed_bounds_only():
    x, y = _var("x", 112), _var("y", 112)
    core = x - 1
    got = unclamped((y, pw.minimum(pw.maximum(core, 0), 111), pw.maximum(x, y)))
    assert got is not None
    assert got[0] is y and got[1] is core
    assert got[2].op is Op.MAX  # a bound that is itself a loop variable is not a clamp
    assert unclamped((x, y)) is None
