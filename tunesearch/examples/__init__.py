"""Bundled example models: tiny_cnn (made by scripts/make_examples.py) and small PyTorch exports
of transformers and vision models (made by scripts/export_models.py, listed in exports.json).

    >>> from tunesearch import examples
    >>> examples.path("tiny_cnn")        # .../tunesearch/examples/tiny_cnn.onnx
    >>> examples.input_shapes("bert_dynamo")   # {"input_ids": (1, 16), ...}: its exported shapes
"""
from __future__ import annotations

import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The file of a bundled model, by name (without .onnx)."""
    file = FOLDER / f"{name}.onnx"
    if name not in names():  # a bundled name, never a path out of the folder
        known = ", ".join(sorted(p.stem for p in FOLDER.glob("*.onnx")))
        raise FileNotFoundError(f"no bundled example {name!r}; bundled: {known}")
    return file


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.onnx"))


def exports(folder: Path = FOLDER) -> dict[str, dict]:
    """The manifest of the PyTorch exports in folder: per name, its family, exporter, opset,
    versions, inputs and dynamic axes (entries with "failed" say why an exporter could not)."""
    manifest = Path(folder) / "exports.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else {}


def input_shapes(name: str, folder: Path = FOLDER) -> dict[str, tuple[int, ...]]:
    """The input shapes an export was made with (empty where it declares them all): the
    default binding of its dynamic axes."""
    entry = exports(folder).get(name, {})
    if not entry.get("dynamic_axes"):
        return {}
    return {k: tuple(v) for k, v in entry["inputs"].items()}
