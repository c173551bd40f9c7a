"""te/indices.py: an unflattened index pair read as the one index it addresses."""

from __future__ import annotations

from ptowsp.te import Expr, Op
from ptowsp.te.indices import collapsed


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
