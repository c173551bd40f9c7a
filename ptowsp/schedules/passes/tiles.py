"""Register tiles: the default schedule's loops for contractions and vector-wide reductions.

`contraction_tile`: `C[.., i, j] = sum(A[.., i, k] * B[.., k, j], k)` gets rows x (2 vectors) of
accumulators (a B stored in wider panels: its panel's vectors, fewer rows) with k blocked and B's
panel packed per block (`rows_inside_panel` then keeps a task's row tiles inside each panel).
`vector_tile`: a reduction whose last axis is exactly one vector (a channel-blocked convolution,
blocking.py) gets pixels x one vector.  `stream_reduction`: a lone reduction over a non-contiguous
axis (GEMV) streams rows.  Every number is a decision of `choose` (default.py's module docstring).
"""

from __future__ import annotations

import math

import numpy as np

from ptowsp.schedules.loopnest import PARALLEL, SERIAL, VECTORIZED, inner_of, outer_of
from ptowsp.schedules.passes.decisions import Choose, decision
from ptowsp.schedules.schedule import Schedule
from ptowsp.te import Expr, Op, walk
from ptowsp.te.indices import collapsed


ROW_TILES = (1, 2, 4, 6, 8)  # the register tile rows a contraction may take
GUARDED_TILES = 4  # where nothing divides an extent, a guarded last tile needs this many whole ones beside it
REGISTER_ROWS = 4  # rows of a contraction's register tile (x 3 or 2 vectors of columns) with 16 vector registers
WIDE_REGISTER_ROWS = 8  # ... with AVX-512's 32: 16 accumulators, 2 B vectors and a broadcast in flight
K_BLOCK = 256  # reduction block of a contraction: its B panel stays in L1 (with 8 rows too: 128 measured slower)
STRIDED_K_BLOCK = 128  # ... when B is read in place a row apart (1x1 conv 256->64 56^2: 1.07x over 256)
VECTOR_TILE = 12  # accumulators of a blocked convolution's register tile with 16 vector registers (AVX2):
# 12, a weight vector and a broadcast.  ResNet-50 on AVX2 beside onnxruntime on its AVX2 kernels: 49.9 ms
# with 6 (its 1x1 convolutions 1.78x onnxruntime's time), 34.0 with 12, 54.9 with 14 (spills)
WIDE_VECTOR_TILE = 14  # ... with 32 (AVX-512): 14 accumulators; 28 measured 3x slower (spills)
STREAM_UNROLL = 4  # rows of a streamed reduction per pass over its accumulator tile
HOIST_TERMS = 2048  # a blocked convolution's reduction at least this long walks its channel blocks outside the rows
STREAMED_WEIGHT_BYTES = 2 << 20  # weights larger than a core's L2 are prefetched a channel block ahead
GEMM_I8_K = 64  # the longest reduction a tensorized int8 tile hands one gemm_i8 call (unrolled in it)


def tile_vectors(vector_bytes: int) -> tuple[int, ...]:
    """The vectors of columns a contraction's register tile takes by default, the first whose width
    divides the columns: with AVX2's 16 registers 3 (4 rows x 3 vectors: 12 accumulators, 3 B
    vectors and a broadcast; 128 x 768 x 3072 on 2 cores, 225 -> 249 GFLOP/s, onnxruntime's FMA3
    kernel 254), else 2; with AVX-512's 32, 2 (8 rows x 2 vectors: 16 accumulators)."""
    return (2,) if vector_bytes >= 64 else (3, 2)


def rows_and_columns(spatial: list) -> tuple:
    """A contraction's row and column loops (of its two or more spatial loops): the columns last, the
    rows the last loop before them that is longer than 1, so that a batch of one-row products (torch's
    attention projects a (197, 1, 768) sequence-first input so) takes its batch as rows."""
    rows_at = len(spatial) - 2
    while rows_at > 0 and spatial[rows_at].extent == 1:
        rows_at -= 1
    return spatial[rows_at], spatial[-1]


def contraction_tile(s: Schedule, task: str, spatial: list, k, lanes: int, choose: Choose,
                     rows_first: bool = False) -> tuple[str, str] | None:
    """The register-tiled matmul schedule, when the task is one and the tile divides its columns (its
    rows too, unless none does: then the last row tile is guarded).

    Decisions: the tile's rows and vectors of columns, the k block, packing B's panel, and
    whether tiles go row-major or column-major (column-major where there are more columns and
    nothing is computed per block of rows, `rows_first`).
    """
    if len(spatial) < 2 or lanes == 1:
        return None
    i, j = rows_and_columns(spatial)
    body = s.workload.task(task).body
    panels = [n.arg.name for n in walk(body) if n.op is Op.LOAD and panel_operand(n, k.name, j.name, i.name)]
    # B stored as panels already (passes/panels.py): the tile's columns are one panel
    stored_in = {n.arg.name: w for n in walk(body) if n.op is Op.LOAD and (w := _panel_width(n, k.name, j.name))}
    stored = set(stored_in.values())
    rows_fit = [r for r in ROW_TILES if i.extent % r == 0]
    if REGISTER_ROWS not in rows_fit and isinstance(i.extent, int) and \
            i.extent >= GUARDED_TILES * WIDE_REGISTER_ROWS:
        # no tile of rows divides them (ViT's 197 tokens): the last tile is guarded, and lowering runs
        # it apart (lower/partition.py), every other tile unguarded (ViT's MLP 69.5 -> 11.2 ms)
        rows_fit = [r for r in ROW_TILES if r > 1]
    vectors_fit = [v for v in (1, 2, 3, 4) if j.extent % (v * lanes) == 0]
    if not vectors_fit and isinstance(j.extent, int) and j.extent >= GUARDED_TILES * lanes:
        vectors_fit = [1, 2]  # no tile of columns divides them: the last tile is guarded (as rows above)
    if stored:
        (width,) = stored
        vectors_fit = [width // lanes] if width % lanes == 0 and width // lanes in vectors_fit else []
    if not (panels or stored) or REGISTER_ROWS not in rows_fit or not vectors_fit or (2 not in vectors_fit
                                                                                     and not stored):
        return None
    wide = lanes * np.dtype(s.workload.task(task).tensor.dtype).itemsize >= 64 and WIDE_REGISTER_ROWS in rows_fit
    preferred = next((v for v in tile_vectors(lanes * np.dtype(s.workload.task(task).tensor.dtype).itemsize)
                      if v in vectors_fit), 2)
    vectors = choose(decision(task, "tile_vectors"), vectors_fit, vectors_fit[0] if stored else preferred)
    # 16 accumulators with AVX-512's 32 registers (8 with 16): fewer rows for a wider panel
    rows = choose(decision(task, "tile_rows"), rows_fit, WIDE_REGISTER_ROWS if wide and vectors <= 2 else REGISTER_ROWS)
    s.tile(task, {i.name: rows, j.name: vectors * lanes}).split(task, inner_of(j.name), lanes)
    # a panel read through flattened indices (an NCHW image's pixels) is not packed: a copy's region is
    # bounded per dimension; its rows then lie a whole image apart, and fewer of them share L1's sets
    flattened = not all(panel_operand(n, k.name, j.name, i.name, flattened=False)
                        for n in walk(body) if n.op is Op.LOAD and panels and n.arg.name == panels[0])
    divisors = [d for d in range(1, k.extent + 1) if k.extent % d == 0]
    near = {max(d for d in divisors if d <= 2**p) for p in range(4, 12)}  # a divisor near each power of two
    block = choose(decision(task, "k_block"), sorted(near), max(d for d in divisors if d <= (
        STRIDED_K_BLOCK if flattened else K_BLOCK)))
    s.split(task, k.name, block)  # also when it is the whole extent: k.outer is where the panel is packed
    outer = [lp.name for lp in spatial[:-1] if lp is not i]
    tiles = [outer_of(i.name), outer_of(j.name)]
    # column tiles outermost (the task grid splits the columns) where there are more columns than
    # rows: each task then packs its B panels once for all its rows, where row tasks would each pack
    # all of B (128 x 768 x 3072, a BERT layer's: 1.28x; 64 x 4096 x 1024: 1.96x; square: within 3%).
    # Not when `rows_first`: producers computed per block of rows need the rows outermost.
    order = "columns" if j.extent > i.extent and not rows_first else "rows"
    if choose(decision(task, "tile_order"), ("rows", "columns"), order) == "columns":
        tiles.reverse()
    s.reorder(task, *outer, *tiles, outer_of(k.name), inner_of(k.name),
              inner_of(i.name), outer_of(inner_of(j.name)), inner_of(inner_of(j.name)))
    s.unroll(task, inner_of(i.name)).unroll(task, outer_of(inner_of(j.name))).vectorize(task, inner_of(inner_of(j.name)))
    if int8_dot(body) and choose(decision(task, "tensorize"), (None, "gemm_i8"), None):  # the cpu answers where VNNI is
        s.tensorize(task, inner_of(k.name), "gemm_i8")
    panel_loop = outer_of(k.name)
    packable = not stored and not flattened and panels[0] in {t.name for t in s.workload.task(task).inputs}
    if packable and choose(decision(task, "pack_panel"), (True, False), True):
        if _panels_at_build(s, task, panels[0], j.extent):
            # a constant B stored as panels of the tile's columns, packed once when the program is built:
            # each task then streams contiguous panels (a decode step's matrix-vector products read
            # their weights 2.2x faster than through a strided copy per task)
            width = vectors * lanes
            s.transform_layout(panels[0], lambda k, j: (j // width, k, j % width))
        else:
            s.cache_read(task, panels[0], "local", loop=panel_loop)
    # a stored panel's next k block fetched while the row tiles re-read this one: the first row tile
    # would wait on it (BERT's layer: 1.17x, docs/performance.md and its git history)
    if len(stored_in) == 1 and choose(decision(task, "prefetch_panel"), (True, False), True):
        s.prefetch_tensor(task, next(iter(stored_in)), panel_loop)
    return outer_of(i.name), panel_loop


def _panels_at_build(s: Schedule, task: str, tensor: str, columns: int) -> bool:
    """Whether B (`tensor`) can be stored as panels when the program is built: a constant matrix of
    exactly the task's columns, without a layout yet, that no other task reads (its readers would all
    read the panels)."""
    wl = s.workload
    return (tensor in wl.constants and tensor not in s.layouts and set(wl.graph.successors(tensor)) == {task}
            and len(wl.tensor(tensor).shape) == 2 and wl.tensor(tensor).shape[-1] == columns)


def vector_tile(s: Schedule, task: str, spatial: list, reduce: list, lanes: int, choose: Choose,
                registers_of: int | None = None) -> bool:
    """A reduction whose last axis is one vector (a channel-blocked convolution, blocking.py): a
    register tile of `rows` points of the axis before it x that vector, the reductions outside the
    tile (smallest extent first: the taps, then the channels), so each step broadcasts one input
    value per row into a fused multiply-add with one vector of weights.  Decisions: the rows; how
    many vectors of the axis before the rows (the next channel blocks) the tile holds too
    (`tile_blocks`: each broadcast then feeds that many multiply-adds, oneDNN's several output
    channel blocks per register tile); and a block of the widest reduction taken outside the
    others (`reduce_block`, 0: none).  `registers_of`: the lanes of the machine's own vector, where the
    tile's vector is narrower (8-lane channel blocks on AVX-512 still have its 32 registers)."""
    x = spatial[-2]
    if not isinstance(x.extent, int) or any(not isinstance(lp.extent, int) for lp in reduce):
        return False
    vector_bytes = (registers_of or lanes) * np.dtype(s.workload.task(task).tensor.dtype).itemsize
    cap = WIDE_VECTOR_TILE if vector_bytes >= 64 else VECTOR_TILE
    blocked = _channel_blocks(s, task, spatial)
    body = s.workload.task(task).body
    # smallest extent first (the taps, then the channels), but an axis some load reads as its last
    # index (the lanes of a blocked input's channels, propagation.py) innermost: contiguous steps
    last = {load.src[-1].arg[0] for load in _lane_reads(body)}
    order = [lp.name for lp in sorted(reduce, key=lambda lp: (lp.name in last, lp.extent))]
    widest = max(reduce, key=lambda lp: lp.extent)  # the channels: blocked outside the taps
    blocks = [b for b in (8, 16, 32, 64) if b < widest.extent and widest.extent % b == 0]
    # int8 products summed in int32 call gemm_i8 over (rows, the vector, the innermost reduction) where
    # the cpu answers so (VNNI or AVX2): one vector of channels per call, a call per channel block of the tile
    # side by side inside the other reductions (the blocks are not at one stride from each other), and
    # at most GEMM_I8_K of the reduction, which the micro-kernel unrolls
    tensorize = int8_dot(body) and _apart(body, order[-1], x.name) and \
        choose(decision(task, "tensorize"), (None, "gemm_i8"), None)
    # rows that divide the axis, or leave a guarded last tile behind at least two whole ones (lowered
    # apart, lower/partition.py): 7 pixels as 3 + 3 + 1 take 3 x 4 accumulators where 7 x 1 divides
    # (not for a call: its nest is one store, no guard)
    fits = [d for d in range(1, min(x.extent, 2 * cap) + 1) if x.extent % d == 0 or (x.extent // d >= 2
                                                                                    and not tensorize)]
    counts = [b for b in (1, 2, 4) if blocked is not None and blocked.extent % b == 0 and b * min(fits) <= 2 * cap]
    # the default tile: as many accumulators as the registers hold (cap), then the fewest loads per
    # multiply-add, (rows + blocks) / (rows x blocks): each step broadcasts one input per row and
    # loads one weight vector per block.  A short row (ResNet's 7x7 stage) fills the registers with
    # more channel blocks (24.7 -> 23.3 ms); a long one takes 7 rows x 2 blocks rather than 14 x 1
    # (ResNet-18 on AVX-512: 17.24 -> 16.13 ms side by side; 28 accumulators spill)
    tiles = [(r, b) for r in fits for b in counts or [1] if r * b <= cap]
    best_rows, filled = max(tiles, key=lambda t: (_accumulators(x.extent, *t), -(t[0] + t[1]) / (t[0] * t[1]), t[0]))
    several = choose(decision(task, "tile_blocks"), counts or [1], filled)
    rows = choose(decision(task, "tile_rows"), fits, best_rows if several == filled else
                  max(d for d in fits if d * several <= cap or d == 1))
    unrolled = tensorize and order[-1] == widest.name and widest.extent > GEMM_I8_K
    block = choose(decision(task, "reduce_block"), (0, *blocks), max((b for b in blocks if b <= GEMM_I8_K), default=0)
                   if unrolled else 0)
    if block:
        s.split(task, widest.name, block)
        order = [outer_of(widest.name), *(n for n in order if n != widest.name), inner_of(widest.name)]
    if rows < x.extent:
        s.split(task, x.name, rows)
        inner, outer = [outer_of(x.name)], inner_of(x.name)
    else:
        inner, outer = [], x.name
    leading = [lp.name for lp in spatial[:-2]]
    blocks = []
    if several > 1:
        assert blocked is not None
        s.split(task, blocked.name, several)
        leading[leading.index(blocked.name)] = outer_of(blocked.name)
        blocks = [inner_of(blocked.name)]
    if tensorize:  # a call per channel block, inside the other reductions: the blocks share each broadcast
        s.reorder(task, *leading, *inner, *order[:-1], *blocks, order[-1], outer, spatial[-1].name)
    else:
        # blocks outside the rows keep each row's broadcast live across the blocks: where those, the
        # accumulators and a weight vector overflow the registers, the rows go outside and keep the
        # blocks' weight vectors live instead (AVX2's 16 registers, 6 rows x 2 blocks: 4 accumulators
        # spilled in EfficientNet's expansions; B0 6.7 -> 6.1 ms beside onnxruntime's 6.2)
        registers = 32 if vector_bytes >= 64 else 16
        tile = [outer, *blocks] if blocks and rows * (several + 1) + 1 > registers else [*blocks, outer]
        s.reorder(task, *leading, *inner, *order, *tile, spatial[-1].name)
    for loop in blocks:
        s.unroll(task, loop)
    s.unroll(task, outer).vectorize(task, spatial[-1].name)
    if tensorize:
        s.tensorize(task, order[-1], "gemm_i8")
    return True


def _accumulators(extent: int, rows: int, blocks: int) -> float:
    """A tile's accumulators averaged over the tiles of an axis of `extent` (a guarded last tile holds
    fewer), rounded so that near-equal tiles are told apart by their loads."""
    return round(extent * blocks / math.ceil(extent / rows), 1)


def _apart(body: Expr, axis: str, row: str) -> bool:
    """No index of `body` uses both the reduce axis `axis` and the loop `row`: a tensorized call can
    step through them as its k and its m (`x * 2 + s` of a strided 7x7 convolution cannot)."""
    for node in walk(body):
        if node.op is Op.LOAD:
            for index in node.src:
                names = {v.arg[0] for v in walk(index) if v.op in (Op.VAR, Op.RVAR)}
                if axis in names and row in names:
                    return False
    return True


def _channel_blocks(s: Schedule, task: str, spatial: list):
    """The loop over channel blocks of a channel-blocked convolution (`ob` of `Y[n, ob, y, x, ol]`):
    the spatial loop the weights are indexed by, other than the vector's own; None if there is none."""
    body = s.workload.task(task).body
    lane = spatial[-1].name
    for node in walk(body):
        if node.op is Op.LOAD:
            names = [x.arg[0] for x in node.src if x.op is Op.VAR]
            if names and names[-1] == lane:  # the weights: [ob, r, s, c, ol]
                found = [lp for lp in spatial[:-2] if lp.name in names[:-1]]
                if len(found) == 1:
                    return found[0]
    return None


def rows_inside_panel(s: Schedule, task: str, rows: str, panel_loop: str) -> None:
    """Move the row tiles a task instance runs inside the panel loop, so each packed panel of B
    serves all of them (rows in the grid stay outermost)."""
    names = s.loops(task)
    inner = inner_of(rows) if inner_of(rows) in names else rows
    if s.nest(task).loop(inner).annotation != SERIAL:
        return  # the row tiles are the grid
    order = [n for n in names if n != inner]
    order.insert(order.index(panel_loop) + 1, inner)
    s.reorder(task, *order)


def stream_reduction(s: Schedule, task: str, max_tile: int = 4096) -> None:
    """A single reduction the other rules left over a non-contiguous axis (a matrix-vector product
    `y[j] = sum_k x[k] W[k, j]`, column sums): its loop goes just inside the task grid, so each
    step reads a contiguous run of a row for the instance's whole tile of outputs (a local
    accumulator tile of at most `max_tile` elements) instead of walking a column, a page per
    row, once per output vector."""
    loops = s.nest(task).loops
    reduce = [lp for lp in loops if lp.reduce]
    if len(reduce) != 1 or reduce[0].annotation != SERIAL or contiguous(s.workload.task(task).body, reduce[0].name):
        return
    grid = [lp for lp in loops if lp.annotation == PARALLEL]
    inner = [lp for lp in loops if lp.annotation != PARALLEL and not lp.reduce]
    extents = [lp.extent for lp in inner]
    if not inner or not all(isinstance(e, int) for e in extents) or math.prod(extents) > max_tile:
        return
    k = reduce[0]
    if isinstance(k.extent, int) and k.extent % STREAM_UNROLL == 0 and k.extent > STREAM_UNROLL and \
            inner[-1].annotation == VECTORIZED:
        # STREAM_UNROLL rows per pass over the tile: each accumulator vector is loaded and stored once
        # for that many multiply-adds (dense 1x2048->1000: 1.22x; docs/performance.md and its git
        # history)
        s.split(task, k.name, STREAM_UNROLL)
        s.reorder(task, *[lp.name for lp in grid], outer_of(k.name), *[lp.name for lp in inner[:-1]],
                  inner_of(k.name), inner[-1].name)
        s.unroll(task, inner_of(k.name))
        return
    order = [lp.name for lp in (*grid, k, *inner)]
    if order != [lp.name for lp in loops]:
        s.reorder(task, *order)


def channel_block_loop(s: Schedule, task: str) -> str | None:
    """The channel-block reduce loop of a convolution over a blocked input (propagation.py: it
    reads `X[.., c_block, y, x, c_lane]`) whose reduction is long enough for the hoist to pay
    (HOIST_TERMS), or None."""
    reduce = [lp for lp in s.nest(task).loops if lp.reduce]
    if any(not isinstance(lp.extent, int) for lp in reduce) or math.prod(lp.extent for lp in reduce) < HOIST_TERMS:
        return None
    names = {lp.name for lp in reduce}
    blocks = {i.arg[0] for load in _lane_reads(s.workload.task(task).body) for i in load.src[:-1]
              if i.op is Op.RVAR and i.arg[0] in names}
    return next(iter(blocks)) if len(blocks) == 1 else None


def streamed_weights(s: Schedule, task: str, block: str) -> str | None:
    """The weights a hoisted channel-block loop walks (the one operand it indexes besides the blocked
    input's lanes), when they are larger than a core's L2 (STREAMED_WEIGHT_BYTES) and so come from
    memory on every run: what the default prefetches a block ahead."""
    body = s.workload.task(task).body
    lanes = {n.arg.name for n in _lane_reads(body)}
    found = {n.arg for n in walk(body) if n.op is Op.LOAD and n.arg.name not in lanes
             and any(x.op is Op.RVAR and x.arg[0] == block for i in n.src for x in walk(i))}
    if len(found) != 1:
        return None
    (tensor,) = found
    large = math.prod(tensor.shape) * np.dtype(tensor.dtype).itemsize > STREAMED_WEIGHT_BYTES
    return tensor.name if large else None


def _lane_reads(body: Expr) -> list[Expr]:
    """Loads whose last index is a reduce axis alone: the lanes of a blocked input's channels."""
    return [n for n in walk(body) if n.op is Op.LOAD and n.src and n.src[-1].op is Op.RVAR]


def hoist_channel_blocks(s: Schedule, task: str, block: str) -> None:
    """The channel-block loop just inside the task grid, outside the rows: each block's weights (taps
    x 16 channels x the tile's blocks: 18 KB) stay in L1 while every row of the instance uses them,
    instead of all the weights (590 KB in ResNet's last stage) streaming from L2 once per row.
    The output tile is then read and written once per channel block.  ResNet-18 on AVX-512, side
    by side: the 7x7 stage (4608 terms) 6.72 -> 6.00 core-ms, the 14x14 (2304) 5.36 -> 5.19; the
    28x28 (1152) 4.89 -> 5.12 and 56x56 (576) 5.53 -> 5.62 lost, hence HOIST_TERMS."""
    loops = s.nest(task).loops
    grid = [lp.name for lp in loops if lp.annotation == PARALLEL]
    order = [*grid, block, *(lp.name for lp in loops if lp.annotation != PARALLEL and lp.name != block)]
    if order != [lp.name for lp in loops]:
        s.reorder(task, *order)


def int8_dot(body: Expr) -> bool:
    """`sum(int32(A[..]) * int32(B[..]))` with A and B int8: the built-in `gemm_i8`'s pattern."""
    if body.op is not Op.REDUCE or body.arg != "sum" or body.dtype != "int32" or body.src[0].op is not Op.MUL:
        return False
    return all(x.op is Op.CAST and x.src[0].op is Op.LOAD and x.src[0].dtype == "int8" for x in body.src[0].src)


def _panel_width(load: Expr, k: str, j: str) -> int | None:
    """W of a load `P[.., j // W, k, j % W]`: B stored as panels of W columns (passes/panels.py)."""
    if len(load.src) < 3:
        return None
    block, row, lane = load.src[-3:]
    if row.op is not Op.RVAR or row.arg[0] != k or block.op is not Op.FLOORDIV or lane.op is not Op.MOD:
        return None
    widths = {x.src[1].arg for x in (block, lane) if x.src[0].op is Op.VAR and x.src[0].arg[0] == j
              and x.src[1].op is Op.CONST}
    return widths.pop() if len(widths) == 1 and block.src[1].arg == lane.src[1].arg else None


def panel_operand(load: Expr, k: str, j: str, i: str, flattened: bool = True) -> bool:
    """A load `B[.., k, j]`: the contraction's panel operand (its rows k, its contiguous columns j),
    or (`flattened`) `B[.., k, j // m, j % m]` over dimensions (.., m): an NCHW image's pixels as one axis."""
    indices = collapsed(load.arg.shape, load.src)[1] if flattened else load.src
    names = [x.arg[0] if x.op in (Op.VAR, Op.RVAR) else None for x in indices]
    return len(names) >= 2 and names[-2:] == [k, j] and i not in names


def contiguous(body: Expr, axis: str) -> bool:
    """Every load in the body that uses reduce axis `axis` has it as its last, unscaled index."""
    for node in walk(body):
        if node.op is Op.LOAD:
            used = [x for x in node.src if any(v.op is Op.RVAR and v.arg[0] == axis for v in walk(x))]
            if used and (len(used) > 1 or not (node.src[-1].op is Op.RVAR and node.src[-1].arg[0] == axis)):
                return False
    return True
