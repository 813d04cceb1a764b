"""Reading an ONNX model from a file, bytes or a ModelProto, with its external data.

A model may keep large tensors in files beside it (`location`, `offset`, `length` in the tensor's
`external_data`). Each is checked before a byte is read: the location is relative and stays
inside the model's folder once links are resolved, the file exists, and the range lies within
it. A problem is a one-line `ExternalDataError` naming the tensor and the file.
"""
from __future__ import annotations

import os
from pathlib import Path
import onnx
from google.protobuf.message import DecodeError

from tunesearch.onnx.declared import tensors
from tunesearch.onnx.registry import ModelNotFoundError, NotOnnxError, OnnxImportError


class ExternalDataError(OnnxImportError):
    """A tensor whose external data is missing, out of range or outside the model's folder."""


def read_model(source) -> onnx.ModelProto:
    """The ModelProto of a path, bytes or ModelProto, its external data loaded and checked."""
    if isinstance(source, onnx.ModelProto):
        return source
    base = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, label = bytes(source), "the given bytes"
    else:
        path = Path(source)
        if not path.is_file():
            what = "is a folder, not a model file" if path.is_dir() else "does not exist"
            raise ModelNotFoundError(f"no such model file: {path} {what}")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ModelNotFoundError(f"cannot read model {path}: {err.strerror or err}") from None
        label, base = str(path), path.parent
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise NotOnnxError(f"{label} is not an ONNX model ({exc})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise NotOnnxError(f"{label} is not an ONNX model (no graph with outputs)")
    external = [t for t in tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        if base is None:
            raise ExternalDataError(f"{label}: tensor '{external[0].name}' keeps its data in a "
                                    "file; load the model from its path, not from bytes")
        for tensor in external:
            check_external_data(tensor, base, label)
        from onnx.external_data_helper import load_external_data_for_model
        try:
            load_external_data_for_model(model, str(base))
        except (OSError, ValueError, onnx.checker.ValidationError) as err:
            raise ExternalDataError(f"{label}: cannot load its external data: {err}") from None
    return model


def check_external_data(tensor: onnx.TensorProto, base: Path, label: str) -> None:
    """Refuse a tensor whose external data is not a range of a file inside the folder `base`."""
    fields = {entry.key: entry.value for entry in tensor.external_data}
    name = f"{label}: tensor '{tensor.name}'"
    location = fields.get("location", "")
    if not location:
        raise ExternalDataError(f"{name} keeps its data in a file but names none")
    if os.path.isabs(location) or Path(location).drive:
        raise ExternalDataError(f"{name}: external data {location!r} is an absolute path; "
                                "it must be relative to the model's folder")
    folder = base.resolve()
    target = (folder / location).resolve()
    if folder != target and folder not in target.parents:
        raise ExternalDataError(f"{name}: external data {location!r} is outside the model's "
                                f"folder {base}")
    if not target.is_file():
        raise ExternalDataError(f"{name}: external data file {location!r} is missing "
                                f"(looked in {base})")
    try:
        offset = int(fields.get("offset") or 0)
        length = int(fields["length"]) if fields.get("length") else None
    except ValueError:
        raise ExternalDataError(f"{name}: external data offset or length is not an integer"
                                ) from None
    size = target.stat().st_size
    if offset < 0 or length is not None and length < 0 or \
            offset + (length or 0) > size or offset > size:
        raise ExternalDataError(f"{name}: external data {location!r} has {size} bytes; "
                                f"offset {offset} and length {length} lie outside them")
