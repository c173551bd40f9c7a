"""The operations of the expression IR (`Op`) and their groups: what every pass dispatches on.

Apart from `expr.py` so that what only reads the operation of a node (the printer) needs no
expression machinery; `ptowsp.te.expr` re-exports all of it.
"""

from __future__ import annotations

import enum


class Op(enum.Enum):
    # leaves: CONST arg=value; VAR/RVAR arg=(name, extent) (spatial / reduce loop variable, the extent
    # an int or an expression over sizes); SIZE arg=name (a symbolic size, bound at run time: te/sizes.py)
    CONST = enum.auto()
    VAR = enum.auto()
    RVAR = enum.auto()
    SIZE = enum.auto()
    # memory: LOAD arg=Tensor, src=indices
    LOAD = enum.auto()
    # unary math (operand dtype == result dtype)
    NEG = enum.auto()
    ABS = enum.auto()
    EXP = enum.auto()
    LOG = enum.auto()
    SQRT = enum.auto()
    RSQRT = enum.auto()
    TANH = enum.auto()
    SIGMOID = enum.auto()
    ERF = enum.auto()
    FLOOR = enum.auto()
    CEIL = enum.auto()
    ROUND = enum.auto()  # to the nearest whole number, ties to even (IEEE roundeven, numpy's rint, ONNX Round)
    NOT = enum.auto()
    # binary arithmetic (both operands and result share one dtype)
    ADD = enum.auto()
    SUB = enum.auto()
    MUL = enum.auto()
    DIV = enum.auto()
    FLOORDIV = enum.auto()
    MOD = enum.auto()
    POW = enum.auto()
    MAX = enum.auto()
    MIN = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    # comparisons (operands share one dtype, result bool)
    LT = enum.auto()
    LE = enum.auto()
    GT = enum.auto()
    GE = enum.auto()
    EQ = enum.auto()
    NE = enum.auto()
    # selection and conversion: WHERE src=(cond, then, else); CAST arg=dtype
    WHERE = enum.auto()
    CAST = enum.auto()
    # reduction: REDUCE arg="sum"|"max"|"min"|"argmax"|"argmin"|UserReducer|Component, src=(body, *RVAR
    # axes); the arg kinds have dtype int64 (the flat row-major index over the axes of the first extreme),
    # a Component (one value of a several-value reducer, te/reducer.py) its value's, the others body's
    REDUCE = enum.auto()
    # TUPLE src=values: only as the body of a several-value REDUCE; its dtype is its first value's
    TUPLE = enum.auto()


UNARY_FLOAT_OPS = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.TANH, Op.SIGMOID, Op.ERF})
ARITH_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.POW, Op.MAX, Op.MIN})
LOGIC_OPS = frozenset({Op.AND, Op.OR})
COMPARE_OPS = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE})
BINARY_OPS = ARITH_OPS | LOGIC_OPS | COMPARE_OPS
REDUCE_KINDS = ("sum", "max", "min", "argmax", "argmin")
ARG_KINDS = ("argmax", "argmin")
