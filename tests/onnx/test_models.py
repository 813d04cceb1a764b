"""Models run through tunesearch on the CPU and compared with onnxruntime on random inputs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import tunesearch.onnx as tox
from tests.onnx.models import (LIGHT_MODELS, light_model, mlp, onnxruntime_outputs,
                               transformer_block)
from tunesearch import examples
from tunesearch.examples import blocks

pytest.importorskip("onnxruntime")

# the architectures that cost the most to compile and run; `pytest -m slow` runs them
SLOW = {"inception_v1", "inception_v2", "resnet50", "densenet121", "vgg19", "shufflenet"}


def assert_matches(ours: dict, reference: dict) -> None:
    """Every reference output, same shape and dtype, equal within float32 tolerance (atol
    relative to the output's own scale, so small and large outputs are held alike)."""
    for name, want in reference.items():
        got = ours[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale, err_msg=name)


def test_mlp_with_a_bound_batch_and_a_second_call():
    proto = mlp()
    model = tox.load(proto, input_shapes={"x": (5, 32)})
    assert model.inputs[0].shape == (5, 32) and model.outputs[0].shape == (5, 8)
    for seed in (0, 1):  # the second call replays the same plan on new data
        feeds = model.random_inputs(seed)
        assert_matches(model(feeds), onnxruntime_outputs(proto, feeds))
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    assert_matches(model(x), onnxruntime_outputs(proto, {"x": x}))  # another batch, its own plan


def test_bundled_tiny_cnn():
    path = examples.path("tiny_cnn")
    model = tox.load(path)
    feeds = model.random_inputs(0)
    out = model(feeds)
    assert_matches(out, onnxruntime_outputs(onnx.load(str(path)), feeds))
    assert out["probabilities"].shape == (1, 10)
    assert abs(float(out["probabilities"].sum()) - 1.0) < 1e-5


def test_transformer_encoder_block():
    proto = transformer_block()
    model = tox.load(proto, input_shapes={"x": (2, 10, 32)})
    feeds = model.random_inputs(0)
    assert_matches(model(feeds), onnxruntime_outputs(proto, feeds))
    # the head shapes (Shape -> Gather -> Concat) and the mask slice are folded at import:
    # no kernel computes an int64 shape
    assert all(item.kernel.buffers[0].dtype.is_float for item in model.schedule())


@pytest.mark.parametrize("name", blocks.names())
def test_built_model_at_its_fixed_input_shape(name):
    proto = blocks.model(name)
    model = tox.load(proto)  # the input shapes are fixed: no input_shapes
    feeds = model.random_inputs(0)
    assert_matches(model(feeds), onnxruntime_outputs(proto, feeds))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in LIGHT_MODELS])
def test_onnx_shipped_architecture(name):
    proto = light_model(name)
    model = tox.load(proto)
    feeds = model.random_inputs(0)
    assert_matches(model(feeds), onnxruntime_outputs(proto, feeds))


def test_bundled_tiny_cnn_is_what_the_script_makes():
    import importlib.util
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "scripts" / "make_examples.py"
    spec = importlib.util.spec_from_file_location("make_examples", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    made = module.tiny_cnn()
    assert made.SerializeToString() == onnx.load(str(examples.path("tiny_cnn"))).SerializeToString()
    flops = sum(item.kernel.flops for item in tox.load(made, device="reference").schedule())
    assert 1e6 <= flops <= 1e7  # small enough that `tunesearch tune` on it is quick
