"""Bundled example models (made by scripts/make_examples.py).

    >>> from tunesearch import examples
    >>> examples.path("tiny_cnn")        # .../tunesearch/examples/tiny_cnn.onnx
"""
from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The file of a bundled model, by name (without .onnx)."""
    file = FOLDER / f"{name}.onnx"
    if not file.is_file():
        known = ", ".join(sorted(p.stem for p in FOLDER.glob("*.onnx")))
        raise FileNotFoundError(f"no bundled model {name!r}; bundled: {known}")
    return file


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.onnx"))
