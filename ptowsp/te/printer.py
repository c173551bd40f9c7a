"""Readable text for expressions: `sum(A[i, k] * B[k, j], k)`.

Parentheses follow Python precedence (`&` and `|` bind tighter than
comparisons, as in Python) and the tree's real shape, so
`a + (b + c)` prints with its parentheses (float addition is not associative).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptowsp.te.fold import fold
from ptowsp.te.opcodes import Op

if TYPE_CHECKING:
    from ptowsp.te.expr import Expr

_INFIX = {
    Op.LT: ("<", 1), Op.LE: ("<=", 1), Op.GT: (">", 1), Op.GE: (">=", 1), Op.EQ: ("==", 1), Op.NE: ("!=", 1),
    Op.OR: ("|", 2), Op.AND: ("&", 3),
    Op.ADD: ("+", 4), Op.SUB: ("-", 4),
    Op.MUL: ("*", 5), Op.DIV: ("/", 5), Op.FLOORDIV: ("//", 5), Op.MOD: ("%", 5),
}
_FUNCTIONS = {
    Op.ABS: "abs", Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt", Op.TANH: "tanh",
    Op.SIGMOID: "sigmoid", Op.ERF: "erf", Op.FLOOR: "floor", Op.CEIL: "ceil", Op.ROUND: "round", Op.POW: "pow",
    Op.MAX: "maximum", Op.MIN: "minimum", Op.WHERE: "where",
}
_UNARY_PREC = 6
_ATOM_PREC = 9


def _precedence(e: Expr) -> int:
    if e.op in _INFIX:
        return _INFIX[e.op][1]
    if e.op in (Op.NEG, Op.NOT) or (e.op is Op.CONST and not isinstance(e.arg, bool) and e.arg < 0):
        return _UNARY_PREC
    return _ATOM_PREC


def to_text(e: Expr) -> str:
    """Render an expression as the text a user would have written."""
    return fold(e, _text)


def _text(e: Expr, parts: tuple[str, ...]) -> str:
    """One node's text from its operands' texts."""
    op = e.op
    if op is Op.CONST:
        return repr(e.arg)
    if op in (Op.VAR, Op.RVAR):
        return e.arg[0]
    if op is Op.SIZE:
        return e.arg
    if op is Op.LOAD:
        return f"{e.arg.name}[{', '.join(parts)}]"
    if op in _INFIX:
        symbol, prec = _INFIX[op]
        left, right = e.src
        left_parens = _precedence(left) < prec or (prec == 1 and _precedence(left) == 1)
        return f"{_wrap(parts[0], left_parens)} {symbol} {_wrap(parts[1], _precedence(right) <= prec)}"
    if op in (Op.NEG, Op.NOT):
        symbol = "-" if op is Op.NEG else "~"
        return f"{symbol}{_wrap(parts[0], _precedence(e.src[0]) < _ATOM_PREC)}"
    if op is Op.CAST:
        return f"{e.arg}({parts[0]})"
    if op is Op.TUPLE:
        return f"({', '.join(parts)})"
    if op is Op.REDUCE:
        return f"{e.arg}({parts[0]}, {', '.join(parts[1:])})"
    return f"{_FUNCTIONS[op]}({', '.join(parts)})"


def _wrap(text: str, parens: bool) -> str:
    return f"({text})" if parens else text
