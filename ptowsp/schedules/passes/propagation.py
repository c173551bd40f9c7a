"""Activations stay in the convolutions' blocked layout: the graph pass after blocking.py on cpu.

blocking.py gives each convolution a blocked output `Y_blocked[n, c // L, y, x, c % L]` and
converts it back to NCHW at once (`Y[n, c, y, x] = Y_blocked[n, c // L, y, x, c % L]`).  The
task after it (a ReLU, a residual add, a max pool, the next convolution's padding) then reads
a vector of x at a stride of L floats: a gather per vector, nine per output of a 3x3 max pool
(ResNet-18: 1.2 core-ms of max pool, 1 of pads, 0.6 of ReLUs).  TVM's AlterOpLayout carries the
layout through such operators instead, converting only where an operator cannot take it.  So
does this pass, for two kinds of task, in graph order:

- **channel-wise**: a task `T[n, c, h, w]` whose every load that uses its channel loop `c` either
  reads a blocked-available tensor at `[.., c, .., ..]` (c its channel, used nowhere else in the
  load) or reads c unchanged in one index (a per-channel parameter `b[c]`).  It is computed
  blocked, `T_blocked[n, cb, h, w, cl]` with c = cb * L + cl, and T becomes its unpacking, so T
  is blocked-available to the tasks after it;
- **channel-reducing**: a task summing over a reduce axis k that indexes a blocked-available
  tensor's channel (a convolution over an activation, or its padding): k is split into kb and
  kl and the load reads the blocked tensor `[.., kb, .., .., kl]`, so the channels the tile
  walks innermost are contiguous.

Unpackings nobody reads any more are dropped: the layout changes once where the network starts
(the image's own convolution) and once where a task that cannot take it reads (the classifier's
flatten).
"""

from __future__ import annotations

from ptowsp.schedules.passes.blocking import channel_block
from ptowsp.te import Expr, Op, substitute, walk
from ptowsp.te.dtypes import INDEX_DTYPE
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, fresh_name, names_in, plain, rebuild, retarget


Blocked = dict[str, tuple[str, int]]  # a blocked-available tensor -> (its blocked source, channels a block)


def propagate_blocking(wl: Workload, lanes: int) -> Workload:
    """`wl` with every task that can take the blocked layout of its channel-blocked inputs computed
    in it (see the module docstring), its channels in blocks of `channel_block(channels, lanes)`;
    `wl` itself when there is none."""
    if lanes < 2 or wl.sizes or any(not plain(wl.task(t)) for t in wl.tasks):
        return wl
    available: Blocked = {t: found for t in wl.tasks if (found := _unpacking(wl.task(t))) is not None}
    if not available:
        return wl
    taken = names_in(wl)
    rewrites = {}
    for name in wl.tasks:
        task = wl.task(name)
        if name in available:
            continue
        if (width := _channel_wise(task, available, lanes)):
            blocked = fresh_name(f"{name}_blocked", taken)
            taken.add(blocked)
            rewrites[name] = lambda out, task, blocked=blocked, width=width: _blocked(
                out, task, blocked, available, width)
            available[name] = (blocked, width)
        elif (axes := _channel_reducing(task, available, lanes)):
            rewrites[name] = lambda out, task, axes=axes: _split(out, task, axes, available)
    if not rewrites:
        return wl
    return _without_dead(rebuild(wl, rewrites))


def _body(task: ComputeTask) -> Expr:
    """The task's body without the clamps a boundary view puts around a loop variable that cannot
    leave the tensor anyway (`min(max(c, 0), C - 1)` with c < C): they hide a plain channel read."""
    def replace(e: Expr) -> Expr | None:
        if e.op is Op.MIN and e.src[1].op is Op.CONST and e.src[0].op is Op.MAX and e.src[0].src[1].op is Op.CONST:
            inner = e.src[0].src[0]
            if inner.op is Op.VAR and e.src[0].src[1].arg == 0 and isinstance(inner.arg[1], int) and \
                    inner.arg[1] - 1 <= e.src[1].arg:
                return inner
        return None

    return substitute(task.body, replace)


def _is_var(e: Expr, name: str, op: Op = Op.VAR) -> bool:
    return e.op is op and e.arg[0] == name


def _unpacking(task: ComputeTask) -> tuple[str, int] | None:
    """(the blocked tensor `task` unpacks, L) when `T[n, c, h, w] = S[n, c // L, h, w, c % L]`, or None."""
    body, names = task.body, task.loop_names
    if body.op is not Op.LOAD or len(body.src) != 5 or len(names) != 4:
        return None
    lanes = body.arg.shape[-1]
    n, c, h, w = names
    lead, div, y, x, mod = body.src
    parts = ((div, Op.FLOORDIV), (mod, Op.MOD))
    if not (_is_var(lead, n) and _is_var(y, h) and _is_var(x, w)) or any(
            e.op is not op or not _is_var(e.src[0], c) or e.src[1].op is not Op.CONST or e.src[1].arg != lanes
            for e, op in parts):
        return None
    return body.arg.name, lanes


def _uses(e: Expr, name: str, op: Op = Op.VAR) -> bool:
    return any(_is_var(x, name, op) for x in walk(e))


def _blocked_read(load: Expr, axis: str, op: Op, available: Blocked, lanes: int) -> bool:
    """`load` reads a tensor blocked by `lanes` channels with `axis` as its channel and nowhere else."""
    return (load.arg.name in available and available[load.arg.name][1] == lanes and len(load.src) == 4
            and _is_var(load.src[1], axis, op) and not any(_uses(i, axis, op) for i in load.src[2:] + load.src[:1]))


def _channel_wise(task: ComputeTask, available: Blocked, lanes: int) -> int | None:
    """The channels a block when `task` is computed in the blocked layout of what it reads, else None."""
    width = channel_block(task.tensor.shape[1], lanes) if len(task.loop_names) == 4 else None
    if width is None:
        return None
    c = task.loop_names[1]
    blocked = 0
    for load in (e for e in walk(_body(task)) if e.op is Op.LOAD):
        if _blocked_read(load, c, Op.VAR, available, width):
            blocked += 1
        elif any(_uses(i, c) and not _is_var(i, c) for i in load.src) or sum(_uses(i, c) for i in load.src) > 1:
            return None  # c transformed, or in several indices: the load would not be contiguous in cl
        elif load.arg.name in available and _uses(load, c):
            return None  # a blocked-available tensor read at c in another dimension, or in other blocks
    return width if blocked else None


def _channel_reducing(task: ComputeTask, available: Blocked, lanes: int) -> tuple[tuple[str, int], ...] | None:
    """The reduce axes whose channel reads go blocked (each split in two), with their channels a block,
    or None.  Not for a 4-D task whose own channels are not whole blocks: its output stays plain, its
    tile runs along the pixels, and a blocked input would put L floats between each pixel's channel."""
    body = _body(task)
    if body.op is not Op.REDUCE or len(task.loop_names) == 4 and channel_block(task.tensor.shape[1], lanes) is None:
        return None
    found = []
    for axis in body.src[1:]:
        name, extent = axis.arg
        loads = [e for e in walk(body.src[0]) if e.op is Op.LOAD and _uses(e, name, Op.RVAR)]
        widths = {available[e.arg.name][1] for e in loads if e.arg.name in available}
        if len(widths) == 1 and extent % (width := widths.pop()) == 0 and all(
                _blocked_read(e, name, Op.RVAR, available, width) for e in loads if e.arg.name in available):
            found.append((name, width))
    return tuple(found) or None


def _axis(name: str, extent: int, op: Op) -> Expr:
    return Expr(op, INDEX_DTYPE, (), (name, extent))


def _blocked(out: Workload, task: ComputeTask, blocked_name: str, available: Blocked, lanes: int) -> None:
    """`task` computed in the blocked layout as `blocked_name`, and `task` as its unpacking."""
    n, c, h, w = task.loop_names
    taken = {*task.loop_names, *(e.arg[0] for e in walk(task.body) if e.op in (Op.VAR, Op.RVAR))}
    cb, cl = fresh_name(f"{c}_block", taken), fresh_name(f"{c}_lane", taken)
    shape = task.tensor.shape
    blocked_shape = (shape[0], shape[1] // lanes, shape[2], shape[3], lanes)
    packed = _packed_parameters(out, task, c, lanes)

    def body(vn, vb, vh, vw, vl):
        channel = vb * lanes + vl

        def replace(e: Expr) -> Expr | None:
            if e.op is Op.LOAD and _blocked_read(e, c, Op.VAR, available, lanes):
                lead, _, y, x = (retarget(out, i) for i in e.src)
                return out.tensor(available[e.arg.name][0])[lead, vb, y, x, vl]
            if e.op is Op.LOAD and e.arg.name in packed:
                return out.tensor(packed[e.arg.name])[(vb, *(retarget(out, i) for i in e.src[1:]), vl)]
            if _is_var(e, c):
                return channel
            if e.op is Op.LOAD:
                return Expr(Op.LOAD, e.dtype, tuple(substitute(i, replace) for i in e.src), out.tensor(e.arg.name))
            return None

        return substitute(_body(task), replace)

    result = compute_as(out, blocked_name, blocked_shape, (n, cb, h, w, cl), body)
    compute_as(out, task.name, shape, task.loop_names,
               lambda vn, vc, vh, vw: result[vn, vc // lanes, vh, vw, vc % lanes])


def _packed_parameters(out: Workload, task: ComputeTask, c: str, lanes: int) -> dict[str, str]:
    """The constants `task` reads at its channel `c` in their first dimension and at other indices in the
    rest (a depthwise convolution's weights `W[c, 0, r, s]`), each packed as `W_lanes[cb, .., cl]` (a task
    the default folds) so that a blocked tile reads a vector of them, not a gather 9 floats apart."""
    packed: dict[str, str] = {}
    constants = set(out.constants)  # (a copy each time it is asked for)
    for load in walk(_body(task)):
        if load.op is not Op.LOAD or not load.src or load.arg.name not in constants or load.arg.name in packed:
            continue
        first, *rest = load.src
        if rest and _is_var(first, c) and not any(_uses(i, c) for i in rest) and load.arg.shape[0] % lanes == 0:
            source = out.tensor(load.arg.name)
            name = packed[load.arg.name] = fresh_name(f"{load.arg.name}_lanes", names_in(out))
            dims = [f"d{k}" for k in range(len(rest))]
            compute_as(out, name, (source.shape[0] // lanes, *source.shape[1:], lanes), ("b", *dims, "l"),
                       lambda vb, *more: source[(vb * lanes + more[-1], *more[:-1])])
    return packed


def _split(out: Workload, task: ComputeTask, axes: tuple[tuple[str, int], ...], available: Blocked) -> None:
    """`task` with each reduce axis in `axes` split into blocks and lanes (its channels a block),
    reading blocked tensors."""
    widths = dict(axes)
    reduce = _body(task)
    taken = {*task.loop_names, *(e.arg[0] for e in walk(reduce) if e.op in (Op.VAR, Op.RVAR))}
    split: dict[str, tuple[Expr, Expr]] = {}
    new_axes = []
    for axis in reduce.src[1:]:
        name, extent = axis.arg
        if name in widths:
            block, lane = fresh_name(f"{name}_block", taken), fresh_name(f"{name}_lane", taken)
            taken |= {block, lane}
            split[name] = (_axis(block, extent // widths[name], Op.RVAR), _axis(lane, widths[name], Op.RVAR))
            new_axes += split[name]
        else:
            new_axes.append(axis)

    def replace(e: Expr) -> Expr | None:
        if e.op is Op.LOAD:
            for name, (kb, kl) in split.items():
                if _blocked_read(e, name, Op.RVAR, available, widths[name]):
                    lead, _, y, x = (substitute(i, replace) for i in e.src)
                    return out.tensor(available[e.arg.name][0])[lead, kb, y, x, kl]
            return Expr(Op.LOAD, e.dtype, tuple(substitute(i, replace) for i in e.src), out.tensor(e.arg.name))
        if e.op is Op.RVAR and e.arg[0] in split:
            kb, kl = split[e.arg[0]]
            return kb * widths[e.arg[0]] + kl
        return None

    body = Expr(Op.REDUCE, reduce.dtype, (substitute(reduce.src[0], replace), *new_axes), reduce.arg)
    compute_as(out, task.name, task.tensor.shape, task.loop_names, lambda *_: body)


def _without_dead(wl: Workload) -> Workload:
    """`wl` without the tasks whose tensors nothing reads (unpackings every reader left)."""
    dead: set[str] = set()
    while True:
        read = {t.name for name in wl.tasks if name not in dead for t in wl.task(name).inputs}
        more = {name for name in wl.tasks if name not in dead and name not in read and name not in wl.outputs}
        if not more:
            break
        dead |= more
    return rebuild(wl, {}, drop=dead) if dead else wl
