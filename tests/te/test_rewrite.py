"""te/rewrite.py: rule lists applied up (to a fixpoint or once) and down (a replacement is final)."""

from __future__ import annotations

import ptowsp as pw
from ptowsp.te import Op, Pat, Rules, rewrite, rules, substitute_vars
from ptowsp.te.expr import const


def _x():
    return pw.reduce_axis(8, "x")


def test_a_pattern_binds_named_operands_and_checks_ops_and_dtypes():
    x = _x()
    seen = []
    times_one = Rules([(Pat.of(Op.MUL, src=(Pat(name="a"), Pat.of(Op.CONST, name="k"))),
                        lambda e, a, k: seen.append(k.arg) or (a if k.arg == 1 else None))])
    assert rewrite(x * 1 + x * 3, times_one) is x + x * 3
    assert sorted(seen) == [1, 3]
    assert rewrite(x * 1, Rules([(Pat.of(Op.MUL, dtype="float32"), lambda e: x)])) is x * 1  # dtype differs


def test_up_reaches_a_fixpoint_and_once_does_not():
    x = _x()
    strip = Rules([(Pat.of(Op.NEG), lambda e: e.src[0])])
    assert rewrite(-(-(-x)), strip) is x  # each result rewritten again
    shift = rules(lambda e: e + 1, Op.RVAR)  # a reduce axis is an RVAR
    assert rewrite(x * 2, shift, fixpoint=False) is (x + 1) * 2  # applied once per node


def test_rules_see_their_operands_rewritten_first():
    x = _x()
    order = []
    rewrite((x + 1) * 2, rules(lambda e: order.append(e.op) and None))
    assert order.index(Op.ADD) < order.index(Op.MUL) and order[0] is Op.RVAR


def test_down_replaces_at_once_without_revisiting():
    x, y = _x(), pw.reduce_axis(8, "y")
    swapped = substitute_vars(x - y, {"x": y, "y": x})  # simultaneous: x - y -> y - x
    assert swapped is y - x
    assert substitute_vars(x, {"x": x + 1}) is x + 1  # a value that reads its variable is final
    assert substitute_vars(x * 2, {}) is x * 2
    assert rewrite(x + const(0, "int64"), rules(lambda e: None)) is x + const(0, "int64")
