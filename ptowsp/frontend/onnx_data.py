"""An ONNX model as data: the model file parsed (`load`: protobuf, never executed; text that is not
UTF-8 refused), and the values of its tensors, external data files included, read only inside the
model's folder.

Exporters put weights in a second file (torch writes `model.onnx.data`) that the model names by a
location relative to itself.  ptowsp reads it relative to the folder of the model file, whatever
the current directory (onnx's own loader reads relative to the current directory unless told
otherwise: a second export of the same name elsewhere would be read without a word).  A file is
data from whoever wrote it, so a location is refused with an InputError naming the tensor and the
location when it is absolute or leads out of that folder (`..`, or a symlink pointing out), and a
missing or short file is an InputError too, never onnx's raw exception (docs/security.md).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ptowsp.errors import InputError
from ptowsp.frontend.onnx_budget import DEFAULT_MAX_BYTES, check_size


def tensor_array(tensor: onnx.TensorProto, folder: Path | None, source: str, what: str,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
    """The tensor's value; `folder` is the model file's (None: the model came as bytes or a proto, so
    external data has no folder to come from); `what` names the tensor in errors; its dims are sized
    against `max_bytes` before anything is read (onnx_budget.py)."""
    if any(d < 0 for d in tensor.dims):  # (numpy would read [-1, 4] as whatever fits)
        raise InputError(f"{source}: {what} has dimensions {list(tensor.dims)}; a dimension is at least 0")
    if tensor.data_type in onnx.helper.get_all_tensor_dtypes():  # (an unknown type: _to_array says so)
        check_size(tensor.dims, onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type), max_bytes,
                   f"{source}: {what}")
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return _to_array(tensor, source, what)
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    if folder is None:
        raise InputError(f"{source}: {what} keeps its data in an external file ({location!r}), and a model given "
                         "as bytes or a ModelProto has no folder to read it from; pass the model file's path")
    path = _inside(folder, location, source, what)
    try:
        offset, length = int(entries.get("offset", 0)), int(entries["length"]) if "length" in entries else None
    except ValueError:
        raise InputError(f"{source}: {what}: offset {entries.get('offset')!r} and length {entries.get('length')!r} "
                         f"of its external data in {location!r} must be integers") from None
    size = path.stat().st_size
    if offset < 0 or (length is not None and length < 0) or offset + (length or 0) > size:
        raise InputError(f"{source}: {what} reads bytes {offset} to {offset + (length or 0)} of {location!r}, "
                         f"which holds {size}: the data file is short or not this model's")
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(size - offset if length is None else length)
    inline = onnx.TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = onnx.TensorProto.DEFAULT
    inline.raw_data = data
    return _to_array(inline, source, what)


def _inside(folder: Path, location: str, source: str, what: str) -> Path:
    """The file `location` names inside `folder`; InputError when it leads anywhere else or is missing."""
    if not location or os.path.isabs(location) or Path(location).drive:
        raise InputError(f"{source}: {what} names its external data file {location!r}; a location must be a "
                         "path relative to the model's folder")
    root = folder.resolve()
    path = (root / location).resolve()
    if not path.is_relative_to(root):
        raise InputError(f"{source}: {what} names its external data file {location!r}, which lies outside the "
                         f"model's folder {str(root)!r}; ptowsp reads nothing outside it")
    if not path.is_file():  # (is_file: a regular file, so no FIFO or device blocks the import)
        raise InputError(f"{source}: {what} keeps its data in {location!r}, which is not a file in the model's "
                         f"folder {str(root)!r}")
    return path


def _to_array(tensor: onnx.TensorProto, source: str, what: str) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:  # noqa: BLE001 - onnx's ValueError, TypeError...: the bytes do not make the tensor
        raise InputError(f"{source}: {what}: its data does not make a tensor of shape {list(tensor.dims)} "
                         f"({type(e).__name__}: {e})") from None


__all__ = ["tensor_array"]


def load(model: str | os.PathLike | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str, Path | None]:
    """The model, how to name it in errors, and the folder its external data files are in (the model
    file's; None for bytes or a proto); InputError for what is no ONNX model."""
    folder = None
    if isinstance(model, onnx.ModelProto):
        return model, f"ONNX model {model.graph.name or '(unnamed)'!r}", None
    if isinstance(model, (bytes, bytearray)):
        source = "ONNX model given as bytes"
        data = bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        source = f"ONNX file {str(model)!r}"
        folder = Path(model).parent
        try:
            if not stat.S_ISREG(os.stat(model).st_mode):  # a FIFO or device would block or never end
                raise InputError(f"{source}: not a regular file (a directory, FIFO or device); give a model file")
            data = Path(model).read_bytes()
        except OSError as e:
            raise InputError(f"{source}: cannot read it: {e.strerror or e}") from e
    else:
        raise InputError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends: the file is no model
        raise InputError(f"{source}: not an ONNX model ({type(e).__name__}: {e})") from e
    if not proto.graph.node and not proto.graph.output:
        raise InputError(f"{source}: not an ONNX model (no graph)")
    bad = _not_utf8(proto)
    if bad:
        raise InputError(f"{source}: not an ONNX model (the text of {bad} is not UTF-8)")
    return proto, source, folder


def _not_utf8(message) -> str | None:
    """The first string field of `message` (at any depth) that protobuf could not decode as UTF-8 (it
    hands such a field over as bytes), named by its path; None when every one is text."""
    stack = [("model", message)]
    while stack:
        path, found = stack.pop()
        for field, value in found.ListFields():
            values = value if field.is_repeated else [value]
            if field.type == field.TYPE_STRING and any(isinstance(v, bytes) for v in values):
                return f"{path}.{field.name}"
            if field.type == field.TYPE_MESSAGE:
                stack.extend((f"{path}.{field.name}", v) for v in values)
    return None
