"""Host cost per task of a decode step on the real clock: the first run at a binding, a run at a binding
seen before, and a replay of a captured step (prog.capture -> Recording.replay).

    .venv/bin/python benchmarks/replay.py [--layers 28] [--batch 8 32] [--rounds 5]

The decoder of pw.zoo.decoder with Qwen3-0.6B's shape (28 layers by default), random weights (constants
of the build, `weights=`: a step passes only its data), a ragged
batch (sequence b holds about 4000 x (b + 1) / batch tokens: contexts of 125 to 4000 at batch 32) over a
paged KV cache.  One worker (`workers=1`), so a step's wall time is its kernels' time plus the host's:
host cost per task = (wall time - the kernels' own time, which the native loop measures around each
call) / the tasks that ran, in two parts: outside the task loop (input checks, deciding which tiles
have work, the buffers, the pointer table, the outputs) and inside it, between kernels (dispatch,
the clock reads, and a look every 10 ms at the word signals write, after one return to Python at
100 ms: costs that grow with the step's length, not with its task count).

- first run: the first step at a binding of the sizes never run before (a new batch size): the
  workload bound at those sizes (bounds checked), its memory plan, task table and dependencies;
- run: `prog.run` at a binding seen before: the table is kept, the step's data picks its tiles;
- replay: `Recording.replay` of a step captured at that binding.

Run and replay alternate in blocks of `--repeat` steps, `--rounds` blocks each; each figure is the
median over its steps.  Beside them, the PTO runtime's published host figures (Kunpeng-920).

After the build the process calls `gc.freeze()`, as a serving process does once its model is loaded
(vLLM does after capturing its CUDA graphs): the build's millions of objects move to a generation the
collector no longer walks, so a step that allocates does not pay for walking them (`--gc default`
leaves the collector as Python starts it).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from llm import random_weights  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.workloads.zoo.decoder import DecoderConfig, decoder, rotary_tables  # noqa: E402

CONTEXT = 4000  # the longest sequence's cached tokens (the rotary tables hold 4096 positions)


def decode_step(c: DecoderConfig, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One decode step's inputs: sequence b holds about CONTEXT x (b + 1) / batch tokens (give or take a
    block, drawn anew each step), its blocks anywhere in one pool that every layer reads (the values
    do not matter here; a pool per layer would take gigabytes at batch 32)."""
    bs = c.block_size
    lens = np.array([max(1, CONTEXT * (b + 1) // batch - int(rng.integers(0, bs))) for b in range(batch)], np.int32)
    per_seq = CONTEXT // bs + 1
    pool = rng.standard_normal((batch * per_seq, bs, c.kv_heads, c.head_dim)).astype(np.float32)
    table = rng.permutation(batch * per_seq).reshape(batch, per_seq).astype(np.int32)
    cos, sin = rotary_tables(4096, c)
    caches = {f"l{n}_{w}_cache": pool for n in range(c.layers) for w in "KV"}
    x = rng.standard_normal((batch, c.hidden)).astype(np.float32)
    return {"X": x, "pos": lens, "block_table": table, "cos": cos, "sin": sin, **caches}


def host_per_task(step) -> tuple[float, float, int]:
    """Of one call of `step` (which returns its trace): host seconds per task that ran outside the
    task loop (set-up and the outputs) and inside it (between kernels: dispatch, the clock reads,
    looking for Ctrl-C), and how many tasks ran."""
    start = time.perf_counter()
    trace = step()
    wall = time.perf_counter() - start
    ran = [e for e in trace.events if e.id >= 0]
    kernels = sum(e.duration for e in ran)
    return (wall - trace.duration) / len(ran), (trace.duration - kernels) / len(ran), len(ran)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gc", choices=["frozen", "default"], default="frozen",
                        help="gc.freeze() after the build (a serving process's set-up), or not")
    args = parser.parse_args()
    config = DecoderConfig(layers=args.layers)
    weights = random_weights(config)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    prog = pw.build(decoder(config, "decode", weights=weights), target="cpu", workers=1)
    print(f"decoder, {args.layers} layers of Qwen3-0.6B's shape: built in {time.perf_counter() - start:.1f} s")
    if args.gc == "frozen":
        gc.freeze()
    rows = []
    for batch in args.batch:
        steps = [decode_step(config, batch, rng) for _ in range(2)]

        def run(inputs):
            prog.run(**inputs)
            return prog.trace

        first, _, tasks = host_per_task(lambda: run(steps[0]))
        recording = prog.capture(**steps[0])
        runs, replays = [], []
        for r in range(args.rounds):
            for _ in range(args.repeat):
                runs.append(host_per_task(lambda: run(steps[r % 2]))[:2])
            for _ in range(args.repeat):
                replays.append(host_per_task(lambda: (recording.replay(**steps[r % 2]), recording.trace)[1])[:2])
        rows.append((batch, recording.tasks, tasks, first, _medians(runs), _medians(replays)))
    print()
    print("| decode step | tasks in table | tasks run | first run | run: outside loop + in loop = total | "
          "replay: outside loop + in loop = total |")
    print("| --- | --- | --- | --- | --- | --- |")
    for batch, table, tasks, first, run_s, replay_s in rows:
        print(f"| batch {batch}, contexts {CONTEXT // batch}-{CONTEXT} | {table:,} | {tasks:,} | "
              f"{first * 1e6:,.1f} us | {_parts(run_s)} | {_parts(replay_s)} |")
    print("| PTO runtime (published, Kunpeng-920) | 3,875 | | 2.94 us cold | 1.22-1.26 us warm | 2.3 us a replay |")
    print("\nhost cost per task that ran, one worker; medians (outside loop: set-up and outputs; in loop: "
          f"between kernels); the collector {'frozen after the build' if args.gc == 'frozen' else 'as Python starts it'}")


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    outside, inside = zip(*samples)
    return statistics.median(outside), statistics.median(inside), statistics.median(o + i for o, i in samples)


def _parts(m: tuple[float, float, float]) -> str:
    return f"{m[0] * 1e6:.2f} + {m[1] * 1e6:.2f} = {m[2] * 1e6:.2f} us"


if __name__ == "__main__":
    main()
