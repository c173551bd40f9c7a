"""Lowering of several-value reductions (te/reducer.py): all accumulators updated in one loop nest.

Each value of the reduction is its own REDUCE node, but the values share
one src, so the first one the lowering meets builds the whole reduction:
one local accumulator per value, one nest of serial loops over the reduce
axes, and in it one update of every accumulator.  The other values, met
later in the same prelude under the same condition (or any, when it was
built unconditionally), read their accumulators; the axes are walked once.

An update reads every accumulator before any is written: value k's new
value goes to a temporary when a later combine reads accumulator k.

These reductions are never scheduled (schedules.state.schedulable_reduce_axes
leaves their axes out of the nest), so they are not vectorized yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ptowsp.lower.ir import LOCAL, Buffer, For, IfThen, Stmt, Store, block
from ptowsp.schedules.loopnest import SERIAL
from ptowsp.te import Expr, Op, const, walk
from ptowsp.te.reducer import placeholder_names, same_reduction


@dataclass
class _Built:
    prelude: list[Stmt]  # kept, so its id is never reused while the memo lives
    path: Expr | None
    reduction: Expr
    accumulators: tuple[Buffer, ...]


def _covers(built: Expr | None, wanted: Expr | None) -> bool:
    """A reduction built under condition `built` has run wherever `wanted` holds."""
    return built is None or (wanted is not None and built.same_as(wanted))


@dataclass
class SeveralValues:
    """The several-value reductions one task's lowering has built, by prelude and condition."""

    built: list[_Built] = field(default_factory=list)

    def value(self, lw, e: Expr, path: Expr | None, prelude: list[Stmt], locals_: list[Buffer]) -> Expr:
        """Value e.arg.index of e's reduction, computed (with all its values) before use in `prelude`."""
        for b in self.built:
            if b.prelude is prelude and _covers(b.path, path) and same_reduction(b.reduction, e):
                return b.accumulators[e.arg.index][(const(0, "int64"),)]
        accumulators = self._build(lw, e, path, prelude, locals_)
        self.built.append(_Built(prelude, path, e, accumulators))
        return accumulators[e.arg.index][(const(0, "int64"),)]

    @staticmethod
    def _build(lw, e: Expr, path: Expr | None, prelude: list[Stmt], locals_: list[Buffer]) -> tuple[Buffer, ...]:
        kind, (packed, *axes) = e.arg.reducer, e.src
        name = lw.next_local()
        accs = tuple(Buffer(f"{name}v{k}", (1,), d, LOCAL) for k, d in enumerate(kind.dtypes))
        locals_.extend(accs)
        zero = (const(0, "int64"),)
        inner: list[Stmt] = []  # reductions nested in the bodies: computed per element, before the update
        values = tuple(lw.hoist(v, None, inner, locals_) for v in packed.src)
        combined = kind.apply(tuple(a[zero] for a in accs), values)
        read_later = [any(n.op is Op.VAR and n.arg[0] == placeholder_names(k)[0]
                          for c in kind.combines[k + 1:] for n in walk(c)) for k in range(len(accs))]
        first: list[Stmt] = []
        copies: list[Stmt] = []
        for k, (acc, value) in enumerate(zip(accs, combined, strict=True)):
            if read_later[k]:  # a later combine reads the old accumulator: keep the new one aside
                temp = Buffer(f"{name}n{k}", (1,), acc.dtype, LOCAL)
                locals_.append(temp)
                first.append(Store(temp, zero, value))
                copies.append(Store(acc, zero, temp[zero]))
            else:
                first.append(Store(acc, zero, value))
        update: Stmt = block(*inner, *first, *copies)
        for ax in reversed(axes):
            update = For(ax.arg[0], ax.arg[1], SERIAL, update)
        init = block(*(Store(a, zero, i) for a, i in zip(accs, kind.identities, strict=True)))
        stmt = block(init, update)
        prelude.append(stmt if path is None else IfThen(path, stmt))
        return accs
