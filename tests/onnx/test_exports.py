"""The bundled PyTorch exports (scripts/export_models.py: BERT, GPT-2, T5, ViT, Whisper,
MobileNetV3, EfficientNet from both exporters) on the CPU device against onnxruntime, with token
ids and masks as int64 inputs and a sequence length that changes between calls. PyTorch is not
needed: the fixtures are committed."""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

import tunesearch.onnx as tox
from tunesearch import examples

MANIFEST = json.loads((examples.FOLDER / "exports.json").read_text())
EXPORTED = sorted(name for name, entry in MANIFEST.items() if "file" in entry)
# the two exports of a CNN differ only in how the head is written (Flatten or Reshape, a global
# pool or a mean), which the reference device checks; their convolutions compile once, on the
# dynamo export, to keep the suite's compile time down
REFERENCE_ONLY = {"mobilenet_v3_torchscript", "efficientnet_torchscript"}


def _inputs(entry: dict, length: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids below the vocabulary, a mask with padding at the end, normal floats; a new
    sequence length where the export left that axis dynamic."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in entry["inputs"].items():
        shape = list(shape)
        for axis in entry["dynamic_axes"].get(name, {}):
            shape[int(axis)] = length or shape[int(axis)]
        if "mask" in name:
            mask = np.ones(shape, np.int64)
            mask[..., shape[-1] - shape[-1] // 4:] = 0
            out[name] = mask
        elif "ids" in name:
            out[name] = rng.integers(0, 256, shape).astype(np.int64)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _compare(path: str, model, feeds) -> None:
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = model(feeds)
    for info, w in zip(model.outputs, want):
        g = got[info.name]
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 1e-3 * np.abs(w).max(), info.name


def test_every_family_was_exported_by_at_least_one_exporter():
    families = {entry["family"] for entry in MANIFEST.values()}
    assert families == {MANIFEST[n]["family"] for n in EXPORTED}
    assert {"bert", "gpt2", "t5", "vit", "whisper", "mobilenet_v3", "efficientnet"} <= families


@pytest.mark.parametrize("name", EXPORTED)
def test_export_matches_onnxruntime(name):
    entry = MANIFEST[name]
    path = str(examples.FOLDER / entry["file"])
    shapes = {k: tuple(v) for k, v in entry["inputs"].items()}
    device = "reference" if name in REFERENCE_ONLY else "cpu"
    model = tox.load(path, input_shapes=shapes, device=device)
    _compare(path, model, _inputs(entry))


@pytest.mark.parametrize("name", ["bert_dynamo", "bert_torchscript", "gpt2_dynamo"])
def test_a_new_sequence_length_is_a_plan_of_its_own_and_reused(name):
    entry = MANIFEST[name]
    path = str(examples.FOLDER / entry["file"])
    model = tox.load(path, input_shapes={k: tuple(v) for k, v in entry["inputs"].items()},
                     device="cpu")
    for length in (9, 24, 9):
        _compare(path, model, _inputs(entry, length, seed=length))
    assert len(model._plans) == 3  # the bound length, 9 and 24: the second 9 reused its plan


def _cuda_or_skip():
    from tunesearch.runtime.device import DeviceUnavailable, get_device
    try:
        return get_device("cuda")
    except DeviceUnavailable as exc:
        pytest.skip(f"no CUDA device: {exc}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bert_dynamo", "gpt2_dynamo", "vit_dynamo",
                                  "mobilenet_v3_dynamo"])
def test_export_matches_onnxruntime_on_a_cuda_gpu(name):
    """The same fixtures through CUDA C at the kernels' default configs: a transformer's
    int64 index arithmetic and masks, and a CNN's depthwise convolutions, on a GPU."""
    _cuda_or_skip()
    entry = MANIFEST[name]
    path = str(examples.FOLDER / entry["file"])
    model = tox.load(path, input_shapes={k: tuple(v) for k, v in entry["inputs"].items()},
                     device="cuda")
    _compare(path, model, _inputs(entry))
