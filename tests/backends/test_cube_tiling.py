"""The aicore default fits the device for any shape: cube tiles (backends/aicore/tiling.py,
schedules/passes/cube.py) and the fitting of everything else (backends/aicore/fitting.py)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.backends.aicore.tiling import CubeTiles
from ptowsp.schedules.passes.cube import CubeTile
from ptowsp.workloads import random_inputs, zoo
from ptowsp.workloads.zoo import layers
from tests.tolerance import assert_sums_close

PRESETS = {name: pw.DeviceModel.preset(name) for name in ("910b", "a5")}


def fits(tile: CubeTile, device: pw.DeviceModel, operand_bytes: int) -> bool:
    return (tile.rows * tile.columns * device.accumulator_bytes <= device.l0c_bytes
            and 2 * tile.rows * tile.k_step * operand_bytes <= device.l0a_bytes
            and 2 * tile.k_step * tile.columns * operand_bytes <= device.l0b_bytes
            and 2 * (tile.rows + tile.columns) * tile.block * operand_bytes <= device.l1_bytes)


def test_a_large_float16_gemm_gets_the_pto_isa_base_tile():
    """The PTO ISA's A3 GEMM: [128, 256, 64], four k steps per L1 load."""
    assert CubeTiles(PRESETS["910b"])(6144, 6144, 6144, 2) == CubeTile(128, 256, 64, 4)


@pytest.mark.parametrize("preset", sorted(PRESETS))
@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 4096), columns=st.integers(1, 4096), depth=st.integers(1, 8192),
       operand_bytes=st.sampled_from([1, 2, 4]))
def test_every_chosen_tile_fits_in_fractals_that_divide_the_shape(preset, rows, columns, depth, operand_bytes):
    device = PRESETS[preset]
    tile = CubeTiles(device)(rows, columns, depth, operand_bytes)
    if tile is None:  # no fractal edge divides an extent: the register tile and the fitting take it
        return
    assert fits(tile, device, operand_bytes)
    for edge, extent in ((tile.rows, rows), (tile.columns, columns), (tile.k_step, depth), (tile.block, depth)):
        assert extent % edge == 0 and (edge % 16 == 0 or edge == extent)


def build_and_check(wl: pw.Workload, device: pw.DeviceModel):
    prog = pw.build(wl, target="aicore", device=device)  # never a BufferOverflow from the default
    inputs = random_inputs(wl)
    out = prog.run(**inputs)
    # no sum in these is longer than an input's side; a transformer block chains a dozen of them
    terms = 16 * max(max(x.shape) for x in inputs.values())
    for name, want in pw.reference(wl, **inputs).items():
        if want.dtype == np.float16:
            np.testing.assert_allclose(out[name].astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=5e-2)
        else:
            assert_sums_close(out[name], want, terms)
    return prog


def test_the_default_matmul_runs_on_cube_tiles_with_double_buffering():
    prog = build_and_check(zoo.matmul(512, 512, 1024, "float16", accumulate="float32"), PRESETS["910b"])
    assert prog.schedule.prefetch_depth == 1
    tile = CubeTiles(PRESETS["910b"])(512, 512, 1024, 2)  # 32 tiles for 24 cube cores: 64 x 128
    assert (tile.rows, tile.columns) == (64, 128)
    assert f'"factors":{{"i":{tile.rows},"j":{tile.columns}}}' in prog.schedule.to_json().replace(" ", "")
    assert {e.core for e in prog.trace.events if e.id >= 0} == {"cube"}


shapes = st.fixed_dictionaries({
    "preset": st.sampled_from(sorted(PRESETS)),
    "kind": st.sampled_from(["matmul", "transformer", "rmsnorm", "mlp"]),
    "a": st.integers(1, 48), "b": st.integers(1, 12), "c": st.sampled_from([1, 2, 3, 4, 6, 8]),
    "wide": st.sampled_from([1, 16, 100, 512, 3000, 20000]),
})


def workload(shape: dict) -> pw.Workload:
    a, b, c, wide = shape["a"], shape["b"], shape["c"], shape["wide"]
    if shape["kind"] == "matmul":  # a deep or wide contraction, float16 or float32
        return zoo.matmul(a * 8, b * 24, wide, "float16" if a % 2 else "float32")
    if shape["kind"] == "transformer":  # any head count and hidden size
        return zoo.transformer_block(seq=a, d_model=c * 8 * b, heads=c, d_ff=wide % 700 + 8)
    if shape["kind"] == "rmsnorm":  # rows longer than UB
        return zoo.rmsnorm(b, wide * 4)
    return zoo.mlp(batch=a, d_in=wide, d_hidden=b * 40, d_out=c * 10)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes)
def test_the_default_builds_for_any_shape_on_every_preset(shape):
    build_and_check(workload(shape), PRESETS[shape["preset"]])


def test_two_contractions_inside_one_product_are_fitted_one_by_one():
    """A SwiGLU's gate and up projections computed inside their product: each fits L1 alone, both with
    their blocks in flight do not; the default streams the one whose block overflows."""
    wl = pw.Workload("swiglu")
    x = wl.input("X", (32, 1024))  # Qwen3-0.6B's MLP at a decode batch of 32
    gate = layers.matmul(wl, "gate", x, wl.input("W_gate", (1024, 3072)))  # 32 x 128 tiles: 24 of them
    up = layers.matmul(wl, "up", x, wl.input("W_up", (1024, 3072)))
    wl.output(wl.compute("act", (32, 3072), lambda t, f: gate[t, f] * pw.sigmoid(gate[t, f]) * up[t, f]))
    build_and_check(wl, PRESETS["910b"])
