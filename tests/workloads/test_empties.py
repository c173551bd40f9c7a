"""Empty tensors (a dimension of 0): what a build and the reference do with them (workloads/empties.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from tests.conformance.edge_cases import empty_tensors

F32 = np.float32


def feeds():
    return {"X": np.zeros((3, 0, 4), F32), "Y": np.arange(12, dtype=F32).reshape(3, 4)}


@pytest.mark.parametrize("target", ["numpy", "cpu", "aicore"])
def test_empty_outputs_come_back_with_their_shape_and_dtype(target):
    wl, _ = empty_tensors()
    got = pw.build(wl, target).run(**feeds())
    assert list(got) == ["total", "top", "joined", "doubled"]
    assert got["doubled"].shape == (3, 0, 4) and got["doubled"].dtype == F32
    np.testing.assert_array_equal(got["total"], feeds()["Y"])  # a sum over nothing is 0
    assert np.all(got["top"] == -np.inf)  # a max over nothing is the lowest value
    np.testing.assert_array_equal(got["joined"], feeds()["Y"])


def test_a_schedule_naming_an_empty_task_builds_without_its_steps():
    wl, _ = empty_tensors()
    s = wl.schedule().split("doubled", "j", 2).split("total", "j", 2).parallel("total", "i")
    prog = pw.build(s, "cpu")
    got = prog.run(**feeds())
    np.testing.assert_array_equal(got["total"], feeds()["Y"])
    assert "j.outer" in prog.source("total")  # the step on the task that computes something stays
    with pytest.raises(pw.BuildError, match=r"task 'doubled' is empty \(shape \(3, 0, 4\)\)"):
        prog.source("doubled")


def test_a_workload_whose_outputs_are_all_empty_runs_nothing():
    wl = pw.Workload("nothing")
    z = wl.input("z", (0, 3))
    wl.output(wl.compute("o", (0, 3), lambda i, j: z[i, j] + 1.0))
    prog = pw.build(wl, "cpu")
    got = prog.run(z=np.zeros((0, 3), F32))
    assert got["o"].shape == (0, 3) and got["o"].dtype == F32
    assert prog.trace.summary().tasks == 0
    got["o"].resize((0, 3))  # a new array of its own
    with pytest.raises(pw.InputError, match="'z'"):  # an empty input is still checked
        prog.run(z=np.zeros((1, 3), F32))
    assert pw.reference(wl, z=np.zeros((0, 3), F32))["o"].shape == (0, 3)


def test_argmax_of_an_empty_set_is_refused():
    wl = pw.Workload("argmax_nothing")
    x = wl.input("x", (2, 0))
    k = pw.reduce_axis(0, "k")
    wl.output(wl.compute("a", (2,), lambda i: pw.argmax(x[i, k], axis=k)))
    with pytest.raises(pw.WorkloadError, match="task 'a': argmax of an empty set has no value"):
        pw.reference(wl, x=np.zeros((2, 0), F32))


def test_an_opaque_task_beside_an_empty_tensor_is_refused():
    wl = pw.Workload("opaque_beside")
    x, y = wl.input("x", (0,)), wl.input("y", (3,))
    twice = wl.opaque("twice", lambda y: {"t": y * 2}, inputs=[y], outputs=[("t", (3,))])
    wl.output(twice, wl.compute("e", (0,), lambda i: x[i]))
    with pytest.raises(pw.WorkloadError, match="task 'twice'.*empty tensors.*not opaque tasks"):
        pw.build(wl, "cpu")
