"""Kernels that are the same code but for names are compiled once (backends/cpu/twins.py)."""

from __future__ import annotations

import numpy as np

import ptowsp as pw
from ptowsp.backends.cpu.twins import shape_of

KERNEL = """define void @"ptowsp_{task}"(ptr noalias %"{a}", ptr noalias %"{b}", i64 %"i0") {{
{entry}:
  %"{a}.x" = load float, float* %"{a}"
  %".2" = call float @llvm.{fn}.f32(float %"{a}.x")
  store float %".2", float* %"{b}"
  br label %"{a}.exit"
"{a}.exit":
  ret void
}}"""


def test_local_names_do_not_matter_globals_do():
    one = KERNEL.format(task="t1", a="x", b="y", entry="entry", fn="exp")
    two = KERNEL.format(task="layer_7", a="blk7_in", b="blk7_out", entry="start", fn="exp")
    other = KERNEL.format(task="t1", a="x", b="y", entry="entry", fn="log")
    assert shape_of(one, "ptowsp_t1") == shape_of(two, "ptowsp_layer_7")
    assert shape_of(one, "ptowsp_t1") != shape_of(other, "ptowsp_t1")


def two_blocks() -> pw.Workload:
    """Two identical layers (a matmul, then tanh; each an output, so each a kernel) and a third of another width."""
    wl = pw.Workload("two_blocks")
    x = wl.input("x", (32, 64))
    ws = [wl.input(f"w{k}", (64, 64)) for k in range(2)]
    w3 = wl.input("w3", (64, 48))
    h, stored = x, []
    for k, w in enumerate(ws):
        r = pw.reduce_axis(64, "r")
        m = wl.compute(f"mm{k}", (32, 64), lambda i, j, h=h, w=w, r=r: pw.sum(h[i, r] * w[r, j], r))
        h = wl.compute(f"act{k}", (32, 64), lambda i, j, m=m: pw.tanh(m[i, j]))
        stored.append(h)
    r = pw.reduce_axis(64, "r")
    wl.output(*stored, wl.compute("out", (32, 48), lambda i, j: pw.sum(h[i, r] * w3[r, j], r)))
    return wl


def test_twin_tasks_share_one_kernel_and_each_reads_its_own_tensors():
    wl = two_blocks()
    prog = pw.build(wl, "cpu", workers=2)
    entries = prog._executable.entries
    symbols = {name: entry.symbol for name, entry in entries.items()}
    assert symbols["act1"] == symbols["act0"] and entries["act1"].arguments != entries["act0"].arguments
    assert symbols["out"] != symbols["act0"]  # another width: another kernel
    inputs = pw.workloads.random_inputs(wl)
    got, want = prog(**inputs), pw.reference(wl, **inputs)
    for name in ("act0", "act1", "out"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
