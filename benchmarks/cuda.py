"""The cuda target on a GPU: matmuls against cuBLAS (float32, and float16 on tensor cores), an elementwise chain.

1. matmul 4096^3 float32 under `shared_memory_matmul` (TVM's schedule: a
   128 x 128 tile per block, 8 x 8 per thread, A and B staged in shared
   memory per k block of 8, accumulators in registers) against
   `torch.matmul` on the same GPU with TF32 off (cuBLAS).  Target: >= 30%.
2. matmul 4096^3 with float16 inputs and float32 results on the tensor cores:
   `gemm_f16` calls (warp-wide mma.sync, backends/cuda/mma.py) under a few
   block / warp tilings (`tensor_core_matmul`), against `torch.matmul` in
   float16 (cuBLAS, float32 accumulation).  Target: >= 50%.
3. an elementwise chain (`zoo.elementwise_chain`, 4 steps) over 256M
   float32 under the default schedule and binding, against a device-to-device
   copy of the same bytes.  Target: >= 70% of the copy's bandwidth.

Kernel times on both sides come from CUDA events (ours: the trace's
`event.active`; torch: torch.cuda.Event), medians of several runs, so host
copies and launch overheads are outside both.  Without a GPU it says why
and exits 0.

    python -m benchmarks.cuda [--size 4096] [--elements 268435456]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

# run as a script, this folder comes first on sys.path, and this file would shadow the `cuda` package
_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.workloads import random_inputs, zoo  # noqa: E402


def shared_memory_matmul(wl: pw.Workload, block: int = 128, thread: int = 8, k_block: int = 8) -> pw.Schedule:
    """TVM's GPU matmul: a block x block tile of C per CUDA block, thread x thread per thread, A and B
    staged in shared memory per k block (cooperative fills), the accumulators in registers."""
    s = wl.schedule().tile("C", i=block, j=block).split("C", "i.inner", thread).split("C", "j.inner", thread)
    s.split("C", "k", k_block).reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k.outer",
                                       "k.inner", "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.x")
    s.unroll("C", "k.inner").unroll("C", "i.inner.inner").unroll("C", "j.inner.inner")
    s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "B", "shared", "k.outer")
    return s.cache_write("C", "local")


def tensor_core_matmul(wl: pw.Workload, block: tuple[int, int], warp: tuple[int, int],
                       k_block: int | None = None) -> pw.Schedule:
    """A block x block tile of C per CUDA block, a warp tile per warp (threadIdx.y, threadIdx.z), and
    `gemm_f16` calls (mma.sync): over all of k reading A and B from global memory, or per k block
    with A and B staged in shared memory."""
    s = wl.schedule().tile("C", i=block[0], j=block[1]).split("C", "i.inner", warp[0]).split("C", "j.inner", warp[1])
    tile = ("i.outer", "j.outer", "i.inner.outer", "j.inner.outer")
    if k_block:
        s.split("C", "k", k_block).reorder("C", *tile, "k.outer", "k.inner", "i.inner.inner", "j.inner.inner")
        s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "B", "shared", "k.outer")
    else:
        s.reorder("C", *tile, "k", "i.inner.inner", "j.inner.inner")
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    s.bind("C", "i.inner.outer", "threadIdx.y").bind("C", "j.inner.outer", "threadIdx.z")
    return s.tensorize("C", "k.inner" if k_block else "k", "gemm_f16")


TENSOR_CORE_TILINGS = [((128, 256), (64, 64), None), ((128, 128), (64, 32), 32), ((128, 128), (64, 32), 64),
                       ((128, 256), (64, 64), 32), ((128, 128), (64, 64), 32), ((256, 128), (64, 64), 32)]


def kernel_seconds(prog: pw.Built, inputs: dict, repeat: int) -> float:
    """Median over runs of the summed kernel times (CUDA events) of one run."""
    times = []
    for _ in range(repeat + 1):
        prog.run(**inputs)
        times.append(sum(e.active for e in prog.trace.events if e.active is not None))
    return statistics.median(times[1:])


def copy_seconds(nbytes: int, repeat: int) -> float:
    """A device-to-device copy of nbytes, timed by CUDA events."""
    from ptowsp.backends.cuda import driver

    driver.device().enter()
    source, target, stream = driver.Memory(nbytes), driver.Memory(nbytes), driver.Stream()
    times = []
    for _ in range(repeat + 1):
        driver.call("cuEventRecord", stream.start, stream.handle)
        driver.call("cuMemcpyDtoDAsync", target.pointer, source.pointer, nbytes, stream.handle)
        driver.call("cuEventRecord", stream.end, stream.handle)
        driver.call("cuStreamSynchronize", stream.handle)
        times.append(driver.call("cuEventElapsedTime", stream.start, stream.end) / 1e3)
    return statistics.median(times[1:])


def torch_matmul_seconds(a: np.ndarray, b: np.ndarray, repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products in float32, as ours
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False  # float16 summed in float32
    x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    times = []
    for _ in range(repeat + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(x, y)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times[1:])


def tensor_core_rows(n: int, repeat: int) -> list[tuple]:
    """One row per tiling of the float16 matmul, each checked against float64 first."""
    wl = zoo.matmul(n, n, n, "float16", accumulate="float32")
    inputs = random_inputs(wl)
    exact = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    peer = torch_matmul_seconds(inputs["A"], inputs["B"], repeat)
    rows = []
    for block, warp, k_block in TENSOR_CORE_TILINGS:
        prog = pw.build(tensor_core_matmul(wl, block, warp, k_block), target="cuda", workers=1)
        got = prog.run(**inputs)["C"]
        error = float(np.max(np.abs(got - exact)) / np.max(np.abs(exact)))
        ours = kernel_seconds(prog, inputs, repeat)
        staged = f", k blocks of {k_block} in shared" if k_block else ""
        rows.append((f"matmul {n}^3 f16 mma {block[0]}x{block[1]}/{warp[0]}x{warp[1]}", ours, peer,
                     "cuBLAS f16 (torch)", 0.50,
                     f"{2 * n**3 / ours / 1e12:.0f} TFLOP/s{staged}, max rel error {error:.1e}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--elements", type=int, default=1 << 28)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--thread", type=int, default=8)
    parser.add_argument("--k-block", type=int, default=8)
    args = parser.parse_args()
    if "cuda" not in pw.targets():
        from ptowsp.backends.cuda import CudaBackend

        print(f"no cuda target on this machine: {CudaBackend().unavailable_reason()}")
        return
    from ptowsp.backends.cuda import driver

    print(f"GPU: {driver.device().name} (sm_{driver.device().arch})")
    n = args.size
    wl = zoo.matmul(n, n, n)
    inputs = random_inputs(wl)
    prog = pw.build(shared_memory_matmul(wl, args.block, args.thread, args.k_block), target="cuda", workers=1)
    got = prog.run(**inputs)["C"]
    exact = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    error = float(np.max(np.abs(got - exact)) / np.max(np.abs(exact)))
    ours = kernel_seconds(prog, inputs, args.repeat)
    peer = torch_matmul_seconds(inputs["A"], inputs["B"], args.repeat)
    flops = 2 * n**3
    rows = [(f"matmul {n}^3 f32", ours, peer, "cuBLAS (torch, TF32 off)", 0.30,
             f"{flops / ours / 1e12:.1f} TFLOP/s, max rel error {error:.1e}")]

    rows.extend(tensor_core_rows(n, args.repeat))

    chain = zoo.elementwise_chain((args.elements // 1024, 1024), 4)
    chain_inputs = random_inputs(chain)
    chain_prog = pw.build(chain, target="cuda", workers=1)
    rows_checked = zoo.elementwise_chain((4, 1024), 4)  # the same steps on the first rows
    np.testing.assert_allclose(chain_prog.run(**chain_inputs)["Y"][:4],
                               pw.reference(rows_checked, X=chain_inputs["X"][:4])["Y"], rtol=1e-5, atol=1e-5)
    moved = 2 * args.elements * 4
    ours_chain = kernel_seconds(chain_prog, chain_inputs, args.repeat)
    copy = copy_seconds(args.elements * 4, args.repeat)
    rows.append((f"elementwise chain {args.elements / 2**20:.0f}M f32", ours_chain, copy, "device copy", 0.70,
                 f"{moved / ours_chain / 1e9:.0f} GB/s vs {moved / copy / 1e9:.0f} GB/s"))

    print(f"{'workload':<40} {'ours ms':>9} {'peer ms':>9} {'peer':<26} {'ours/peer speed':>15} {'target':>7}  notes")
    for name, mine, other, peer_name, target, notes in rows:
        ratio = "-" if other is None else f"{other / mine:.1%}"
        shown = "-" if other is None else f"{other * 1e3:.2f}"
        print(f"{name:<40} {mine * 1e3:9.2f} {shown:>9} {peer_name:<26} {ratio:>15} {target:>7.0%}  {notes}")


if __name__ == "__main__":
    main()
