"""Loop partitioning and clamps decided by bounds: boundary views read with plain vector loads in
the interior of a row (issue 29, item 4: no guard in the interior of a tile)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower.ir import Buffer, For, IfThen, Store, var, walk_stmts
from ptowsp.lower.partition import partition_loops
from ptowsp.lower.simplify import simplify_expr
from ptowsp.te import Op, const, substitute_vars, walk
from ptowsp.te.sizes import ceil_div, size_var, value

X = Buffer("X", (64,), "float32")


def clamps(stmt) -> int:
    """How many integer max / min nodes the statement's stores hold."""
    return sum(1 for s in walk_stmts(stmt) if isinstance(s, Store)
               for e in (*s.indices, s.value) for n in walk(e) if n.op in (Op.MAX, Op.MIN) and n.dtype == "int64")


def test_a_clamp_the_bounds_decide_is_dropped():
    i = var("i", 8)
    zero, last = const(0, "int64"), const(63, "int64")
    assert simplify_expr(pw.maximum(i + 1, zero)).same_as(i + 1)
    assert simplify_expr(pw.minimum(i * 8 + 7, last)).same_as(i * 8 + 7)
    assert simplify_expr(pw.maximum(i - 1, zero)).op is Op.MAX  # i == 0 clamps


def row(outer: int = 8, lanes: int = 8, shift: int = 1):
    """for o: vectorized for l: Y[o * lanes + l] = X[clamp(o * lanes + l - shift, 0, 63)]"""
    o, lane = var("o", outer), var("l", lanes)
    x = o * lanes + lane
    index = pw.minimum(pw.maximum(x - shift, const(0, "int64")), const(outer * lanes - 1, "int64"))
    y = Buffer("Y", (outer * lanes,), "float32")
    return For("o", outer, "serial", For("l", lanes, "vectorized", Store(y, (x,), X[(index,)])))


def test_the_interior_of_a_row_reads_without_clamps():
    cut = partition_loops(row())
    loops = [s for s in cut.stmts if isinstance(s, For)]
    assert [lp.extent for lp in loops] == [1, 7]  # the first vector clamps; the rest never do
    assert clamps(loops[0]) == 1 and clamps(loops[1]) == 0
    both = partition_loops(row(shift=-1))  # reads x + 1: only the last vector clamps
    assert [lp.extent for lp in both.stmts] == [7, 1] and clamps(both.stmts[0]) == 0
    edges = partition_loops(row(outer=4, lanes=16, shift=-1))  # x + 1 within one vector of each edge
    assert [lp.extent for lp in edges.stmts] == [3, 1]


def test_loops_without_vector_lanes_or_room_stay_whole():
    o, lane = var("o", 8), var("l", 8)
    serial = For("o", 8, "serial", For("l", 8, "serial", Store(Buffer("Y", (64,), "float32"), (o * 8 + lane,),
                                                                 X[(pw.maximum(o * 8 + lane - 1, const(0, "int64")),)])))
    assert partition_loops(serial) is serial  # no vectorized loop inside: nothing gained
    assert partition_loops(row(outer=2, shift=9)).extent == 2  # an interior shorter than 2 iterations: kept
    nonlinear = For("o", 8, "serial", For("l", 8, "vectorized", Store(
        Buffer("Y", (64,), "float32"), (o * 8 + lane,), X[(pw.minimum(o * o + lane, const(63, "int64")),)])))
    assert partition_loops(nonlinear) is nonlinear


@pytest.mark.parametrize("boundary", ["repeat_edge", "mirror", ("constant", 0.5)])
def test_boundary_views_under_vector_schedules_match_the_reference(boundary):
    wl = pw.Workload("edges")
    x = wl.input("X", (6, 100))
    view = x.boundary(*boundary) if isinstance(boundary, tuple) else x.boundary(boundary)
    y = wl.compute("Y", (6, 100), lambda r, c: view[r, c - 2] + view[r, c + 3] * 2.0 + view[r, 99 - c + 1])
    wl.output(y)
    s = wl.schedule().split("Y", "c", 8).vectorize("Y", "c.inner")
    data = np.random.default_rng(0).random((6, 100), dtype=np.float32)
    got = pw.build(s, target="cpu").run(X=data)["Y"]
    np.testing.assert_allclose(got, pw.reference(wl, X=data)["Y"], rtol=1e-6)


def test_the_blur_interior_has_no_clamp_along_x():
    wl = pw.zoo.blur(64, 256)
    s = wl.schedule().split("blur_y", "x", 32).vectorize("blur_y", "x.inner")
    s.split("blur_x", "x", 32).vectorize("blur_x", "x.inner")
    text = pw.build(s, target="cpu").source("blur_x")
    interior = text.split("for x.outer in 0..6:")[1].split("for x.outer")[0]  # 8 vectors: first, 6, last
    assert "maximum" not in interior and "minimum" not in interior


def guarded_tiles(rows: int = 197, tile: int = 8):
    """for o: unrolled for r: if o * tile + r < rows: Y[o * tile + r] = X[..] (a split that does not divide)."""
    outer = -(-rows // tile)
    o, r = var("o", outer), var("r", tile)
    y = Buffer("Y", (rows,), "float32")
    x = Buffer("X", (rows,), "float32")
    return For("o", outer, "serial", For("r", tile, "unrolled",
                                         IfThen(o * tile + r < const(rows, "int64"), Store(y, (o * tile + r,), x[(o * tile + r,)]))))


def guards(stmt) -> int:
    return sum(1 for s in walk_stmts(stmt) if isinstance(s, IfThen))


def test_a_split_s_guard_runs_only_in_the_last_tile():
    """197 rows in tiles of 8: 24 tiles with no guard, then the last one guarded (it stores 5 rows)."""
    cut = partition_loops(guarded_tiles())
    assert [lp.extent for lp in cut.stmts] == [24, 1]
    assert guards(cut.stmts[0]) == 0 and guards(cut.stmts[1]) == 1
    assert partition_loops(guarded_tiles(rows=9)).extent == 2  # one whole tile: not worth a copy


def test_a_guard_that_reads_an_enclosing_loop_is_not_cut_at_its_worst_case():
    """i's guard reads the task grid's loop g: cutting i at g's last value would guard most rows in
    every tile, so i stays whole."""
    g, i = var("g", 4), var("i", 32)
    y = Buffer("Y", (100,), "float32")
    body = For("i", 32, "serial", IfThen(g * 32 + i < const(100, "int64"), Store(y, (g * 32 + i,), X[(i,)])))
    assert partition_loops(body) is body


def test_a_tile_loop_of_symbolic_extent_runs_its_whole_tiles_unguarded():
    """Rows `seq` in tiles of 8: the tiles below seq // 8 run without the guard, the rest (at most one)
    with it, a cut known only at run time; every row stored once at any seq."""
    seq = size_var("seq")
    outer = ceil_div(seq, 8)
    o, r = var("o", outer), var("r", 8)
    y, x = Buffer("Y", (seq,), "float32"), Buffer("X", (seq,), "float32")
    row = o * 8 + r
    loop = For("o", outer, "serial", For("r", 8, "unrolled", IfThen(row < seq, Store(y, (row,), x[(row,)]))))
    whole, tail = partition_loops(loop).stmts
    assert guards(whole) == 0 and guards(tail) == 1
    for n in (1, 7, 8, 9, 16, 130):
        steady, rest = value(whole.extent, {"seq": n}), value(tail.extent, {"seq": n})
        assert (steady, rest) == (n // 8, -(-n // 8) - n // 8)


def test_a_projection_over_symbolic_rows_matches_the_reference_at_every_count():
    """The default schedule over symbolic rows (register tile, packed panel, column grid) at counts the
    tile does and does not divide, and below one tile."""
    wl = pw.Workload("proj")
    x = wl.input("X", ("seq", 64))
    w = wl.input("W", (64, 96))
    k = pw.reduce_axis(64, "k")
    wl.output(wl.compute("Y", ("seq", 96), lambda i, j: pw.sum(x[i, k] * w[k, j], k)))
    prog = pw.build(wl, target="cpu")
    text = prog.source("Y")
    assert "W.local" in text  # B's panel packed although the rows are symbolic
    rng = np.random.default_rng(0)
    weights = rng.random((64, 96), dtype=np.float32)
    for n in (1, 5, 8, 13, 64, 131):
        data = rng.random((n, 64), dtype=np.float32)
        np.testing.assert_allclose(prog.run(X=data, W=weights)["Y"], data @ weights, rtol=1e-5)


def test_a_guard_over_an_enclosing_loop_is_cut_per_instance_at_run_time():
    """A task's block g of 4 row tiles over `seq` rows: the cut depends on g and seq, so it is an
    expression of both; the whole part never runs a row past seq, and the parts cover the block."""
    seq = size_var("seq")
    g, o, r = var("g", 8), var("o", 4), var("r", 8)
    row = g * 32 + o * 8 + r
    y = Buffer("Y", (seq,), "float32")
    loop = For("o", 4, "serial", For("r", 8, "unrolled", IfThen(row < seq, Store(y, (row,), X[(r,)]))))
    whole, tail = partition_loops(loop).stmts
    assert guards(whole) == 0 and guards(tail) == 1
    for n in (1, 8, 30, 32, 41, 200):
        for block in range(3):
            at = {"seq": n}
            steady = value(substitute_vars(whole.extent, {"g": const(block, "int64")}, (Op.VAR,)), at)
            assert steady == 0 or block * 32 + steady * 8 <= n
            assert steady == min(4, max(0, n - block * 32) // 8)
