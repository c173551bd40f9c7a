"""The cpu's transposed-operand pass: a contraction reading its second operand along the reduction
reads a transposed copy instead, which the default's register-tiled matmul takes."""

from __future__ import annotations

import numpy as np

import ptowsp as pw
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.fold import foldable
from ptowsp.schedules.passes.transposing import transpose_operands
from ptowsp.workloads import random_inputs, zoo


def _gemm_trans_b(constant: bool) -> pw.Workload:
    """Y = X W^T (ONNX Gemm with transB=1), W an input or a constant."""
    wl = pw.Workload("gemm_tb")
    x = wl.input("X", (32, 64))
    w = (wl.constant("W", np.random.default_rng(0).standard_normal((48, 64)).astype(np.float32)) if constant
         else wl.input("W", (48, 64)))
    k = pw.reduce_axis(64, "k")
    wl.output(wl.compute("Y", (32, 48), lambda i, j: pw.sum(x[i, k] * w[j, k], k)))
    return wl


def test_attention_scores_read_the_keys_transposed_and_get_the_matmul_tile():
    wl = zoo.attention(1, 2, 32, 32)
    out = transpose_operands(wl, 16)
    new = [t for t in out.tasks if t not in wl.tasks]
    assert len(new) == 1 and new[0].endswith("_t")
    scores = next(t for t in out.tasks if new[0] in {x.name for x in out.task(t).inputs})
    s = default_schedule(out, vector_bytes=64, workers=2)
    assert any(read[0] == scores and read[1] == new[0] for read in s.cache_reads)  # its panel is packed
    inputs = random_inputs(wl)
    want = pw.reference(wl, **inputs)
    got = pw.build(wl, "cpu", workers=2).run(**inputs)  # the cpu's default build runs the pass
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)


def test_a_constant_operand_is_transposed_once_at_build_time():
    wl = _gemm_trans_b(constant=True)
    out = transpose_operands(wl, 16)
    assert out.tasks == ["Y_W_t", "Y"] and "Y_W_t" in foldable(out)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(wl, "cpu", workers=2).run(**inputs)["Y"],
                               pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)


def test_what_does_not_match_is_left_as_written():
    mm = zoo.matmul(32, 48, 64)  # B[k, j] already runs along j
    assert transpose_operands(mm, 16) is mm
    narrow = _gemm_trans_b(constant=False)
    assert transpose_operands(narrow, 64) is narrow  # j (48) spans less than a vector of 64
    assert transpose_operands(zoo.softmax(8, 32), 16).tasks == zoo.softmax(8, 32).tasks


def test_an_inner_product_has_no_lane_and_is_left_alone():
    """A 0-d sum of products (ONNX Einsum "i,i") has no last loop to transpose for: it had crashed the pass."""
    wl = pw.Workload("dot")
    x, y = wl.input("X", (64,)), wl.input("Y", (64,))
    k = pw.reduce_axis(64, "k")
    wl.output(wl.compute("D", (), lambda: pw.sum(x[k] * y[k], k)))
    assert transpose_operands(wl, 16) is wl
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(**inputs)["D"], pw.reference(wl, **inputs)["D"], rtol=1e-5)
