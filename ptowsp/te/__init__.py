"""Tensor-expression language: the Expr IR, its operations, bounds checks, numpy evaluator."""

from ptowsp.te import dtypes
from ptowsp.te.bounds import check_bounds, loop_vars
from ptowsp.te.evaluate import evaluate
from ptowsp.te.reducer import Reducer, UserReducer, reducer
from ptowsp.te.tensor import Tensor
from ptowsp.te.fold import fold, postorder
from ptowsp.te.expr import Expr, Op, cast, const, lift, outermost_reductions, walk, where
from ptowsp.te.rewrite import Pat, Rules, rewrite, rules, substitute, substitute_vars
from ptowsp.te.ops import (
    absolute, argmax, argmin, ceil, clamp, erf, exp, floor, log, maximum, minimum, power, reduce_axis, reduce_max,
    reduce_min, reduce_sum, round, rsqrt, saturating_cast, sigmoid, sqrt, tanh,
)

__all__ = [
    "Expr", "Op", "Pat", "Reducer", "Rules", "Tensor", "UserReducer", "absolute", "argmax", "argmin", "cast", "ceil",
    "check_bounds", "clamp", "const", "dtypes", "erf", "evaluate", "exp", "floor", "fold", "lift", "log", "loop_vars",
    "maximum", "outermost_reductions", "minimum", "postorder", "power", "reduce_axis", "reduce_max", "reduce_min", "reduce_sum",
    "reducer", "rewrite", "round", "rsqrt", "rules", "saturating_cast", "sigmoid", "sqrt", "substitute",
    "substitute_vars", "tanh", "walk", "where",
]
