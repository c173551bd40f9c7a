"""The `ptowsp` command: trace and tune, on a zoo workload and on a script."""

from __future__ import annotations

import json
import re

import pytest

import ptowsp as pw
from ptowsp.autoschedule import records
from ptowsp import cli
from ptowsp.cli import main

SCRIPT = '''
import numpy as np
import ptowsp as pw
wl = pw.Workload("small_matmul")
A, B = wl.input("A", (32, 64)), wl.input("B", (64, 32))
k = pw.reduce_axis(64, "k")
wl.output(wl.compute("C", (32, 32), lambda i, j: pw.sum(A[i, k] * B[k, j], axis=k)))
pw.build(wl, "cpu").run(A=np.ones((32, 64), np.float32), B=np.ones((64, 32), np.float32))
'''


def test_trace_writes_the_trace_files(tmp_path, capsys):
    assert main(["trace", "softmax", "--workers", "2", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert (tmp_path / "gantt.png").stat().st_size > 0
    assert "makespan" in capsys.readouterr().out


def test_tune_a_script_appends_to_the_log_and_resumes(tmp_path, capsys):
    script, log = tmp_path / "small.py", tmp_path / "tune.jsonl"
    script.write_text(SCRIPT)
    args = ["tune", str(script), "--trials", "3", "--log", str(log), "--workers", "2", "--plot",
            str(tmp_path / "curve.png")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "default schedule" in out and "tuned" in out and (tmp_path / "curve.png").stat().st_size > 0
    def schedules():
        return len({records.steps_key(r) for r in records.load(log)})

    assert schedules() == 3
    assert main([*args[:3], "4", *args[4:]]) == 0
    assert schedules() == 4


def test_an_unknown_workload_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "nope", "--trials", "2", "--target", "cpu", "--bogus"])
    assert main(["tune", "nope"]) == 2
    assert "'nope' is not a zoo workload" in capsys.readouterr().err
    assert main(["trace", "missing.py"]) == 2
    assert "no script 'missing.py'" in capsys.readouterr().err


def test_a_file_named_like_a_zoo_workload_is_never_run(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    (tmp_path / "softmax").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "softmax", "--workers", "1", "--tasks", "2", "--out", str(tmp_path / "out")]) == 0
    assert not marker.exists()


def test_a_dynamic_zoo_workload_is_traced_at_bound_sizes_and_refused_unbound_by_the_tuner(tmp_path, capsys):
    assert main(["trace", "decode_step", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "trace.json").exists()
    with pytest.raises(pw.ScheduleError, match="symbolic sizes.*search wl.bind"):
        pw.AutoScheduler.search(pw.zoo.decode_step(), "cpu", num_trials=1)


def test_version_and_help_name_everything_a_user_can_choose(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"ptowsp {pw.__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert all(name in top for name in pw.zoo.ZOO) and all(c in top for c in ("show", "bench", "trace", "tune"))
    for command in ("show", "bench", "trace", "tune"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "{" + ",".join(pw.targets()) + "}" in text  # --target lists its choices
        assert "(default: cpu)" in text and "softmax" in text


def test_a_typed_error_is_one_line_naming_the_command(tmp_path, capsys):
    script = tmp_path / "bad.py"
    script.write_text("import ptowsp as pw\npw.Workload('w').schedule().split('x', 'i', 4)\n")
    assert main(["trace", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ptowsp trace: error: ScheduleError: ")


def test_bench_times_the_default_schedule_beside_numpy(capsys):
    assert main(["bench", "softmax", "--runs", "2", "--workers", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].startswith("ptowsp default (cpu)") and rows[3].startswith("numpy (pw.reference)")
    assert rows[3].rstrip().endswith("1.00x") and float(rows[2].split()[-1].rstrip("x")) > 0


def test_show_prints_the_graph_categories_and_default_schedule(capsys):
    assert main(["show", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "Y_exp [INJECTIVE] -> Y, Y_sum" in out and "Y [INJECTIVE] -> (output)" in out
    assert "softmax.schedule()" in out and ".parallel('Y', 'i.outer')" in out


def test_trace_writes_the_median_of_warm_runs(tmp_path, capsys):
    assert main(["trace", "softmax", "--runs", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "the median of 3 runs" in out and "warm run" in (tmp_path / "summary.txt").read_text()


def _onnx_mlp(path, batch="batch"):
    import numpy as np
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["h"], name="fc"), oh.make_node("Relu", ["h"], ["y"])],
                          "tiny_mlp", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], [nh.from_array(w, "w")])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def test_run_and_show_take_an_onnx_model(tmp_path, capsys):
    model = str(_onnx_mlp(tmp_path / "mlp.onnx"))
    assert main(["run", model, "--shape", "x=16,8", "--runs", "2", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "tiny_mlp on cpu" in out and "ptowsp default (cpu)" in out and "checked against pw.reference" in out
    assert main(["show", model, "--shape", "x=16,8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("workload tiny_mlp\n  input x[16, 8] float32\n  output y[16, 4] float32\n  constants: 1 ")
    assert "tasks: 2 (1 COMPLEX_OUT_FUSABLE, 1 INJECTIVE)" in out and "sha256:" not in out  # constants: counted
    assert "1 kernel on cpu" in out and "y [INJECTIVE] <- fc" in out  # the matmul computed inside its epilogue
    assert main(["show", model, "--shape", "x=16,8", "--verbose"]) == 0
    assert "constant w[8, 4] float32 sha256:" in capsys.readouterr().out  # listed, last


@pytest.mark.parametrize("args, message", [
    (["--shape", "x=16,eight"], "--shape 'x=16,eight': expected NAME=D1,D2,... \\(integers\\)"),
    (["--shape", "x=16,9"], "shapes\\['x'\\] = \\[16, 9\\] gives dimension 1 as 9; the model declares it 8"),
])
def test_an_onnx_model_with_a_bad_shape_is_one_line(tmp_path, capsys, args, message):
    model = str(_onnx_mlp(tmp_path / "mlp.onnx"))
    assert main(["run", model, *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err)


def test_an_import_over_its_budgets_is_one_line(tmp_path, capsys):
    """A Loop of 2^40 iterations folded at import (issue: it never ended) and a 4 TiB constant."""
    from tests.robustness.test_import_budget import CASES, _loop

    for name, model in (("loop", _loop(1 << 40)), ("huge", CASES["initializer"][0]())):
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "InputError" in err and "budget" in err, err


def test_a_model_s_symbolic_dimensions_left_unbound_are_bound_for_the_command_and_said_so(tmp_path, capsys):
    model = str(_onnx_mlp(tmp_path / "mlp.onnx"))
    assert main(["run", model, "--runs", "2", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert "symbolic dimensions batch bound to 8 for this command" in captured.err
    assert "checked against pw.reference" in captured.out


def test_tune_an_onnx_model_kernel_by_kernel_then_time_it(tmp_path, capsys):
    import onnx

    from ptowsp.frontend.models import resnet18

    model = tmp_path / "resnet.onnx"
    onnx.save(resnet18(width=8, size=32, classes=10), model)
    log, plot = tmp_path / "model.jsonl", tmp_path / "model.png"
    assert main(["tune", str(model), "--trials", "34", "--log", str(log), "--plot", str(plot), "--runs", "2",
                 "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ModelSearchResult\('resnet18' on 'cpu': \d+ tasks, 34 trials", out)
    assert "share" in out and "stem_conv_conv" in out  # the per-task table
    assert "ptowsp default (cpu)" in out and "ptowsp tuned (cpu)" in out and plot.stat().st_size > 10_000


def test_python_dash_m_ptowsp_is_the_command():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ptowsp", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: ptowsp" in done.stdout and "trace" in done.stdout


class _FakeSession:
    """What `ptowsp run` asks of an onnxruntime session, computing the model with onnx's reference
    evaluator (onnxruntime is a benchmark peer, not installed for the tests); `off` spoils its output."""

    def __init__(self, path, off=0.0):
        from onnx.reference import ReferenceEvaluator

        self.evaluator, self.off = ReferenceEvaluator(str(path)), off
        self.names = [i for i in self.evaluator.input_names]

    def get_inputs(self):
        return [type("Input", (), {"name": n}) for n in self.names]

    def run(self, _, feeds):
        return [y + self.off for y in self.evaluator.run(None, feeds)]


@pytest.mark.parametrize("off", [0.0, 1.0])
def test_run_checks_a_model_against_onnxruntime_too(tmp_path, capsys, monkeypatch, off):
    import ptowsp.cli as cli

    model = _onnx_mlp(tmp_path / "mlp.onnx")
    monkeypatch.setattr(cli, "onnxruntime_session", lambda path: _FakeSession(path, off))
    code = main(["run", str(model), "--shape", "x=16,8", "--runs", "2", "--workers", "2"])
    captured = capsys.readouterr()
    if off:
        assert code == 2 and "output 'y' differs from onnxruntime's: largest error 1" in captured.err
    else:
        assert code == 0 and "checked against pw.reference and onnxruntime (largest error" in captured.out


def test_a_quantized_model_is_checked_to_a_quantization_step():
    """Its values round to steps: float sums in another order move one across a boundary now and then."""
    from pathlib import Path

    exported = Path(__file__).parent / "frontend" / "exported"
    assert cli.tolerance(exported / "resnet50_int8.onnx") == cli.QUANTIZED_RTOL
    assert cli.tolerance(exported / "resnet50.onnx") == cli.tolerance("matmul") == cli.CHECK_RTOL
