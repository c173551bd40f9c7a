"""The `when` of `Schedule.specialize`, parsed into the expression IR without running any code.

A schedule is data a user may receive from someone else (JSON, tuning
logs), so its conditions are never handed to Python's `eval`.  This parser
accepts a small grammar and nothing else:

    condition := disjunct ("or" disjunct)*
    disjunct  := negation ("and" negation)*
    negation  := "not" negation | sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)*
    sum       := product (("+" | "-") product)*
    product   := unary (("*" | "//" | "%") unary)*
    unary     := ("-" | "+") unary | INTEGER | NAME | NAME "[" sum ("," sum)* "]" | "(" condition ")"

NAME is a loop variable of the task, a size, or an integer input (indexed).
Comparisons chain as in Python (`0 < i < n` is `0 < i and i < n`).  There
is no power operator (`9**9**9` never runs), no call, no attribute.  The
text is at most MAX_LENGTH characters and MAX_DEPTH levels deep, so a
hostile condition costs microseconds; anything else is a ScheduleError that
names the offending token and its position.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from ptowsp.errors import PtowspError, ScheduleError
from ptowsp.te import Expr, Tensor
from ptowsp.te.expr import Op, binary, unary

MAX_LENGTH = 2000
MAX_DEPTH = 64
_INT64 = 2**63

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|<=|>=|==|!=|[-+*%<>()\[\],]))")
_KEYWORDS = {"and", "or", "not"}
_COMPARE = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}
_SUM = {"+": Op.ADD, "-": Op.SUB}
_PRODUCT = {"*": Op.MUL, "//": Op.FLOORDIV, "%": Op.MOD}

Operand = Expr | int | Tensor


def parse_condition(text: str, names: Mapping[str, Expr | Tensor]) -> Expr:
    """`text` as an expression over `names` (loop variables, sizes: Expr; integer inputs: Tensor)."""
    if not isinstance(text, str):
        raise ScheduleError(f"a condition is text such as 'n <= 256', got {type(text).__name__} {text!r:.60}")
    if len(text) > MAX_LENGTH:
        raise ScheduleError(f"a condition is at most {MAX_LENGTH} characters, got {len(text)}")
    return _Parser(text, names).parse()


def parse_index(text: str, names: Mapping[str, Expr]) -> Expr | int:
    """`text` as integer arithmetic over `names` (the grammar's `sum`: + - * // %, no comparison):
    one index of a `transform_layout` map, read back from a saved schedule without `eval`."""
    if not isinstance(text, str) or len(text) > MAX_LENGTH:
        raise ScheduleError(f"an index is text of at most {MAX_LENGTH} characters such as 'c // 8', got {text!r:.60}")
    parser = _Parser(text, names)
    if not parser.tokens:
        raise ScheduleError("an empty index; write one such as 'c // 8'")
    value = parser._sum()
    if parser.at < len(parser.tokens):
        raise parser._error(f"unexpected {parser._peek()!r} after a complete index")
    return value


class _Parser:
    """Recursive descent over the token list; each rule returns an Expr, an int or a Tensor."""

    def __init__(self, text: str, names: Mapping[str, Expr | Tensor]):
        self.text, self.names = text, names
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        position = 0
        while position < len(text):
            found = _TOKEN.match(text, position)
            if found is None or found.end() == position:
                if text[position:].strip() == "":
                    break
                at = position + len(text[position:]) - len(text[position:].lstrip())
                raise self._error(f"unexpected character {text[at]!r}", at)
            kind = found.lastgroup or ""
            self.tokens.append((kind, found.group(kind), found.start(kind)))
            position = found.end()
        self.at = 0
        self.depth = 0

    def parse(self) -> Expr:
        if not self.tokens:
            raise ScheduleError("an empty condition; write one such as 'n <= 256'")
        value = self._condition()
        if self.at < len(self.tokens):
            raise self._error(f"unexpected {self._peek()!r} after a complete condition")
        if not isinstance(value, Expr):
            raise ScheduleError(f"condition {self.text!r} is {_describe(value)}, not a comparison")
        return value

    # -- tokens

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, *accepted: str) -> str | None:
        token = self._peek()
        if token is not None and token in accepted:
            self.at += 1
            return token
        return None

    def _error(self, message: str, position: int | None = None) -> ScheduleError:
        if position is None:
            position = self.tokens[self.at][2] if self.at < len(self.tokens) else len(self.text)
        return ScheduleError(f"condition {self.text!r:.200}: {message} at character {position}")

    def _expect(self, token: str) -> None:
        if self._take(token) is None:
            found = self._peek()
            raise self._error(f"expected {token!r}, found {'the end' if found is None else repr(found)}")

    # -- rules

    def _nested(self, rule: Callable[[], Operand]) -> Operand:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self._error(f"nested more than {MAX_DEPTH} levels deep")
        try:
            return rule()
        finally:
            self.depth -= 1

    def _condition(self) -> Operand:
        value = self._disjunct()
        while self._take("or"):
            value = self._logic(Op.OR, value, self._disjunct(), "or")
        return value

    def _disjunct(self) -> Operand:
        value = self._negation()
        while self._take("and"):
            value = self._logic(Op.AND, value, self._negation(), "and")
        return value

    def _negation(self) -> Operand:
        if self._take("not"):
            operand = self._nested(self._negation)
            if not _is_bool(operand):
                raise self._error(f"'not' needs a comparison, got {_describe(operand)}")
            return unary(Op.NOT, operand)
        left = self._sum()
        result = None
        while (token := self._take(*_COMPARE)) is not None:
            right = self._sum()
            compared = self._apply(_COMPARE[token], left, right, token)
            result = compared if result is None else binary(Op.AND, result, compared)
            left = right
        return left if result is None else result

    def _sum(self) -> Operand:
        value = self._product()
        while (token := self._take(*_SUM)) is not None:
            value = self._apply(_SUM[token], value, self._product(), token)
        return value

    def _product(self) -> Operand:
        value = self._unary()
        while (token := self._take(*_PRODUCT)) is not None:
            value = self._apply(_PRODUCT[token], value, self._unary(), token)
        return value

    def _unary(self) -> Operand:
        if (sign := self._take("-", "+")) is not None:
            operand = self._nested(self._unary)
            return operand if sign == "+" else self._apply(Op.SUB, 0, operand, "-")
        if self.at >= len(self.tokens):
            raise self._error("the condition ends where a value was expected")
        kind, token, position = self.tokens[self.at]
        if kind == "int":
            self.at += 1
            if int(token) >= _INT64:
                raise self._error(f"integer {token[:30]} does not fit in int64", position)
            return int(token)
        if kind == "name" and token not in _KEYWORDS:
            self.at += 1
            return self._name(token, position)
        if self._take("("):
            value = self._nested(self._condition)
            self._expect(")")
            return value
        raise self._error(f"unexpected {token!r} where a value was expected", position)

    def _name(self, name: str, position: int) -> Operand:
        if name not in self.names:
            known = ", ".join(self.names) or "(none)"
            raise self._error(f"unknown name {name!r}; a condition reads {known}", position)
        value = self.names[name]
        if not self._take("["):
            if isinstance(value, Tensor):
                raise self._error(f"input {name!r} is a tensor: read one element, {name}[...]", position)
            return value
        if not isinstance(value, Tensor):
            raise self._error(f"{name!r} is not a tensor and cannot be indexed", position)
        indices = [self._nested(self._sum)]
        while self._take(","):
            indices.append(self._nested(self._sum))
        self._expect("]")
        try:
            return value[tuple(indices)]
        except PtowspError as e:
            raise self._error(f"{name}[...]: {e}", position) from None

    # -- building nodes

    def _apply(self, op: Op, a: Operand, b: Operand, token: str) -> Operand:
        for operand in (a, b):
            if isinstance(operand, Tensor):
                raise self._error(f"{token!r} on the tensor {operand.name!r}; read one element")
        if op in (Op.FLOORDIV, Op.MOD) and isinstance(b, int) and b == 0:
            raise self._error(f"{token!r} by zero")
        if isinstance(a, int) and isinstance(b, int) and op in _INT_FOLD:
            value = _INT_FOLD[op](a, b)
            if not -_INT64 <= value < _INT64:
                raise self._error(f"{a} {token} {b} does not fit in int64")
            return value
        if _is_bool(a) or _is_bool(b):
            raise self._error(f"{token!r} on a comparison; arithmetic and comparisons take integers")
        try:
            return binary(op, a, b)
        except PtowspError as e:
            raise self._error(f"{token!r}: {e}") from None

    def _logic(self, op: Op, a: Operand, b: Operand, token: str) -> Expr:
        for operand in (a, b):
            if not _is_bool(operand):
                raise self._error(f"{token!r} joins comparisons, got {_describe(operand)}")
        return binary(op, a, b)


_INT_FOLD: dict[Op, Callable[[int, int], int]] = {
    Op.ADD: int.__add__, Op.SUB: int.__sub__, Op.MUL: int.__mul__, Op.FLOORDIV: int.__floordiv__, Op.MOD: int.__mod__}


def _is_bool(value: Operand) -> bool:
    return isinstance(value, Expr) and value.dtype == "bool"


def _describe(value: Operand) -> str:
    if isinstance(value, Expr):
        return f"a {value.dtype} value"
    if isinstance(value, Tensor):
        return f"the tensor {value.name!r}"
    return f"the integer {value}"
