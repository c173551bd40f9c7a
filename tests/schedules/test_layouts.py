"""transform_layout (issue 30, item 2): constants packed once at build time, intermediates written and read
through the map; the map is checked one to one; what cannot change its layout says so."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower import lower_program

COMPILED = [t for t in ("cpu", "aicore") if t in pw.targets()]


def conv_with_constant_weights(channels: int = 16, size: int = 10) -> pw.Workload:
    wl = pw.Workload("convw")
    x = wl.input("X", (1, channels, size, size))
    w = wl.constant("W", np.random.default_rng(0).standard_normal((channels, channels, 3, 3)).astype(np.float32))
    scale = wl.compute("Ws", (channels, channels, 3, 3), lambda o, c, r, s: w[o, c, r, s] * 0.5)  # folded
    c, r, s = pw.reduce_axis(channels, "c"), pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    xp = x.boundary("constant", 0.0)
    wl.output(wl.compute("Y", (1, channels, size, size), lambda n, o, y, xx: pw.sum(
        xp[n, c, y + r - 1, xx + s - 1] * scale[o, c, r, s] + w[o, c, r, s] * 0.0, axis=(c, r, s))))
    return wl


@pytest.mark.parametrize("tensor", ["W", "Ws"])
@pytest.mark.parametrize("target", ["numpy", *COMPILED])
def test_packed_weights_give_the_references_result(tensor, target):
    wl = conv_with_constant_weights()
    s = wl.schedule().transform_layout(tensor, lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8))
    assert s.layouts[tensor].shape == (2, 16, 3, 3, 8)
    x = np.random.default_rng(1).standard_normal((1, 16, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(pw.build(s, target=target).run(X=x)["Y"], pw.reference(wl, X=x)["Y"], rtol=1e-4,
                               atol=1e-4)


def test_kernels_read_the_stored_position_and_the_step_is_data():
    wl = conv_with_constant_weights()
    s = wl.schedule().transform_layout("W", lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8))
    assert "W[o // 8, c, r, s, o % 8]" in lower_program(wl, s).source("Y")
    assert "transform_layout('W', lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8))" in str(s)
    assert pw.Schedule.from_json(wl, s.to_json()) == s


@pytest.mark.parametrize("make, match", [
    (lambda s: s.transform_layout("X", lambda n, c, y, x: (n, c, y, x)), "'X' is an input of the workload"),
    (lambda s: s.transform_layout("Y", lambda n, c, y, x: (n, c, y, x)), "'Y' is an output of the workload"),
    (lambda s: s.transform_layout("W", lambda o, c, kh, kw: (o // 2, c, kh, kw)), "sends two elements to one"),
    (lambda s: s.transform_layout("W", lambda o, c, kh, kw: (o - 1, c, kh, kw)), "not a non-negative integer"),
    (lambda s: s.transform_layout("W", lambda o, c: (o, c)), "dimension"),
    (lambda s: s.transform_layout("nope", lambda a: (a,)), "no tensor 'nope'"),
    (lambda s: s.transform_layout("W", lambda o, c, kh, kw: (o, c, kh, kw)).transform_layout(
        "W", lambda o, c, kh, kw: (o, c, kh, kw)), "already has a layout"),
    (lambda s: s.transform_layout("W", lambda o, c, kh, kw: (o, c, kh, kw)).cache_read("Y", "W", "local"),
     "cache_read of it is not supported"),
])
def test_maps_and_tensors_that_cannot_be_stored_so_are_refused(make, match):
    with pytest.raises(pw.ScheduleError, match=match):
        make(conv_with_constant_weights().schedule())


def test_a_saved_map_is_parsed_never_run():
    wl = conv_with_constant_weights()
    text = wl.schedule().transform_layout("W", lambda o, c, kh, kw: (o, c, kh, kw)).to_json()
    with pytest.raises(pw.ScheduleError, match="not an identifier"):
        pw.Schedule.from_json(wl, text.replace('"kw"]', '"kw.__class__"]'))  # axes and index both edited
    with pytest.raises(pw.ScheduleError, match="unexpected"):
        pw.Schedule.from_json(wl, text.replace('"kw"]}', '"kw.__class__"]}'))  # the index alone


def test_cuda_refuses_a_layout():
    from ptowsp.backends.cuda import generate

    wl = conv_with_constant_weights()
    with pytest.raises(pw.BuildError, match="stored in another layout"):
        generate(wl.schedule().transform_layout("W", lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8)))


def two_readers() -> pw.Workload:
    wl = pw.Workload("relayout")
    a = wl.input("A", (32, 24))
    t = wl.compute("T", (32, 24), lambda i, j: a[i, j] * 2.0)
    u = wl.compute("U", (32, 24), lambda i, j: pw.exp(t[i, j]))
    wl.output(wl.compute("C", (24, 32), lambda i, j: t[j, i] + u[j, i]))
    return wl


@pytest.mark.parametrize("target", ["numpy", *COMPILED])
def test_an_intermediate_is_written_and_read_through_its_map(target):
    wl = two_readers()
    s = (wl.schedule().transform_layout("T", lambda i, j: (j // 8, i, j % 8)).transform_layout("U", lambda i, j: (j, i + 1))
         .split("T", "j", 8).reorder("T", "j.outer", "i", "j.inner").vectorize("T", "j.inner").parallel("T", "j.outer"))
    assert s.layouts["U"].shape == (24, 33)  # a zero row's room before each column: positions nothing writes
    a = np.random.default_rng(0).standard_normal((32, 24)).astype(np.float32)
    np.testing.assert_allclose(pw.build(s, target=target).run(A=a)["C"], pw.reference(wl, A=a)["C"], rtol=1e-4,
                               atol=1e-6)


def test_a_split_lined_up_with_the_blocks_writes_whole_blocks():
    """(8 * j.outer + j.inner) // 8 folds to j.outer: the vector store is contiguous."""
    wl = two_readers()
    s = (wl.schedule().transform_layout("T", lambda i, j: (j // 8, i, j % 8))
         .split("T", "j", 8).reorder("T", "j.outer", "i", "j.inner").vectorize("T", "j.inner"))
    program = lower_program(wl, s)
    assert "T[j.outer, i, j.inner] = A[i, j.outer * 8 + j.inner] * 2.0" in program.source("T")
    assert "T[i // 8, j, i % 8]" in program.source("C")


def test_intermediates_whose_layout_another_reader_sees_are_refused():
    wl = pw.Workload("opaque_reader")
    a = wl.input("A", (8,))
    t = wl.compute("T", (8,), lambda i: a[i] + 1.0)
    (r,) = [wl.opaque("host", lambda x: x * 2, inputs=[t], outputs=[("R", (8,), "float32")])]
    wl.output(wl.compute("Y", (8,), lambda i: r[i] + t[i]))
    with pytest.raises(pw.ScheduleError, match="read by the opaque task 'host'"):
        wl.schedule().transform_layout("T", lambda i: (i // 4, i % 4))
    masked = pw.Workload("masked")
    b = masked.input("B", (8,))
    m = masked.compute("M", (8,), lambda i: b[i] * 2.0, domain=lambda i: i < 5)
    masked.output(masked.compute("Z", (8,), lambda i: m[i] + 1.0))
    with pytest.raises(pw.ScheduleError, match="a task with a domain"):
        masked.schedule().transform_layout("M", lambda i: (i // 4, i % 4))


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_with_random_layouts_match_the_reference(seed):
    from ptowsp.schedules.random_schedule import random_schedule

    wl = conv_with_constant_weights(channels=8, size=6)
    s = random_schedule(wl, seed, layouts=True)
    x = np.random.default_rng(seed).standard_normal((1, 8, 6, 6)).astype(np.float32)
    for target in COMPILED:
        np.testing.assert_allclose(pw.build(s, target=target).run(X=x)["Y"], pw.reference(wl, X=x)["Y"], rtol=1e-4,
                                   atol=1e-4, err_msg=str(s))
