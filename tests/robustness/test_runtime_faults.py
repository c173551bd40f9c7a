"""Faults at run time: timeouts that bound stuck host code, opaque tasks that misbehave, bad run
arguments, csp processes that are not async, bad device figures and unwritable trace paths.

Each case asserts the error class (a pw.PtowspError subclass) and that the message names the fault.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings

import numpy as np
import pytest
import trio

import ptowsp as pw
from ptowsp import csp
from ptowsp.runtime.watchdog import GRACE

# a timed-out run returns within timeout + SLACK seconds: below the 3 s the stuck paths sleep, so a run
# that waited for its stuck task code fails, while a VM stall of a second or so does not
SLACK = 2.0


def vector() -> pw.Workload:
    wl = pw.Workload("vec")
    a = wl.input("A", (64,))
    b = wl.input("B", (64,))
    wl.output(wl.compute("C", (64,), lambda i: a[i] + b[i]))
    return wl


def with_opaque(fn, out=("Z", (8, 8), "float32")) -> pw.Workload:
    """X -> Y = 2X -> opaque(Y) -> W = Z + Y: the opaque task reads the caller's input's child, and W
    reads Y after it, so a write by the opaque function into Y would show in W."""
    wl = pw.Workload("op")
    x = wl.input("X", (8, 8))
    y = wl.compute("Y", (8, 8), lambda i, j: x[i, j] * 2.0)
    z = wl.opaque("host", fn, inputs=[y], outputs=[out])
    if out[2] == "float32":
        wl.output(wl.compute("W", (8, 8), lambda i, j: z[i, j] + y[i, j]))
    else:
        wl.output(z)
    return wl


X = np.arange(64, dtype=np.float32).reshape(8, 8)


def run_on(target: str, wl: pw.Workload, **kw) -> dict[str, np.ndarray]:
    if target == "reference":
        return pw.reference(wl, X=X)
    return pw.build(wl, target, **({} if target == "aicore" else {"workers": 2})).run(X=X, **kw)


# -- run arguments -------------------------------------------------------------------------------------
BAD_TIMEOUTS = [("1", "'1' of type str"), (True, "True of type bool"), (b"1", "b'1'"), ([1], r"\[1\]"),
                (float("nan"), "nan"), (0, "got 0"), (-1.5, "got -1.5"), (1j, "1j")]


@pytest.mark.parametrize("value, named", BAD_TIMEOUTS, ids=[repr(v) for v, _ in BAD_TIMEOUTS])
@pytest.mark.parametrize("where", ["prog.run", "csp.run"])
def test_a_bad_timeout_is_an_input_error_naming_the_value(where, value, named):
    async def idle():
        return None

    with pytest.raises(pw.InputError, match=f"timeout must be a positive number of seconds.*{named}"):
        if where == "prog.run":
            pw.build(vector(), "numpy").run(A=np.ones(64, np.float32), B=np.ones(64, np.float32), timeout=value)
        else:
            csp.run([idle], timeout=value)


def test_an_infinite_timeout_is_no_limit():
    a = np.ones(64, np.float32)
    assert pw.build(vector(), "numpy").run(A=a, B=a, timeout=float("inf"))["C"][0] == 2.0


def test_positional_inputs_follow_the_declared_order():
    a, b = np.ones(64, np.float32), np.full(64, 2.0, np.float32)
    prog = pw.build(vector(), "cpu", workers=1)
    np.testing.assert_array_equal(prog.run(a, b)["C"], a + b)
    np.testing.assert_array_equal(prog(a, B=b, timeout=5)["C"], a + b)


POSITIONAL = [
    ("a name given twice", lambda p, a: p.run(a, A=a, B=a), "input 'A' of workload 'vec' is given both positionally"),
    ("second name twice", lambda p, a: p.run(a, a, B=a), "input 'B' .* both positionally \\(argument 2\\)"),
    ("too many", lambda p, a: p.run(a, a, a), "3 positional inputs given, but workload 'vec' has 2: A, B"),
    ("a timeout as first positional", lambda p, a: p.run(1.0, B=a), "input 'A'.*got float"),
]


@pytest.mark.parametrize("do, message", [pytest.param(c[1], c[2], id=c[0]) for c in POSITIONAL])
def test_positional_inputs_are_checked(do, message):
    with pytest.raises(pw.InputError, match=message):
        do(pw.build(vector(), "numpy"), np.ones(64, np.float32))


# -- csp processes -------------------------------------------------------------------------------------
def _plain():
    return 3


async def _coroutine_function():
    return 1


async def _async_generator():
    yield 1


PROCESSES = [
    ("plain function", lambda: [_plain], r"csp process '_plain' is not async: calling it returned int"),
    ("plain function in process()", lambda: [csp.process(_plain, name="loader")], "'loader' is not async"),
    ("async generator", lambda: [_async_generator], "'_async_generator' is not async.*async_generator"),
    ("not callable", lambda: [5], "csp process 0 is 5 \\(int\\), not an async function"),
    ("None", lambda: [_coroutine_function, None], "csp process 1 is None"),
]


@pytest.mark.parametrize("processes, message", [pytest.param(c[1], c[2], id=c[0]) for c in PROCESSES])
@pytest.mark.parametrize("clock", ["real", "device"])
def test_a_process_that_is_not_async_is_named(processes, message, clock):
    with pytest.raises(pw.InputError, match=message):
        csp.run(processes(), clock=clock)


async def _awaits_trio():
    await trio.sleep(1)


@pytest.mark.parametrize("clock", ["real", "device"])
def test_a_process_awaiting_trio_is_told_what_to_use(clock):
    with pytest.raises(pw.InputError, match="csp process '_awaits_trio' called trio.*await pw.csp.sleep"):
        csp.run([_awaits_trio], clock=clock)


def test_an_already_created_coroutine_is_named():
    coroutine = _coroutine_function()
    with pytest.raises(pw.InputError, match=r"csp process 0 \('_coroutine_function'\) is a coroutine object"):
        csp.run([coroutine])
    coroutine.close()


# -- device model ------------------------------------------------------------------------------------------
DEVICE = [
    ("negative clock", dict(clock_hz=-1.0), "clock_hz = -1.0: Input should be greater than 0"),
    ("zero clock", dict(clock_hz=0), "clock_hz = 0"),
    ("clock not a number", dict(clock_hz="fast"), "clock_hz = 'fast'.*valid number"),
    ("NaN clock", dict(clock_hz=float("nan")), "clock_hz = nan.*finite"),
    ("infinite bandwidth", dict(hbm_bytes_per_second=float("inf")), "hbm_bytes_per_second = inf"),
    ("negative latency", dict(dispatch_seconds=-1e-9), "dispatch_seconds = -1e-09"),
    ("no clusters", dict(clusters=0), "clusters = 0"),
    ("fractional clusters", dict(clusters=1.5), "clusters = 1.5"),
    ("one task slot", dict(task_slots=1), "task_slots = 1"),
    ("unknown field", dict(dispatch_latency=1e-6), "dispatch_latency = 1e-06: Extra inputs"),
]


@pytest.mark.parametrize("fields, message", [pytest.param(c[1], c[2], id=c[0]) for c in DEVICE])
def test_a_bad_device_figure_is_a_build_error_naming_the_field(fields, message):
    with pytest.raises(pw.BuildError, match=f"invalid pw.DeviceModel: {message}"):
        pw.DeviceModel(**fields)


def test_a_loaded_device_model_is_checked_too():
    with pytest.raises(pw.BuildError, match="clock_hz = -3"):
        pw.DeviceModel.model_validate({"clock_hz": -3})


# -- trace paths --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace() -> pw.Trace:
    prog = pw.build(vector(), "numpy")
    prog.run(A=np.ones(64, np.float32), B=np.ones(64, np.float32))
    return prog.trace


def _paths(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    return {"missing folder": (tmp_path / "nope" / "t.out", "its folder does not exist"),
            "a folder": (tmp_path, "it is a folder"),
            "under a file": (tmp_path / "file.txt" / "t.out", "Not a directory")}


@pytest.mark.parametrize("method, suffix", [("to_chrome", ".json"), ("plot", ".png")])
@pytest.mark.parametrize("case", ["missing folder", "a folder", "under a file"])
def test_an_unwritable_trace_path_is_named(trace, tmp_path, method, suffix, case):
    path, reason = _paths(tmp_path)[case]
    path = path.with_suffix(suffix) if path != tmp_path else path
    with pytest.raises(pw.InputError, match=f"trace.{method}: cannot write '{path}'.*{reason}"):
        getattr(trace, method)(path)


@pytest.mark.parametrize("method, path, message", [
    ("plot", "gantt.xyz", "cannot write 'gantt.xyz'.*xyz"),
    ("plot", 7, "expected a file path.*got 7"),
    ("to_chrome", None, "expected a file path.*got None"),
    ("to_chrome", "", "expected a file path.*got ''"),
])
def test_a_trace_path_that_is_no_path_is_named(trace, tmp_path, monkeypatch, method, path, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pw.InputError, match=message):
        getattr(trace, method)(path)
    assert list(tmp_path.iterdir()) == []


# -- opaque tasks ------------------------------------------------------------------------------------------
OUTPUTS = [
    ("int64 2**40 into int32", lambda y: np.full((8, 8), 2**40, np.int64), "int32",
     "output 'Z' holds 1099511627776, outside int32's range"),
    ("int64 -2**40 into int32", lambda y: np.full((8, 8), -(2**40), np.int64), "int32", "holds -1099511627776"),
    ("2**63 into int64", lambda y: np.full((8, 8), 2**63, np.uint64), "int64", "holds 9223372036854775808"),
    ("NaN into int32", lambda y: np.full((8, 8), np.nan), "int32", "output 'Z' has dtype float64, declared int32"),
    ("inf into int64", lambda y: np.full((8, 8), np.inf), "int64", "has dtype float64, declared int64"),
    ("1e40 into int32", lambda y: np.full((8, 8), 1e40), "int32", "has dtype float64, declared int32"),
    ("1e40 into float32", lambda y: np.full((8, 8), 1e40), "float32", "output 'Z' holds 1e\\+40, beyond the range"),
    ("1e5 into float16", lambda y: np.full((8, 8), 1e5), "float16", "holds 100000.0, beyond the range of float16"),
    ("None", lambda y: None, "float32", "output 'Z' is None \\(NoneType\\), not an array"),
    ("a string", lambda y: "done", "float32", "output 'Z' is 'done' \\(str\\), not an array"),
    ("a dict", lambda y: {"Z": y}, "float32", "output 'Z' is .* \\(dict\\), not an array"),
    ("a ragged list", lambda y: [[1.0], [1.0, 2.0]], "float32", "\\(list\\), not an array"),
    ("an object array", lambda y: np.full((8, 8), None), "float32", "\\(ndarray\\), not an array"),
    ("wrong shape", lambda y: y[:4], "float32", "output 'Z' has shape \\(4, 8\\), declared \\(8, 8\\)"),
    ("a scalar", lambda y: 1.0, "float32", "output 'Z' has shape \\(\\), declared \\(8, 8\\)"),
    ("two results for one output", lambda y: (y, y), "float32", "returned 2 array\\(s\\), declared 1 output"),
    ("complex into float", lambda y: y.astype(np.complex64), "float32", "has dtype complex64, declared float32"),
]


@pytest.mark.parametrize("fn, dtype, message", [pytest.param(*c[1:], id=c[0]) for c in OUTPUTS])
@pytest.mark.parametrize("target", ["reference", "numpy", "cpu"])
def test_an_opaque_result_that_breaks_its_declaration_is_a_task_error(target, fn, dtype, message):
    before = X.copy()
    with pytest.raises(pw.TaskError, match=f"opaque task 'host'.*{message}"):
        run_on(target, with_opaque(fn, ("Z", (8, 8), dtype)))
    np.testing.assert_array_equal(X, before)


def test_integer_results_that_fit_are_converted():
    out = run_on("cpu", with_opaque(lambda y: np.argsort(y, axis=1), ("Z", (8, 8), "int32")))  # int64 -> int32
    np.testing.assert_array_equal(out["Z"], np.argsort(X * 2, axis=1))


def _unlock_and_write(y):
    y.flags.writeable = True
    y[...] = -1.0
    return y * 0.0


def _write_through_base(y):
    while y.base is not None:
        y = y.base
    y.flags.writeable = True
    y[...] = -1.0
    return np.zeros((8, 8), np.float32)


def _copy_into(y):
    np.copyto(y, 0.0)
    return y


@pytest.mark.parametrize("fn", [_unlock_and_write, _write_through_base], ids=["writeable back", "through .base"])
@pytest.mark.parametrize("target", ["reference", "numpy", "cpu", "aicore"])
def test_an_opaque_task_cannot_write_its_inputs(target, fn):
    before = X.copy()
    out = run_on(target, with_opaque(fn))
    np.testing.assert_array_equal(X, before)  # the caller's input
    np.testing.assert_array_equal(out["W"], 2 * X)  # W reads Y after the opaque task: Y is intact (Z is 0)


@pytest.mark.parametrize("target", ["reference", "numpy", "cpu"])
def test_a_read_only_input_still_refuses_plain_writes(target):
    with pytest.raises(pw.TaskError, match="opaque task 'host' raised ValueError: .*read-only"):
        run_on(target, with_opaque(_copy_into))


# -- timeouts: every path returns within timeout + SLACK ----------------------------------------------------
TIMEOUT = 0.5


def _sleeping_opaque() -> pw.Workload:
    return with_opaque(lambda y: (time.sleep(3), y)[1])


def _slow_tiles() -> pw.Workload:
    """Many tiles of real work, none stuck: the run's own stop ends it, nothing is abandoned."""
    wl = pw.Workload("slow")
    x = wl.input("X", (8, 8))
    wl.output(wl.opaque("tile", lambda a: (time.sleep(0.05), a)[1], inputs=[x], outputs=[("T", (8, 8))]))
    for k in range(40):
        wl.output(wl.opaque(f"tile{k}", lambda a: (time.sleep(0.05), a)[1], inputs=[x],
                            outputs=[(f"T{k}", (8, 8))]))
    return wl


async def _sleeps_long():
    await csp.sleep(1000)


async def _sleeps_in_host():
    time.sleep(3)


async def _waits_on_channel(channel):
    await channel.receive()


def _timeout_paths():
    """{path: (run it with the timeout, what the RunTimeout names)}; programs are built here, untimed."""
    held = csp.Channel(1, "held")
    stuck = {target: pw.build(_sleeping_opaque(), target, **({} if target == "aicore" else {"workers": 2}))
             for target in ("numpy", "cpu", "aicore")}
    slow = pw.build(_slow_tiles(), "cpu", workers=2)
    paths = {f"{target}, opaque in time.sleep": (functools.partial(prog.run, X=X, timeout=TIMEOUT), "task 'host' on")
             for target, prog in stuck.items()}
    return paths | {
        "cpu, slow tiles": (lambda: slow.run(X=X, timeout=TIMEOUT), "within 0.5 s \\(\\d+ of 41 task instances done"),
        "csp real, process in time.sleep": (lambda: csp.run([_sleeps_in_host], timeout=TIMEOUT),
                                            "virtual thread '_sleeps_in_host'"),
        "csp device, process in time.sleep": (lambda: csp.run([_sleeps_in_host], clock="device", timeout=TIMEOUT),
                                              "virtual thread '_sleeps_in_host'"),
        "csp real, asleep": (lambda: csp.run([_sleeps_long, csp.process(_waits_on_channel, held)],
                                                     timeout=TIMEOUT),
                                     "'_sleeps_long' \\(running or asleep\\); '_waits_on_channel' waits to "
                                     "receive from channel 'held'"),
        "csp device, asleep": (lambda: csp.run([_sleeps_long], clock="device", timeout=TIMEOUT),
                                       "within 0.5 s of its device clock"),
    }


def test_every_timeout_path_returns_in_time():
    """Each path raises RunTimeout (never trio.TooSlowError) within timeout + SLACK, naming what was
    running; stuck host code is abandoned with a warning; the caller's input is untouched."""
    before, whole = X.copy(), time.perf_counter()
    for name, (do, message) in _timeout_paths().items():
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as warned, pytest.raises(pw.RunTimeout, match=message):
            warnings.simplefilter("always")
            do()
        took = time.perf_counter() - start
        assert took < TIMEOUT + SLACK, f"{name}: {took:.2f} s"
        stuck = "time.sleep" in name
        abandoned = [w for w in warned if "abandoned thread" in str(w.message)]
        assert len(abandoned) == stuck, f"{name}: {[str(w.message) for w in warned]}"
        np.testing.assert_array_equal(X, before)
    assert time.perf_counter() - whole < 20


def test_an_abandoned_run_names_its_thread_and_leaves_later_runs_working():
    release = threading.Event()
    wl = with_opaque(lambda y: (release.wait(10), y)[1])
    prog = pw.build(wl, "cpu", workers=2)
    with pytest.warns(RuntimeWarning, match="abandoned thread .*task 'host' .* still running"), \
            pytest.raises(pw.RunTimeout, match=f"{GRACE:g} s after the run was stopped; its thread is abandoned"):
        prog.run(X=X, timeout=TIMEOUT)
    release.set()  # the stuck code returns; its thread ends
    np.testing.assert_array_equal(prog.run(X=X, timeout=5)["W"], 4 * X)  # Z = Y = 2X, W = Z + Y


def test_a_timeout_does_not_change_results():
    prog = pw.build(with_opaque(lambda y: y + 1.0), "aicore")
    np.testing.assert_array_equal(prog.run(X=X, timeout=30)["W"], prog.run(X=X)["W"])


async def _opens_a_trio_nursery():
    async with trio.open_nursery():
        pass


@pytest.mark.parametrize("clock", ["real", "device"])
def test_a_trio_nursery_inside_a_csp_process_is_an_input_error_saying_what_to_use(clock):
    with pytest.raises(pw.InputError, match=r"process '_opens_a_trio_nursery' called trio, which pw.csp does not "
                                            r"run: .*pw.csp.run\(\[...\]\) starts them \(no nurseries\)"):
        csp.run([_opens_a_trio_nursery], clock=clock)
