"""A scalar interpreter for the loop-nest IR: the definition of what lowered code means.

It runs a Program one statement at a time with numpy scalars, checking every
index against its buffer, so a lowering bug shows up as a wrong number or an
out-of-bounds access here rather than as a crash in generated code.  It is
slow by design and used by tests on small workloads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import numpy as np

from ptowsp.errors import TaskError
from ptowsp.lower.ir import Tensorized, Allocate, Barrier, Block, For, IfThen, Let, Prefetch, Stmt, Store
from ptowsp.lower.program import Program
from ptowsp.te import Expr, Op, const, substitute_vars
from ptowsp.te.evaluate import Domain, Evaluator
from ptowsp.workloads.inputs import validate_inputs
from ptowsp.workloads.reference import run_opaque


class _CheckedEvaluator(Evaluator):
    """The numpy evaluator at one point, refusing out-of-bounds reads on the chosen side."""

    def _load(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> np.ndarray:
        indices = [np.asarray(self.run(i, dom, mask)) for i in e.src]
        live = True if mask is None else bool(np.asarray(mask).all())
        shape = self.arrays[e.arg.name].shape
        if live:
            for dim, (index, size) in enumerate(zip(indices, shape, strict=True)):
                if not 0 <= int(index.reshape(-1)[0]) < size:
                    raise TaskError(f"read of {e.arg.name} dimension {dim} at {int(index.reshape(-1)[0])} "
                                    f"(size {size}) in {e}")
        return super()._load(e, dom, mask)


class Interpreter:
    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.evaluator = _CheckedEvaluator(arrays)
        self.lets: dict[str, Expr] = {}  # the values of the enclosing lets, as constants

    def value(self, e: Expr, env: Mapping[str, int]):
        if self.lets:
            e = substitute_vars(e, self.lets, (Op.VAR,))  # a let's name (%k) is no loop's
        dom = Domain(tuple(env), tuple((v, v + 1) for v in env.values()))
        with np.errstate(all="ignore"):
            return np.asarray(self.evaluator.run(e, dom)).reshape(-1)[0]

    def run(self, s: Stmt, env: dict[str, int]) -> None:
        if isinstance(s, Block):
            for c in s.stmts:
                self.run(c, env)
        elif isinstance(s, For):
            for v in range(s.extent):
                self.run(s.body, {**env, s.var: v})
        elif isinstance(s, IfThen):
            if bool(self.value(s.cond, env)):
                self.run(s.then, env)
        elif isinstance(s, Allocate):
            outer = self.arrays.get(s.buffer.name)  # a local buffer shadows a tensor of its name
            self.arrays[s.buffer.name] = np.zeros(s.buffer.shape, s.buffer.dtype)
            self.run(s.body, env)
            del self.arrays[s.buffer.name]
            if outer is not None:
                self.arrays[s.buffer.name] = outer
        elif isinstance(s, Let):
            with self.bound(s, env):
                self.run(s.body, env)
        elif isinstance(s, Tensorized):  # the loops the call stands for compute its values
            self.run(s.body, env)
        elif isinstance(s, Store):
            target = self.arrays[s.buffer.name]
            index = tuple(int(self.value(i, env)) for i in s.indices)
            if any(not 0 <= i < n for i, n in zip(index, target.shape, strict=True)):
                raise TaskError(f"store to {s.buffer.name}{list(index)} outside shape {target.shape}")
            target[index] = self.value(s.value, env)
        elif not isinstance(s, (Barrier, Prefetch)):  # a prefetch changes no value
            raise TypeError(f"unknown statement {s!r}")

    @contextlib.contextmanager
    def bound(self, s: Let, env: Mapping[str, int]):
        """The let's value, computed here, read by its name inside the block."""
        self.lets[s.var] = const(self.value(s.value, env).item(), s.value.dtype)
        try:
            yield
        finally:
            del self.lets[s.var]


def run_instances(program: Program, inputs: Mapping[str, np.ndarray], fresh, run_kernel) -> dict[str, np.ndarray]:
    """Every task instance in table order: opaque tasks on the host, kernels through
    `run_kernel(task, arrays, grid env)`; each stored tensor starts as `fresh(shape, dtype)`."""
    wl = program.workload
    arrays: dict[str, np.ndarray] = {**program.constants, **validate_inputs(wl, dict(inputs))}
    for name in program.order:
        for t in wl.task(name).outputs:
            arrays[t.name] = fresh(t.shape, t.dtype)
    for task, coords in program.launches():
        kernel = program.kernels.get(task)
        if kernel is None:
            arrays.update(run_opaque(wl.task(task), arrays))  # type: ignore[arg-type]
            continue
        run_kernel(task, arrays, {name: c for (name, _), c in zip(kernel.grid, coords, strict=True)})
    return {name: arrays[name].copy() for name in wl.outputs}


def interpret(program: Program, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    """Run every task instance of the program in table order; return the outputs."""

    def run_kernel(task: str, arrays: dict[str, np.ndarray], env: dict[str, int]) -> None:
        Interpreter(arrays).run(program.kernels[task].body, env)

    return run_instances(program, inputs, np.zeros, run_kernel)
