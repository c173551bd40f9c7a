"""Winograd convolutions F(4x4, 3x3) and F(2x2, 3x3): a graph pass the cpu's default build runs before blocking.

A 3x3 convolution of stride 1 makes 9 multiply-adds per input channel and output element.
Winograd's minimal filtering (Lavin and Gray 2016; TVM's conv2d_winograd) computes an m x m tile
of output from an a x a tile of input (a = m + 2) with a * a products per channel pair, 36 for
F(4x4, 3x3) where the direct sum makes 144 (4x fewer), 16 for F(2x2, 3x3) against 36 (2.25x),
by moving the work into transforms that are linear in the input and the output:

    Y_tile = AT . (sum over c of (G . W[o, c] . GT) * (BT . X_tile[c] . B)) . A

The sum over c is a * a independent matrix products, one per point of the tile, which the
default schedule gives its register tile.  This pass rewrites such a task into (names after
the task `Y`, tiles grouped `rows` tile-rows at a time into `b` blocks):

    Y_pad[n, cb, h, w, cl]           = X[n, cb * L + cl, ..] with zeros around it, out to whole tiles
    Y_rows[b, e, q, w, c]            = sum(BT[e, a] * Y_pad[n, c // L, m * (tile-row) + a, w, c % L], a)
    Y_input[b, e, f, t, c]           = sum(BT[f, a] * Y_rows[b, e, t // TX, m * (t % TX) + a, c], a)
    Y_filter_rows[e, s, c, o]        = sum(G[e, r] * W[o, c, r, s], r)        (both folded when W is constant)
    Y_filter[e, f, ob, c, ol]        = sum(G[f, s] * Y_filter_rows[e, s, c, ob * P + ol], s)   (panels of P columns)
    Y_product[b, e, f, t, o]         = sum(Y_input[b, e, f, t, c] * Y_filter[e, f, o // P, c, o % P], c)
    Y_columns[b, i, f, t, o]         = sum(AT[i, a] * Y_product[b, a, f, t, o], a)
    Y_blocked[n, ob, y, x, ol]       = sum(AT[x % m, a] * Y_columns[b, y % m, a, t(y, x), ob * L + ol], a)
    Y[n, o, y, x]                    = Y_blocked[n, o // L, y, x, o % L]

Every intermediate has the tile block first: the default schedule computes a block's input
transform inside the product's tasks, where it stays in cache, and the last two match
blocking.py's, so propagation.py carries the blocked layout on and the epilogue fuses as
before.  The transforms are Cook-Toom ones over the points 0, 1, -1 (and 2, -2 for m = 4) and
infinity; in float32, F(4x4, 3x3)'s result differs from the direct sum by a few units in the
fifth significant digit of the output's largest element (docs/winograd.md).

A task is rewritten when blocking.py would block it (`convolution`), its kernel is 3x3 at
stride 1 and dilation 1, the input channels are whole vectors too, and the output is at least
MIN_TILES tiles wide and high, with tiles of 4 where it is large enough, else of 2.  The filter
holds a * a / 9 times the direct one's weights, and each of its elements serves one product per
tile: with fewer tiles the weights' stream costs more than the products save.  ResNet-18 side by
side (docs/winograd.md): F(4x4, 3x3) on its 56x56 and 28x28 stages (14 and 7 tiles a side),
1.10x for the whole model, and F(2x2, 3x3) on the 14x14 stage (7 tiles of 2), 1.02x more; its
14x14 stage by F(4x4, 3x3) (4 tiles, 9.4 MB of filter per convolution) ran the model at 0.97x,
and every stage by F(2x2, 3x3) at 0.95x of F(4x4, 3x3) where it fits.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ptowsp.schedules.passes.blocking import Convolution, convolution
from ptowsp.te import Op, const, reduce_axis, reduce_sum
from ptowsp.te.affine import in_loops
from ptowsp.te.expr import where
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, fresh_name, names_in, plain, rebuild

POINTS = {4: (0, 1, -1, 2, -2), 2: (0, 1, -1)}  # per tile side m, in the order tried; with infinity m + 2 points
KERNEL = 3
MIN_TILES = 7  # output tiles across each side below which the direct convolution is kept
MAX_BLOCK_TILES = 64  # tiles per block: the product's rows; a block's transforms stay in L2
# One more block reads the whole filter once more, from memory at ~5 G floats/s a core, while a
# tile's products take 1/20 of a float's read per filter element at ~100 G multiply-adds/s: a block
# costs about 20 tiles.  ResNet-18's 28x28 and 14x14 stages (7 x 7 tiles; filters of 2.4 and 4.2 MB)
# then take one block of 56 tiles, not two of 28, which read the filter twice.  A filter that fits
# in a core's L2 (CACHED_FILTER_BYTES: 1 MB or more on the x86 hosts we meet) is re-read from there:
# a block costs about FILTER_READ_CACHED tiles (the 56x56 stage: 590 KB, 7 blocks of 28 tiles; in
# 4 blocks of 56 its products took 0.68 against 0.63 core-ms)
FILTER_READ = 20
FILTER_READ_CACHED = 4
CACHED_FILTER_BYTES = 1 << 20


def winograd_convolutions(wl: Workload, lanes: int) -> Workload:
    """`wl` with every 3x3 stride-1 convolution this pass takes computed by Winograd's F(4x4, 3x3) or
    F(2x2, 3x3); `wl` itself when there is none."""
    if lanes < 2 or wl.sizes or any(not plain(wl.task(t)) for t in wl.tasks):
        return wl
    found = {t: c for t in wl.tasks if (c := _eligible(wl, wl.task(t), lanes)) is not None}
    if not found:
        return wl
    taken = names_in(wl)
    names = {}
    for tile in POINTS:  # the transforms, shared by every convolution of one tile size
        for label in ("AT", "G", "BT"):
            names[label, tile] = fresh_name(f"winograd{tile}_{label}", taken)
            taken.add(names[label, tile])
    return rebuild(wl, {t: (lambda out, task, c=c: _winograd(out, task, c, names, lanes)) for t, c in found.items()})


def _eligible(wl: Workload, task: ComputeTask, lanes: int) -> tuple[Convolution, tuple[int, int], int] | None:
    """The convolution's parts, the input's row and column offsets (`y + r - 1`: -1) and the tile
    side when this pass takes `task`."""
    conv = convolution(wl, task, lanes)
    if conv is None or not conv.plain:
        return None
    n, o, y, x = task.loop_names
    weight, act = conv.weight, conv.act
    if weight.arg.shape[2:] != (KERNEL, KERNEL) or act.arg.shape[1] % lanes or task.tensor.shape[1] % lanes:
        return None
    tile = next((m for m in POINTS if all(-(-e // m) >= MIN_TILES for e in task.tensor.shape[2:])), None)
    if tile is None:
        return None
    taps = [i.arg[0] if i.op is Op.RVAR else None for i in weight.src[1:]]
    if None in taps or act.src[1].arg[0] != taps[0]:
        return None  # the weight is not read at [o, c, r, s] with the input's channel c
    offsets = []
    for index, var, tap in ((act.src[2], y, taps[1]), (act.src[3], x, taps[2])):
        found = in_loops(index)
        if found is None or {k: v for k, v in found.coefs.items() if v} != {var: 1, tap: 1}:
            return None  # strided, dilated, or the taps read otherwise
        offsets.append(found.offset)
    return conv, (offsets[0], offsets[1]), tile


def transforms(points: tuple[int, ...] = POINTS[4], kernel: int = KERNEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AT (m x a), G (a x r) and BT (a x a) of the Cook-Toom algorithm F(m, r) over `points` and
    infinity (a = m + r - 1 = len(points) + 1), exact in rationals before rounding to float64."""
    pts = [Fraction(p) for p in points]
    size = len(pts) + 1
    tile = size - kernel + 1

    def product(roots):  # coefficients of prod(z - p), lowest degree first
        coefs = [Fraction(1)]
        for p in roots:
            coefs = [(coefs[k - 1] if k else 0) - p * (coefs[k] if k < len(coefs) else 0) for k in range(len(coefs) + 1)]
        return coefs

    at = [[p ** i for p in pts] + [Fraction(int(i == tile - 1))] for i in range(tile)]
    g, bt = [], []
    for i, p in enumerate(pts):
        others = pts[:i] + pts[i + 1:]
        scale = math.prod((p - q for q in others), start=Fraction(1))
        g.append([p ** k / scale for k in range(kernel)])
        row = product(others)
        bt.append(row + [Fraction(0)] * (size - len(row)))
    g.append([Fraction(int(k == kernel - 1)) for k in range(kernel)])
    bt.append(product(pts)[:size])
    return tuple(np.array([[float(v) for v in row] for row in m]) for m in (at, g, bt))


def _blocks(tiles_y: int, tiles_x: int, filter_bytes: int) -> tuple[int, int]:
    """(tile rows per block, tiles per row padded): each block a whole number of the register tile's
    rows (4; 8 where the waste is no more) and at most MAX_BLOCK_TILES, or one tile row of a wider
    image, at least cost: the tiles computed, padding included, and for each block, which reads
    the whole filter (`filter_bytes`) again, FILTER_READ tiles' worth (FILTER_READ_CACHED where
    the filter stays in L2)."""
    read = FILTER_READ if filter_bytes > CACHED_FILTER_BYTES else FILTER_READ_CACHED

    def cost(shape: tuple[int, int]) -> float:
        rows, row = shape
        blocks = -(-tiles_y // rows)
        return blocks * rows * row * (1.0 if rows * row % 8 == 0 else 1.05) + read * blocks

    shapes = [(rows, row) for row in range(tiles_x, 2 * tiles_x + 1) for rows in (1, 2, 4, 8)
              if rows * row % 4 == 0 and (rows == 1 or rows * row <= MAX_BLOCK_TILES)]
    return min(shapes, key=cost)


def _winograd(out: Workload, task: ComputeTask, found: tuple[Convolution, tuple[int, int], int],
              names: dict[tuple[str, int], str], lanes: int) -> None:
    """The tasks that stand for the convolution `task` in `out` (the module docstring)."""
    conv, (off_y, off_x), tile = found
    name = task.name
    taken = names_in(out)

    def fresh(suffix: str) -> str:
        chosen = fresh_name(f"{name}_{suffix}", taken)
        taken.add(chosen)
        return chosen

    batch, o_count, height, width = task.tensor.shape
    x_in, w_in = out.tensor(conv.act.arg.name), out.tensor(conv.weight.arg.name)
    channels, in_h, in_w = x_in.shape[1:]
    size = tile + KERNEL - 1
    if names["AT", tile] not in out.constants:
        for label, matrix in zip(("AT", "G", "BT"), transforms(POINTS[tile]), strict=True):
            out.constant(names[label, tile], matrix.astype(np.float32))
    at, g, bt = (out.tensor(names[label, tile]) for label in ("AT", "G", "BT"))
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    rows, row = _blocks(tiles_y, tiles_x, size * size * channels * o_count * 4)
    per_image = -(-tiles_y // rows)
    blocks, per_block = batch * per_image, rows * row
    pad_h, pad_w = tile * per_image * rows + KERNEL - 1, tile * row + KERNEL - 1

    def padded(vn, vb, vh, vw, vl):
        sy, sx = vh + off_y, vw + off_x
        inside = (sy >= 0) & (sy < in_h) & (sx >= 0) & (sx < in_w)
        return where(inside, x_in[vn, vb * lanes + vl, sy, sx], const(0.0, "float32"))

    pad = compute_as(out, fresh("pad"), (batch, channels // lanes, pad_h, pad_w, lanes), ("n", "cb", "h", "w", "cl"),
                     padded)

    def rows_of(vb, ve, vq, vw, vc):
        a = reduce_axis(size, "a")
        y = tile * (rows * (vb % per_image) + vq) + a
        return reduce_sum(bt[ve, a] * pad[vb // per_image, vc // lanes, y, vw, vc % lanes], a)

    across = compute_as(out, fresh("rows"), (blocks, size, rows, pad_w, channels), ("b", "e", "q", "w", "c"), rows_of)

    def input_of(vb, ve, vf, vt, vc):
        a = reduce_axis(size, "a")
        return reduce_sum(bt[vf, a] * across[vb, ve, vt // row, tile * (vt % row) + a, vc], a)

    tiles = compute_as(out, fresh("input"), (blocks, size, size, per_block, channels), ("b", "e", "f", "t", "c"),
                       input_of)

    def half_of(ve, vs, vc, vo):  # G . W: the one pass that reads W across its output channels
        r = reduce_axis(KERNEL, "r")
        return reduce_sum(g[ve, r] * w_in[vo, vc, r, vs], r)

    half = compute_as(out, fresh("filter_rows"), (size, KERNEL, channels, o_count), ("e", "s", "c", "o"), half_of)

    # the register tile's columns: one panel.  4 vectors with AVX-512's 32 registers (4 rows x 4
    # vectors, 16 accumulators: 8 loads per 16 multiply-adds where 4 x 2 makes 6 per 8), else 2
    widest = 4 if lanes >= 16 else 2
    panel = next(v * lanes for v in (widest, 2, 1) if o_count % (v * lanes) == 0)

    def filter_of(ve, vf, vj, vc, vl):
        s = reduce_axis(KERNEL, "s")
        return reduce_sum(g[vf, s] * half[ve, s, vc, vj * panel + vl], s)

    filters = compute_as(out, fresh("filter"), (size, size, o_count // panel, channels, panel),
                         ("e", "f", "ob", "c", "ol"), filter_of)

    def product(vb, ve, vf, vt, vo):
        k = reduce_axis(channels, "k")
        return reduce_sum(tiles[vb, ve, vf, vt, k] * filters[ve, vf, vo // panel, k, vo % panel], k)

    products = compute_as(out, fresh("product"), (blocks, size, size, per_block, o_count), ("b", "e", "f", "t", "o"),
                          product)

    def columns_of(vb, vi, vf, vt, vo):
        a = reduce_axis(size, "a")
        return reduce_sum(at[vi, a] * products[vb, a, vf, vt, vo], a)

    columns = compute_as(out, fresh("columns"), (blocks, tile, size, per_block, o_count), ("b", "i", "f", "t", "o"),
                         columns_of)

    def output_of(vn, vb, vy, vx, vl):
        a = reduce_axis(size, "a")
        block = vn * per_image + vy // (tile * rows)
        at_tile = (vy % (tile * rows)) // tile * row + vx // tile
        return reduce_sum(at[vx % tile, a] * columns[block, vy % tile, a, at_tile, vb * lanes + vl], a)

    blocked = compute_as(out, fresh_name(f"{name}_blocked", taken), (batch, o_count // lanes, height, width, lanes),
                         ("n", "ob", "y", "x", "ol"), output_of)
    compute_as(out, name, task.tensor.shape, task.loop_names,
               lambda vn, vo, vy, vx: blocked[vn, vo // lanes, vy, vx, vo % lanes])
