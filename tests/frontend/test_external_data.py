"""Weights in external data files (as torch's exporter writes them): read from the model's folder,
whatever the current directory, and never from outside it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import external_data_helper as ext
from onnx import helper as oh
from onnx import numpy_helper as nh

import ptowsp as pw

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def matmul_model(weights: np.ndarray) -> onnx.ModelProto:
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [oh.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, [3, 2])], [nh.from_array(weights, "w")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def export(folder: Path, weights: np.ndarray) -> Path:
    """model.onnx with its weights in model.onnx.data beside it, as torch's exporter writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(matmul_model(weights), path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    assert (folder / "model.onnx.data").exists()
    return path


def pointing_to(folder: Path, location: str, offset: int = 0, length: int = 32) -> Path:
    """A model whose weight `w` says its data is at `location`."""
    m = matmul_model(np.zeros((4, 2), np.float32))
    w = m.graph.initializer[0]
    ext.set_external_data(w, location=location, offset=offset, length=length)
    w.data_location = TP.EXTERNAL
    w.ClearField("raw_data")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def test_the_data_file_is_the_one_beside_the_model_whatever_the_current_directory(tmp_path, monkeypatch):
    ones, twos = np.ones((4, 2), np.float32), np.full((4, 2), 2.0, np.float32)
    export(tmp_path / "a", ones)
    b = export(tmp_path / "b", twos)
    monkeypatch.chdir(tmp_path / "a")  # a model.onnx.data of another model is in the current directory
    wl = pw.frontend.from_onnx(Path("..") / "b" / "model.onnx")
    np.testing.assert_allclose(pw.reference(wl, x=X)["y"], X @ twos)
    monkeypatch.chdir(tmp_path)  # and none at all here
    np.testing.assert_allclose(pw.build(pw.frontend.from_onnx(str(b)), "cpu").run(x=X)["y"], X @ twos)


@pytest.mark.parametrize("location, message", [
    ("../secret.bin", "outside the model's folder"),
    ("sub/../../secret.bin", "outside the model's folder"),
    ("/etc/passwd", "must be a path relative to the model's folder"),
    ("", "must be a path relative to the model's folder"),
    ("missing.data", "not a file in the model's folder"),
])
def test_a_location_outside_the_folder_or_missing_is_an_input_error(tmp_path, location, message):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    path = pointing_to(tmp_path / "model", location)
    with pytest.raises(pw.InputError, match=f"initializer 'w' .*{location!r}.*{message}"):
        pw.frontend.from_onnx(path)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_symlink_pointing_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    folder = tmp_path / "model"
    path = pointing_to(folder, "weights.bin")
    (folder / "weights.bin").symlink_to(tmp_path / "secret.bin")
    with pytest.raises(pw.InputError, match="'weights.bin', which lies outside the model's folder"):
        pw.frontend.from_onnx(path)


def test_a_short_data_file_is_an_input_error(tmp_path):
    folder = tmp_path / "model"
    path = pointing_to(folder, "weights.bin", offset=16, length=32)
    (folder / "weights.bin").write_bytes(b"\0" * 40)
    with pytest.raises(pw.InputError, match="initializer 'w' reads bytes 16 to 48 of 'weights.bin', which holds 40"):
        pw.frontend.from_onnx(path)
    (folder / "weights.bin").write_bytes(b"\0" * 64)
    pointing_to(folder, "weights.bin", offset=0, length=12)  # 12 bytes for a 4 x 2 float32 tensor
    with pytest.raises(pw.InputError, match=r"initializer 'w': its data does not make a tensor of shape \[4, 2\]"):
        pw.frontend.from_onnx(path)


def test_a_model_given_as_bytes_cannot_read_external_data(tmp_path):
    path = export(tmp_path, np.ones((4, 2), np.float32))
    with pytest.raises(pw.InputError, match="given as bytes or a ModelProto has no folder.*pass the model file's path"):
        pw.frontend.from_onnx(path.read_bytes())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_only_regular_files_are_read(tmp_path):
    """A FIFO would block the import for ever, a directory is no model: both refused at once."""
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(pw.InputError, match="not a regular file"):
            pw.frontend.from_onnx(path)
    folder = tmp_path / "model"
    path = pointing_to(folder, "weights.bin")
    os.mkfifo(folder / "weights.bin")  # the external data file a FIFO: refused, not read
    with pytest.raises(pw.InputError, match="'weights.bin', which is not a file"):
        pw.frontend.from_onnx(path)


def test_a_negative_dimension_is_refused():
    m = matmul_model(np.ones((4, 2), np.float32))
    m.graph.initializer[0].dims[:] = [-1, 2]
    with pytest.raises(pw.InputError, match=r"initializer 'w' has dimensions \[-1, 2\]; a dimension is at least 0"):
        pw.frontend.from_onnx(m)
