"""The tasks of a workload: compute tasks (inline tensor expressions) and opaque tasks."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ptowsp.te import Expr, Op, Tensor, const, walk, where
from ptowsp.te.evaluate import evaluate, evaluate_scan


class Category(enum.Enum):
    """TVM's operator patterns, which decide what may fuse with what (DESIGN.md section 4)."""

    INJECTIVE = "injective"  # each output element reads a bounded set of inputs by index maps
    REDUCTION = "reduction"  # reduces over axes the output does not have
    COMPLEX_OUT_FUSABLE = "complex_out_fusable"  # a contraction (matmul, conv) that can absorb an epilogue
    OPAQUE = "opaque"  # arbitrary host code; never fused

    def __repr__(self) -> str:
        return f"Category.{self.name}"


@dataclass(frozen=True)
class Scan:
    """What makes a compute task a scan (workloads/scan.py): its body is `where(axis < steps, init,
    update)` and update reads the task's own tensor at `axis - d`, 1 <= d <= steps."""

    axis: str  # the scan axis: one of the task's loop names, run in order
    steps: int  # the leading steps init defines: the longest delay update reads

    def __str__(self) -> str:
        return f"scan over {self.axis} ({self.steps} initial step{'s' if self.steps > 1 else ''})"


@dataclass(frozen=True)
class ComputeTask:
    """`tensor[axes] = body`: one tensor defined by an expression over its loop variables."""

    name: str
    tensor: Tensor
    axes: tuple[Expr, ...]  # VAR nodes, one per output dimension, outermost first
    body: Expr
    category: Category
    domain: Expr | None = None  # bool over the loop variables: where the task computes (elsewhere: zero)
    scan: Scan | None = None  # set when the task reads its own earlier steps


    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return (self.tensor,)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors the body and the domain read, in first-read order (a scan's reads of its own
        earlier steps are state, not inputs)."""
        seen: dict[str, Tensor] = {}
        for node in walk(self.value):
            if node.op is Op.LOAD and node.arg.name != self.name:
                seen.setdefault(node.arg.name, node.arg)
        return tuple(seen.values())

    @property
    def value(self) -> Expr:
        """What each element holds: the body inside the domain, zero outside (the body is not
        evaluated there, so it may read out of bounds or through indices that hold garbage)."""
        if self.domain is None:
            return self.body
        return where(self.domain, self.body, const(0, self.body.dtype))

    @property
    def loop_names(self) -> tuple[str, ...]:
        return tuple(a.arg[0] for a in self.axes)

    def evaluate(self, arrays) -> np.ndarray:
        """The task's tensor computed with numpy from `arrays` (name -> array): the reference's step."""
        if self.scan is None:
            return evaluate(self.value, self.loop_names, self.tensor.shape, arrays)
        return evaluate_scan(self.value, self.loop_names, self.tensor.shape, arrays, self.name, self.scan.axis,
                             self.scan.steps)

    def __str__(self) -> str:
        text = f"{self.name}[{', '.join(self.loop_names)}] = {self.body}"
        if self.scan is not None:
            text += f"  ({self.scan})"
        return text if self.domain is None else f"{text} where {self.domain}"


@dataclass(frozen=True)
class OpaqueTask:
    """Host code the expression language cannot say (sort, top-k, a library call)."""

    name: str
    fn: Callable[..., object]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def category(self) -> Category:
        return Category.OPAQUE

    def __str__(self) -> str:
        outs = ", ".join(t.name for t in self.outputs)
        fn_name = getattr(self.fn, "__name__", "fn")
        return f"{outs} = opaque {self.name}:{fn_name}({', '.join(t.name for t in self.inputs)})"


Task = ComputeTask | OpaqueTask
