"""Capture and replay (backends/recording.py): a recorded step replayed on new data gives what a fresh
run gives, skips the tiles the new data leaves without work, refuses other sizes, and on the device
clock launches the recorded table once instead of generating each instance."""

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.workloads.zoo.decoder import DecoderConfig, decoder
from tests.workloads.test_decoder import MAX_POS, TINY, TINY_MOE, check, decode_inputs, numpy_decode, weights


def varlen():
    """docs/dynamic.md's domain example: tiles of 16 rows, work only below each row's length."""
    wl = pw.Workload("varlen")
    x = wl.input("x", ("b", 64, 8))
    lens = wl.input("lens", ("b",), "int32")
    wl.output(wl.compute("y", ("b", 64, 8), lambda b, s, d: x[b, s, d] * 2.0, domain=lambda b, s, d: s < lens[b]))
    return wl.schedule().split("y", "s", 16).parallel("y", "b", "s.outer")


def ran(trace) -> int:
    return sum(e.id >= 0 for e in trace.events)


@pytest.mark.parametrize("debug", [False, True], ids=["native loop", "python scheduler"])
def test_a_replay_runs_only_the_tiles_the_new_data_gives_work(debug):
    prog = pw.build(varlen(), target="cpu", workers=2, debug=debug)
    x = np.arange(3 * 64 * 8, dtype=np.float32).reshape(3, 64, 8)
    rec = prog.capture(x=x, lens=np.array([0, 5, 40], np.int32))
    assert rec.tasks == 3 * 4 and ran(rec.trace) == 0 + 1 + 3
    rng = np.random.default_rng(0)
    # no tile skipped but tiles cut short, after a step that filled them (its buffers come back): the
    # tiles that run write the zeros past each length themselves
    for lens in [np.array([64, 64, 64], np.int32), np.array([50, 63, 49], np.int32), *(
            rng.integers(0, 65, 3).astype(np.int32) for _ in range(6))]:
        out = rec.replay(x=x, lens=lens)
        want = np.where(np.arange(64)[None, :, None] < lens[:, None, None], 2 * x, 0)
        np.testing.assert_array_equal(out["y"], want)
        tiles = int(sum(-(-n // 16) for n in lens))
        assert ran(rec.trace) == tiles and rec.trace.statistics["skipped"] == 12 - tiles
    assert rec.replays == 8


@pytest.mark.parametrize("config", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_replayed_decode_steps_match_fresh_runs_and_the_numpy_decoder(config):
    """Random ragged batches (context lengths) and random block tables at the recorded sizes."""
    rng = np.random.default_rng(1)
    W = weights(config, rng)
    prog = pw.build(decoder(config, "decode"), target="cpu", workers=2)
    first = decode_inputs(config, W, [3, 0, 17, 9], 8, pool=48, rng=rng)
    rec = prog.capture(**first)
    for _ in range(4):
        step = decode_inputs(config, W, rng.integers(0, 8 * config.block_size, 4), 8, pool=48, rng=rng)
        replayed = rec.replay(**step)
        fresh = prog.run(**step)
        for name, value in fresh.items():
            np.testing.assert_array_equal(replayed[name], value, err_msg=name)
        caches = {k: v for k, v in step.items() if k.endswith("_cache")}
        check(replayed, *numpy_decode(config, W, step["X"], step["pos"], step["block_table"], caches,
                                      step["cos"], step["sin"]), 256)


def test_a_replay_at_other_sizes_is_refused_naming_them():
    rng = np.random.default_rng(2)
    W = weights(TINY, rng)
    rec = pw.build(decoder(TINY, "decode"), target="cpu", workers=1).capture(
        **decode_inputs(TINY, W, [1, 2], 4, pool=16, rng=rng))
    with pytest.raises(pw.InputError, match=r"batch=3 \(recorded at 2\).*capture this binding"):
        rec.replay(**decode_inputs(TINY, W, [1, 2, 3], 4, pool=16, rng=rng))
    with pytest.raises(pw.InputError, match="missing input 'X'"):
        rec.replay(**{k: v for k, v in decode_inputs(TINY, W, [1, 2], 4, 16, rng).items() if k != "X"})
    assert rec.replays == 0


def test_capture_needs_a_target_that_replays():
    with pytest.raises(pw.BuildError, match="cpu and aicore"):
        pw.build(varlen(), target="numpy").capture(x=np.ones((1, 64, 8), np.float32), lens=np.ones(1, np.int32))


def test_on_the_device_clock_a_replay_launches_the_recorded_table_once():
    """The capture's orchestrator generates and records each instance; a replay's launches the table
    once (DeviceModel.replay_seconds), so an orchestrator-bound step gets shorter."""
    rng = np.random.default_rng(3)
    W = weights(TINY, rng)
    step = decode_inputs(TINY, W, [5, 13, 2], 4, pool=48, rng=rng)
    wl = decoder(TINY, "decode").bind({"batch": 3, "max_blocks": 4, "max_pos": MAX_POS, "num_blocks": 48})
    device = pw.DeviceModel()
    prog = pw.build(wl, target="aicore", device=device)

    def orchestrating(trace) -> float:
        return sum(e.duration for e in trace.events if e.name == "orchestrate")

    fresh = prog.run(**step)
    generated = prog.trace
    rec = prog.capture(**step)
    n = ran(generated)  # tiles the step's contexts leave without work are not generated
    assert n == ran(rec.trace) <= rec.tasks
    assert orchestrating(generated) == pytest.approx(n * device.orchestrate_seconds)
    assert orchestrating(rec.trace) == pytest.approx(n * (device.orchestrate_seconds + device.record_seconds))
    replayed = rec.replay(**step)
    assert orchestrating(rec.trace) == pytest.approx(device.replay_seconds)
    assert rec.trace.makespan < generated.makespan
    for name, value in fresh.items():
        np.testing.assert_array_equal(replayed[name], value, err_msg=name)



def test_a_domain_that_reads_no_tensor_leaves_its_empty_tiles_out_of_the_table():
    """A causal `j <= i` has the same tiles with work in every run: they are not kept to be skipped."""
    wl = pw.Workload("causal")
    x = wl.input("x", (64, 64))
    wl.output(wl.compute("y", (64, 64), lambda i, j: x[i, j] + 1.0, domain=lambda i, j: j <= i))
    prog = pw.build(wl.schedule().tile("y", i=16, j=16).parallel("y", "i.outer", "j.outer"),
                    target="cpu", workers=2)
    data = np.ones((64, 64), np.float32)
    rec = prog.capture(x=data)
    assert rec.tasks == ran(rec.trace) == 4 * 5 // 2  # the 10 tiles on or below the diagonal
    np.testing.assert_array_equal(rec.replay(x=2 * data)["y"], np.tril(np.full((64, 64), 3.0, np.float32)))
    assert rec.trace.statistics["skipped"] == 0
