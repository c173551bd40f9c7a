"""Channel blocking for convolutions (NCHWc): the graph pass the cpu's default build runs first.

A convolution in the user's NCHW layout,

    Y[n, o, y, x] = sum(where(inside, X[n, c, y*st + r*d - p, x*st + s*d - p], 0) * W[o, c, r, s], (c, r, s))

has no axis a vector can run along for both the output and the weights: x is contiguous in Y but
W does not depend on it, o indexes W but is strided everywhere.  TVM's answer (AlterOpLayout
with conv2d_NCHWc) is to block the output channels by the vector width L; this pass rewrites
such a task into four (names after the task):

    Y_pad[n, c, h, w]            = X with the zeros of the padding around H and W (only when guarded)
    Y_weights[ob, r, s, c, ol]   = W[ob * L + ol, c, r, s]            (folded at build time when W is constant)
    Y_blocked[n, ob, y, x, ol]   = sum(Y_pad[n, c, y*st + r*d, x*st + s*d] * Y_weights[ob, r, s, c, ol], (c, r, s))
    Y[n, o, y, x]                = Y_blocked[n, o // L, y, x, o % L]

so the conversions happen only at the boundary: the input is padded once (no guard left in the
inner loop), the weights are packed once, and the output comes back in the user's layout.  The
channels are the weights' second-last axis because the default tile runs them innermost (taps
outside): each step then reads the next 64 bytes, not a line 9 vectors away (ResNet-18's 7x7
stage, 512 channels: 3.6 -> 3.0 ms per conv; the whole model 1.10x with the fuller register
tile of tiles.py).
Y_blocked's last axis is one vector, and the default schedule gives it a register tile of
output pixels x one vector of channels (default.py `_vector_tile`).

The input is read in NCHW here; where it is itself a blocked result, propagation.py (the
pass after this one) carries the blocked layout through the tasks between convolutions.

A task is rewritten only when it is exactly this pattern (a sum of a product; the weight read at
[o, reduce axes...]; the input at [n, reduce axis, affine in y, affine in x], guarded only by
its bounds checks), O is a multiple of L, and the workload is plain compute tasks with static
shapes; anything else is left as written.  Depthwise and grouped convolutions (the input's
channel is the output's) are not blocked here: a depthwise one reads its own channel, so
propagation.py computes it in the layout of the convolution before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptowsp.te import Expr, Op, cast, const, substitute, walk
from ptowsp.te.affine import in_loops
from ptowsp.te.bounds import interval
from ptowsp.te.expr import where
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, fresh_name, plain, rebuild


@dataclass(frozen=True)
class Convolution:
    act: Expr  # the input's load (its indices stripped of boundary-view clamps)
    weight: Expr  # the weight's load W[o, ...]
    pads: tuple[tuple[int, int], ...]  # padding before and after each input dimension (0 where unguarded)
    total: Expr  # the sum itself: the task's body, or a part of it (`epilogue`)
    pad_value: Expr = const(0.0, "float32")  # what a window reads where it hangs over the edge
    widened: bool = False  # act and weight (int8) cast to the sum's dtype (int32) before they multiply
    epilogue: Expr | None = None  # the task's body around the sum (a quantized conv's rescale), if any

    @property
    def plain(self) -> bool:
        """A float32 sum of products padded with zeros, nothing around it: what Winograd and the
        pixels-as-rows 1x1 form take."""
        return not self.widened and self.epilogue is None and self.pad_value.op is Op.CONST \
            and self.pad_value.arg == 0 and self.total.dtype == "float32"


def _rewritable(wl: Workload) -> bool:
    """Static shapes and plain compute tasks only: what this pass copies."""
    return not wl.sizes and all(plain(wl.task(t)) for t in wl.tasks)


def channel_block(channels: int, lanes: int) -> int | None:
    """How many of `channels` go in one block: a vector of `lanes` where that divides them, else half
    of one (a vector of AVX2's width on AVX-512, where there are at least 16 lanes), else none.
    MobileNetV2's 24 and MobileNetV3-Small's 40, 72 and 88 channels are whole 8-lane blocks but not
    16-lane ones: left in NCHW they ran unvectorized (a 14-pixel row is shorter than a vector), and
    their 1x1 convolutions and the unpacking before each were a third of MobileNetV2's time."""
    for width in (lanes, lanes // 2 if lanes >= 16 else 0):
        if width and channels % width == 0:
            return width
    return None


def block_convolutions(wl: Workload, lanes: int) -> Workload:
    """`wl` with every convolution it holds blocked by `channel_block` output channels (for vectors of
    `lanes`); `wl` itself when there is none (or the workload has a task this pass does not copy)."""
    if lanes < 2 or not _rewritable(wl):
        return wl
    found = {t: c for t in wl.tasks if (c := convolution(wl, wl.task(t), lanes)) is not None}
    if not found:
        return wl
    return rebuild(wl, {t: (lambda out, task, c=c: _over_pixels(out, task, c) if _pointwise(wl, task, c, lanes)
                            else _blocked(out, task, c, channel_block(task.tensor.shape[1], lanes)))
                        for t, c in found.items()})


def _pointwise(wl: Workload, task: ComputeTask, conv: Convolution, lanes: int) -> bool:
    """A 1x1 convolution, stride 1, no padding, of an input of the workload (NCHW, and nothing before
    it to carry a blocked layout), whose pixels fill whole register tiles (2 vectors)."""
    n, o, y, x = task.loop_names
    act, extents = conv.act, dict(zip(task.loop_names, task.tensor.shape, strict=True))
    ones = {a.arg[0] for a in task.body.src[1:] if a.arg[1] == 1}
    return conv.plain and act.arg.name in wl.inputs and conv.weight.arg.shape[2:] == (1, 1) and \
        all(p == (0, 0) for p in conv.pads) and _plus_unit(act.src[2], y, ones) and _plus_unit(act.src[3], x, ones) \
        and extents[y] * extents[x] % (2 * lanes) == 0 and extents[o] % 4 == 0


def _plus_unit(index: Expr, var: str, ones: set[str]) -> bool:
    """`index` is the loop variable `var`, plus multiples of reduce axes of extent 1 (a 1x1 kernel's
    taps, always 0) and of 0: `y * 1 + r * 1 - 0` as a user writes a general stride and padding."""
    found = in_loops(index)
    if found is None:
        return False
    terms, constant = found.coefs, found.offset
    return constant == 0 and all(c == 0 or n == var or n in ones for n, c in terms.items()) and \
        {n: c for n, c in terms.items() if c and n not in ones} == {var: 1}


def _over_pixels(out: Workload, task: ComputeTask, conv: Convolution) -> None:
    """The 1x1 convolution as a matmul over the flattened pixels, `Y_pixels[n, o, y * W + x]`, its taps
    and its bounds checks (every read is inside) dropped, and Y as that result read back
    (te/indices.py: the reads stay contiguous)."""
    n, o, y, x = task.loop_names
    height, width = task.tensor.shape[2:]
    body = task.body
    taken = {*task.loop_names, *(a.arg[0] for a in body.src[1:])}
    pixel = fresh_name("p", taken)
    axes = tuple(a for a in body.src[1:] if a.arg[1] != 1)
    ones = {a.arg[0] for a in body.src[1:] if a.arg[1] == 1}

    def product(vn, vo, vp):
        def at(e: Expr) -> Expr | None:
            if _plus_unit(e, y, ones):
                return vp // width
            if _plus_unit(e, x, ones):
                return vp % width
            if e.op is Op.RVAR and e.arg[0] in ones:
                return const(0, "int64")
            if e.op is Op.LOAD:
                return Expr(Op.LOAD, e.dtype, tuple(substitute(i, at) for i in e.src), out.tensor(e.arg.name))
            return None

        return Expr(Op.REDUCE, body.dtype, (substitute(conv.act * conv.weight, at), *axes), body.arg)

    pixels = compute_as(out, fresh_name(f"{task.name}_pixels", set(out.tasks)),
                        (task.tensor.shape[0], task.tensor.shape[1], height * width), (n, o, pixel), product)
    compute_as(out, task.name, task.tensor.shape, task.loop_names, lambda vn, vo, vy, vx: pixels[vn, vo, vy * width + vx])


def convolution(wl: Workload, task, lanes: int) -> Convolution | None:
    """The pattern's parts when `task` is a convolution this pass blocks: a float32 sum of products,
    or an int32 sum of int8 products (`int32(X[..]) * int32(W[..])`, a quantized convolution), alone
    or inside an elementwise epilogue (its rescale), its input padded with any constant."""
    body = task.body
    sums = [e for e in walk(body) if e.op is Op.REDUCE]
    if len(task.loop_names) != 4 or len(sums) != 1 or sums[0].arg != "sum":
        return None
    total = sums[0]
    product = total.src[0]
    if product.op is not Op.MUL or total.dtype not in ("float32", "int32"):
        return None
    n, o = task.loop_names[:2]
    reduce = {a.arg[0] for a in total.src[1:]}
    element = "float32" if total.dtype == "float32" else "int8"
    for weight, act in (product.src, tuple(reversed(product.src))):
        widened = total.dtype == "int32"
        if widened:
            if weight.op is not Op.CAST or act.op is not Op.CAST:
                continue
            weight, act = weight.src[0], act.src[0]
        if weight.op is not Op.LOAD or len(weight.src) != 4 or not _is_var(weight.src[0], o):
            continue
        if any(x.op in (Op.VAR,) for i in weight.src[1:] for x in walk(i)):
            continue  # the weight depends on the output's position, not only on the taps
        guard, pad_value = None, const(0, element)
        if act.op is Op.WHERE and act.src[2].op is Op.CONST:
            guard, pad_value, act = act.src[0], act.src[2], act.src[1]
        if act.op is not Op.LOAD or len(act.src) != 4 or act.dtype != element or weight.dtype != element:
            continue
        indices = tuple(_unclamped(i, e) for i, e in zip(act.src, act.arg.shape, strict=True))
        if not _is_var(indices[0], n) or indices[1].op is not Op.RVAR or indices[1].arg[0] not in reduce:
            continue
        if any(x.op is Op.VAR and x.arg[0] == o for i in indices for x in walk(i)):
            continue  # depthwise or grouped: the input's channel follows the output's
        pads = _pads(guard, indices, act.arg.shape)
        if pads is None or channel_block(task.tensor.shape[1], lanes) is None:
            continue
        return Convolution(Expr(Op.LOAD, act.dtype, indices, act.arg), weight, pads, total, pad_value, widened,
                           None if total is body else body)
    return None


def _is_var(e: Expr, name: str) -> bool:
    return e.op is Op.VAR and e.arg[0] == name


def _unclamped(index: Expr, extent: int) -> Expr:
    """A boundary view's `min(max(i, 0), extent - 1)` as i (the guard around it keeps i inside)."""
    if index.op is Op.MIN and index.src[1].op is Op.CONST and index.src[1].arg == extent - 1:
        inner = index.src[0]
        if inner.op is Op.MAX and inner.src[1].op is Op.CONST and inner.src[1].arg == 0:
            return inner.src[0]
    return index


def _pads(guard: Expr | None, indices: tuple[Expr, ...], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """Zeros needed before and after each dimension so that every read is in the padded tensor;
    None unless `guard` is exactly the bounds checks those reads need (nothing else)."""
    atoms: list[Expr] = []
    stack = [] if guard is None else [guard]
    while stack:
        e = stack.pop()
        if e.op is Op.AND:
            stack.extend(e.src)
        else:
            atoms.append(e)
    checked: set[tuple[int, str]] = set()
    for atom in atoms:
        side = _bound_check(atom, indices, shape)
        if side is None:
            return None
        checked.add(side)
    pads = []
    for d, (index, extent) in enumerate(zip(indices, shape, strict=True)):
        bounds = interval(index)
        if bounds is None:
            return None
        low, high = bounds
        before, after = max(0, -low), max(0, high - (extent - 1))
        if (before and (d, "low") not in checked) or (after and (d, "high") not in checked):
            return None  # a read outside that no guard stops
        pads.append((before, after))
    return tuple(pads)


def _bound_check(atom: Expr, indices: tuple[Expr, ...], shape: tuple[int, ...]) -> tuple[int, str] | None:
    """(dimension, "low" or "high") when `atom` is `index >= 0` or `index < extent` of one dimension."""
    if atom.op not in (Op.GE, Op.LT) or atom.src[1].op is not Op.CONST:
        return None
    for d, (index, extent) in enumerate(zip(indices, shape, strict=True)):
        if atom.src[0].same_as(index):
            if atom.op is Op.GE and atom.src[1].arg == 0:
                return d, "low"
            if atom.op is Op.LT and atom.src[1].arg == extent:
                return d, "high"
    return None


def _blocked(out: Workload, task: ComputeTask, conv: Convolution, lanes: int) -> None:
    """The four tasks that stand for the convolution `task` in `out`."""
    name, total = task.name, conv.total
    n, o, y, x = task.loop_names
    taken = set(task.loop_names) | {a.arg[0] for a in total.src[1:]}
    block, lane = fresh_name(f"{o}_block", taken), fresh_name(f"{o}_lane", taken)
    x_in, w_in = out.tensor(conv.act.arg.name), out.tensor(conv.weight.arg.name)
    read = conv.act.src
    if any(conv.pads[d] != (0, 0) for d in range(4)):
        shape = tuple(e + a + b for e, (a, b) in zip(x_in.shape, conv.pads, strict=True))
        names = tuple(fresh_name(f"d{d}", set()) for d in range(4))

        def padded(*axes):
            inner = [axis - a if a else axis for axis, (a, _) in zip(axes, conv.pads, strict=True)]
            inside = None
            for d, (index, (a, b)) in enumerate(zip(inner, conv.pads, strict=True)):
                for check in ((index >= 0) if a else None, (index < x_in.shape[d]) if b else None):
                    if check is not None:
                        inside = check if inside is None else inside & check
            return where(inside, x_in[tuple(inner)], conv.pad_value)

        source = compute_as(out, fresh_name(f"{name}_pad", set(out.tasks)), shape, names, padded)
        read = tuple(_shifted(i, a) for i, (a, _) in zip(read, conv.pads, strict=True))
    else:
        source = x_in
    o_count = task.tensor.shape[1]
    w_shape = (o_count // lanes, *w_in.shape[2:], w_in.shape[1], lanes)
    w_names = ("ob", "w1", "w2", "w3", "ol")
    weights = compute_as(out, fresh_name(f"{name}_weights", set(out.tasks)), w_shape, w_names,
                       lambda ob, r, s, c, ol: w_in[ob * lanes + ol, c, r, s])
    shape = task.tensor.shape
    blocked_shape = (shape[0], o_count // lanes, shape[2], shape[3], lanes)

    def contraction(vn, vb, vy, vx, vl):  # n, y and x are the task's own variables: `read` uses them as they are
        act = source[read]
        weight = weights[(vb, *conv.weight.src[2:], conv.weight.src[1], vl)]
        if conv.widened:
            act, weight = cast(act, total.dtype), cast(weight, total.dtype)
        return Expr(Op.REDUCE, total.dtype, (act * weight, *total.src[1:]), total.arg)

    result = compute_as(out, fresh_name(f"{name}_blocked", set(out.tasks)), blocked_shape, (n, block, y, x, lane),
                        contraction)
    if conv.epilogue is not None:  # the rescale around the sum, channel by channel in the blocked layout
        result = compute_as(out, fresh_name(f"{name}_rescaled", set(out.tasks)), blocked_shape,
                            (n, block, y, x, lane), lambda vn, vb, vy, vx, vl: _around(
                                out, conv, result[vn, vb, vy, vx, vl], o, vb * lanes + vl))
    compute_as(out, name, shape, task.loop_names, lambda vn, vo, vy, vx: result[vn, vo // lanes, vy, vx, vo % lanes])


def _around(out: Workload, conv: Convolution, total: Expr, channel: str, at: Expr) -> Expr:
    """The epilogue with `total` for its sum and `at` for its output channel, reading `out`'s tensors."""
    def replace(e: Expr) -> Expr | None:
        if e is conv.total:
            return total
        if _is_var(e, channel):
            return at
        if e.op is Op.LOAD:
            return Expr(Op.LOAD, e.dtype, tuple(substitute(i, replace) for i in e.src), out.tensor(e.arg.name))
        return None

    assert conv.epilogue is not None
    return substitute(conv.epilogue, replace)


def _shifted(index: Expr, by: int) -> Expr:
    """`index + by`, folding a constant it ends in (`y + r - 1` moved by 1 is `y + r`)."""
    if by and index.op in (Op.ADD, Op.SUB) and index.src[1].op is Op.CONST and isinstance(index.src[1].arg, int):
        offset = index.src[1].arg if index.op is Op.ADD else -index.src[1].arg
        rest = index.src[0]
        return rest if offset + by == 0 else rest + (offset + by)
    return index + by if by else index

