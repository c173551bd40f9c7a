"""Dynamic workloads: the work follows the data, not the padded shape.

varlen_attention (a batch of sequences, causal) and moe (top-2 of 8
experts) from the zoo, each run dynamic (domains: tiles of padding and
expert slots past an expert's token count are never generated) and padded
(`padded=True`: the same formulas with each domain turned into a mask, so
every row and every expert slot is computed, as padding implementations
do), under the same hand schedule per target.  The lengths have their mean
at 1/4 of the maximum (one full sequence, one empty); top-2 of 8 experts fills a
quarter of the experts' capacity on average.  Per row: the task instances
each side ran, and the median run time side by side (timing.side_by_side)
on cpu with 2 workers, or the device-clock makespan on aicore (built per
binding: that target does not take symbolic sizes yet).  Then one build of
each workload runs 10 different batch shapes; the LLVM compilations during
those runs are counted (jit.COMPILATIONS).  Each result is checked
against the other side, and the small shapes against pw.reference.  Target (issue 9): dynamic >= 2.5x faster than
padded on cpu; one compile for all 10 shapes.

    .venv/bin/python benchmarks/dynamic.py [--repeat 3]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import side_by_side

import ptowsp as pw
from ptowsp.backends.cpu import jit
from ptowsp.workloads import input_sizes, zoo

TILE = 64  # rows (and key columns) per attention task; expert slots and tokens per moe task


def varlen_schedule(wl: pw.Workload, target: str = "cpu", tile: int = TILE) -> pw.Schedule:
    """Every task its own kernel with a grid over (sequence, head, row tile[, key tile]): the grid
    the domain is decided on.  Dot products and row reductions run as 16-lane vector partials; on
    aicore the row tasks stream along the keys in blocks of `tile` (a whole row of keys does not
    fit a core's buffers), on cpu each row runs whole."""
    s = wl.schedule()
    s.tile("S", i=tile, j=tile).split("S", "d", 16)
    s.reorder("S", "b", "h", "i.outer", "j.outer", "i.inner", "j.inner", "d.outer", "d.inner")
    s.vectorize("S", "d.inner").parallel("S", "b", "h", "i.outer", "j.outer")
    s.tile("E", i=tile, j=tile).split("E", "j.inner", 8).vectorize("E", "j.inner.inner")
    s.parallel("E", "b", "h", "i.outer", "j.outer")
    stream = target == "aicore"
    for task in ("M", "Z"):
        s.split(task, "i", tile).split(task, "r", tile if stream else 16)
        if stream:
            s.split(task, "r.inner", 16).reorder(task, "b", "h", "i.outer", "r.outer", "i.inner", "r.inner.outer",
                                                 "r.inner.inner")
        s.vectorize(task, "r.inner.inner" if stream else "r.inner").parallel(task, "b", "h", "i.outer")
    s.split("O", "i", tile).split("O", "x", 16)
    if stream:
        s.split("O", "r", tile).reorder("O", "b", "h", "i.outer", "r.outer", "i.inner", "r.inner", "x.outer",
                                        "x.inner")
    else:
        s.reorder("O", "b", "h", "i.outer", "i.inner", "r", "x.outer", "x.inner")
    return s.unroll("O", "x.outer").vectorize("O", "x.inner").parallel("O", "b", "h", "i.outer")


def moe_schedule(wl: pw.Workload, target: str = "cpu", tile: int = TILE) -> pw.Schedule:
    """Expert MLPs with a grid over (expert, slot tile), rows accumulated as 16-lane vectors; on
    aicore also over 128-column blocks, streamed along the contraction in blocks of 64 (what a
    cube's L0 holds) with the combine's gather on a vector core.  The router's logits and the
    combine run over token tiles."""
    s = wl.schedule()
    slots = 16 if target == "aicore" else tile
    for task, k in (("H", "dm"), ("Y_expert", "f")):
        s.split(task, "c", slots)
        if target == "aicore":
            s.split(task, "j", 128).split(task, k, 64).split(task, "j.inner", 16)
            s.reorder(task, "e", "c.outer", "j.outer", f"{k}.outer", "c.inner", f"{k}.inner", "j.inner.outer",
                      "j.inner.inner")
            s.vectorize(task, "j.inner.inner").parallel(task, "e", "c.outer", "j.outer")
        else:
            s.split(task, "j", 16).reorder(task, "e", "c.outer", "c.inner", k, "j.outer", "j.inner")
            s.vectorize(task, "j.inner").parallel(task, "e", "c.outer")
    s.split("G", "c", slots // 2).split("G", "j", 16).vectorize("G", "j.inner").parallel("G", "e", "c.outer")
    s.split("Y", "t", tile).split("Y", "j", 16).reorder("Y", "t.outer", "t.inner", "kk", "j.outer", "j.inner")
    s.vectorize("Y", "j.inner").parallel("Y", "t.outer")
    if target == "aicore":
        s.bind("Y", core="vector")
    return s.split("logits", "i", tile).parallel("logits", "i.outer")


def lengths(batch: int, max_len: int) -> np.ndarray:
    """Halving lengths from max_len down, then an empty sequence: mean max_len / 4 for 8 sequences."""
    lens = [max(max_len >> k, 1) for k in range(batch - 1)] + [0]
    return np.array(lens, np.int32)


def varlen_inputs(rng, batch: int, heads: int, max_len: int, head_dim: int) -> dict[str, np.ndarray]:
    p = {n: rng.standard_normal((batch, heads, max_len, head_dim)).astype(np.float32) for n in "QKV"}
    return p | {"lens": rng.permutation(lengths(batch, max_len))}


def moe_inputs(rng, tokens: int, d_model: int, d_ff: int, experts: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((tokens, d_model)).astype(np.float32),
            "W_router": rng.standard_normal((d_model, experts)).astype(np.float32),
            "W1": (rng.standard_normal((experts, d_model, d_ff)) / np.sqrt(d_model)).astype(np.float32),
            "W2": (rng.standard_normal((experts, d_ff, d_model)) / np.sqrt(d_ff)).astype(np.float32)}


CASES = {
    "varlen_attention 8x4x1024x64": (lambda padded: zoo.varlen_attention(heads=4, head_dim=64, padded=padded),
                                     varlen_schedule, lambda rng: varlen_inputs(rng, 8, 4, 1024, 64)),
    "moe 2048 tokens 256/512 top-2 of 8": (lambda padded: zoo.moe(d_model=256, d_ff=512, padded=padded),
                                           moe_schedule, lambda rng: moe_inputs(rng, 2048, 256, 512, 8)),
}


def check(prog, wl: pw.Workload, inputs: dict) -> None:
    out = prog.run(**inputs)
    for name, expected in pw.reference(wl, **inputs).items():
        np.testing.assert_allclose(out[name], expected, rtol=1e-4, atol=1e-4, err_msg=name)


def side(make, schedule, inputs, target: str, repeat: int):
    """(dynamic, padded) builds, each checked against the other (the reference takes minutes at
    these sizes; it checks the small shapes below), with their instance counts and seconds."""
    builds, outputs = [], []
    for padded in (False, True):
        wl = make(padded)
        if target == "aicore":
            wl = wl.bind(input_sizes(wl, inputs))
        prog = pw.build(schedule(wl, target), target=target, workers=2 if target == "cpu" else None)
        outputs.append(prog.run(**inputs))
        builds.append(prog)
    for name, value in outputs[0].items():
        np.testing.assert_allclose(value, outputs[1][name], rtol=1e-4, atol=1e-4, err_msg=name)
    if target == "cpu":
        seconds = side_by_side([lambda p=p: p.run(**inputs) for p in builds], repeat)
    else:
        seconds = [p.trace.duration for p in builds]  # the device clock of the checking run
    return [len([e for e in p.trace.events if e.id >= 0]) for p in builds], seconds


def compile_count(make, schedule, shapes) -> tuple[int, int]:
    """(LLVM compilations while building: 0 when the build cache holds the kernels already,
    compilations over all the runs of the shapes)."""
    before = jit.COMPILATIONS
    wl = make(False)
    prog = pw.build(schedule(wl), target="cpu", workers=2)
    built = jit.COMPILATIONS - before
    for inputs in shapes:
        check(prog, wl, inputs)
    return built, jit.COMPILATIONS - before - built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'workload':36} {'target':7} {'tasks dynamic':>14} {'padded':>7} {'dynamic':>11} {'padded':>11} "
          f"{'speed-up':>9}")
    for label, (make, schedule, inputs_of) in CASES.items():
        inputs = inputs_of(rng)
        for target in ("cpu", "aicore"):
            (n_dyn, n_pad), (t_dyn, t_pad) = side(make, schedule, inputs, target, args.repeat)
            unit = "ms" if target == "cpu" else "ms dev"
            print(f"{label:36} {target:7} {n_dyn:>14} {n_pad:>7} {t_dyn * 1e3:>7.1f} {unit:3} "
                  f"{t_pad * 1e3:>7.1f} {unit:3} {t_pad / t_dyn:>8.2f}x")
    small = np.random.default_rng(1)
    shapes = {
        "varlen_attention": [varlen_inputs(small, b, 2, n, 16) for b, n in zip(range(1, 11), range(9, 200, 19))],
        "moe": [moe_inputs(small, n, 256, 512, 8) for n in range(1, 400, 40)],
    }
    for name, (make, schedule, _) in zip(shapes, CASES.values()):
        if name == "varlen_attention":
            make = lambda padded: zoo.varlen_attention(heads=2, head_dim=16, padded=padded)  # noqa: E731
        built, during = compile_count(make, schedule, shapes[name])
        print(f"{name}: one build ({built} LLVM compilation{'s' * (built != 1)}) ran {len(shapes[name])} batch "
              f"shapes with {during} more")


if __name__ == "__main__":
    main()
