"""The cpu's split-reduction pass: a long, memory-bound sum of few outputs becomes partial sums over
contiguous slices of its reduction (one task each), then their sum."""

from __future__ import annotations

import numpy as np

import ptowsp as pw
from ptowsp.schedules.passes.splitting import PARTS, split_reductions
from ptowsp.workloads import random_inputs, zoo


def test_a_matrix_vector_product_streams_its_rows_in_parallel_slices():
    wl = zoo.matmul(1, 1000, 2048)  # dense 1x2048 -> 1000: B (8 MB) is read once
    built = pw.build(wl, "cpu", workers=2)  # the cpu's default build runs the pass
    assert built.program.order == ("C_parts", "C")
    assert built.workload.tensor("C_parts").shape == (PARTS, 1, 1000)
    table = built._executable.table
    assert sum(inst.name == "C_parts" for inst in table.instances) == PARTS  # a task per slice of rows
    inputs = random_inputs(wl)
    np.testing.assert_allclose(built.run(**inputs)["C"], inputs["A"] @ inputs["B"], rtol=1e-4, atol=1e-3)


def test_each_slice_sums_its_own_rows():
    wl = split_reductions(zoo.matmul(1, 24, 512), min_operand=1)
    inputs = random_inputs(wl)
    a, b = inputs["A"], inputs["B"]
    want = np.stack([a[:, s * 64:(s + 1) * 64] @ b[s * 64:(s + 1) * 64] for s in range(PARTS)])
    assert wl.task("C_parts").tensor.shape == (PARTS, 1, 24)
    wl.output(wl.tensor("C_parts"))  # the partial sums themselves, beside their total
    got = pw.reference(wl, **inputs)
    np.testing.assert_allclose(got["C_parts"], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got["C"], want.sum(0), rtol=1e-5, atol=1e-4)


def test_what_reuses_its_operands_or_is_small_is_left_as_written():
    mm = zoo.matmul(64, 64, 512)  # each B element serves 64 rows: not memory-bound on one read
    assert split_reductions(mm, min_operand=1) is mm
    gemv = zoo.matmul(1, 24, 512)
    assert split_reductions(gemv) is gemv  # 12 K elements of B: one task reads them fast enough
    odd = zoo.matmul(1, 24, 500)  # 500 terms do not split into PARTS equal slices
    assert split_reductions(odd, min_operand=1) is odd
    assert split_reductions(zoo.softmax(4, 4096), min_operand=1).tasks == zoo.softmax(4, 4096).tasks
