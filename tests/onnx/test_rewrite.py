"""Graph rewrites at load: scale and shift nodes folded into the weights before them, checked
against onnxruntime on small graphs and the zoo models, with the kernel counts they lead to."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox
from tests.onnx.models import light_model, onnxruntime_outputs

RNG = np.random.default_rng(7)


def _t(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _rand(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bn(prefix: str, c: int) -> list[onnx.TensorProto]:
    return [_t(f"{prefix}.s", 1 + 0.1 * RNG.standard_normal(c)),
            _t(f"{prefix}.b", 0.1 * RNG.standard_normal(c)),
            _t(f"{prefix}.m", 0.1 * RNG.standard_normal(c)),
            _t(f"{prefix}.v", RNG.uniform(0.5, 1.5, c))]


def _model(nodes, inits, x_shape, y_shape, extra_inputs=(), opset=17) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)] + list(extra_inputs)
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _conv_bn_relu(x: str, out: str, prefix: str, cin: int, cout: int, k: int, inits: list,
                  relu: bool = True) -> list[onnx.NodeProto]:
    inits += [_t(f"{prefix}.w", _rand(cout, cin, k, k)), _t(f"{prefix}.bias", _rand(cout))]
    inits += _bn(prefix, cout)
    nodes = [helper.make_node("Conv", [x, f"{prefix}.w", f"{prefix}.bias"], [f"{prefix}.c"],
                              pads=[k // 2] * 4),
             helper.make_node("BatchNormalization", [f"{prefix}.c"] +
                              [f"{prefix}.{p}" for p in "sbmv"],
                              [f"{prefix}.n" if relu else out], epsilon=1e-3)]
    if relu:
        nodes.append(helper.make_node("Relu", [f"{prefix}.n"], [out]))
    return nodes


def _check(proto, feeds=None, rtol=1e-4):
    """Run the model with and without rewrites and in onnxruntime; return the loaded model."""
    model = tox.load(proto, device="cpu")
    feeds = feeds or model.random_inputs(0)
    ours = model(feeds)
    theirs = onnxruntime_outputs(proto, feeds)
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, rtol=rtol, atol=rtol)
    return model


def _in_place_width(channels: int) -> int:
    """Output columns over which a 3x3 convolution into `channels` (at most
    FEW_CHANNELS_VECTORS vectors of them) reads its windows in place from the padded input at
    this target (lowering/conv._direct): rows of FEW_CHANNELS_ROW_VECTORS vectors, and at least
    the 12 the tests were written with. At AVX-512 that is 16 (rows of 12 went through an
    im2col copy there, and were read in place at AVX2), so the kernel counts hold at every
    vector width."""
    from tunesearch.lowering.conv import FEW_CHANNELS_ROW_VECTORS, FEW_CHANNELS_VECTORS
    from tunesearch.runtime.device import get_device
    lanes = get_device("cpu").info().target.lanes(4)
    assert channels <= FEW_CHANNELS_VECTORS * lanes
    return max(12, FEW_CHANNELS_ROW_VECTORS * lanes)


def test_conv_bn_relu_is_one_conv_kernel_after_its_copies():
    inits: list = []
    nodes = _conv_bn_relu("x", "y", "b1", 8, 16, 3, inits)
    width = _in_place_width(16)
    model = _check(_model(nodes, inits, [1, 8, 12, width], [1, 16, 12, width]))
    assert model.rewrites == {"BatchNormalization into Conv": 1}
    names = [item.kernel.name for item in model.schedule()]
    # the padded input, then conv + bias + relu in one reduce kernel reading its windows
    assert len(names) == 2 and names[-1].startswith("r_") and names[0].startswith("E_"), names
    # a 1x1 conv + bn + relu is one kernel
    inits = []
    nodes = _conv_bn_relu("x", "y", "b1", 8, 16, 1, inits)
    model = _check(_model(nodes, inits, [1, 8, 12, 12], [1, 16, 12, 12]))
    assert model.rewrites == {"BatchNormalization into Conv": 1}
    assert len(model.schedule()) == 1


def test_residual_block_adds_and_activates_in_the_second_conv():
    inits: list = []
    nodes = _conv_bn_relu("x", "h", "c1", 16, 16, 3, inits)
    nodes += _conv_bn_relu("h", "h2", "c2", 16, 16, 3, inits, relu=False)
    nodes += [helper.make_node("Add", ["h2", "x"], ["sum"]),
              helper.make_node("Relu", ["sum"], ["y"])]
    width = _in_place_width(16)
    model = _check(_model(nodes, inits, [1, 16, 10, width], [1, 16, 10, width]))
    assert model.rewrites == {"BatchNormalization into Conv": 2}
    # the model's input copied padded; the first conv writes the second's padded input in
    # place (kernels of its border read nothing); each conv reads its windows with its
    # epilogue (the residual add and the relu in the second one's)
    kinds = [item.kernel.name[0] for item in model.schedule() if len(item.kernel.buffers) > 1]
    assert kinds == ["E", "r", "r"]


@pytest.mark.parametrize("shape", [(), (1,), (12, 1, 1), (1, 12, 1, 1)])
def test_constant_mul_and_add_fold_into_a_conv(shape):
    inits = [_t("w", _rand(12, 4, 3, 3)), _t("scale", 1 + _rand(*shape)),
             _t("shift", _rand(*shape))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Mul", ["scale", "c"], ["m"]),
             helper.make_node("Add", ["m", "shift"], ["y"])]
    model = _check(_model(nodes, inits, [2, 4, 7, 7], [2, 12, 5, 5]))
    assert model.rewrites == {"Mul into Conv": 1, "Add into Conv": 1}


def test_gemm_and_matmul_fold_their_scales():
    inits = [_t("w1", _rand(20, 9)), _t("c1", _rand(20)), _t("s1", 1 + _rand(20)),
             _t("t1", _rand(1, 20)), _t("w2", _rand(20, 6)), _t("s2", 1 + _rand(6))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "c1"], ["g"], transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Mul", ["g", "s1"], ["gm"]),
             helper.make_node("Add", ["gm", "t1"], ["ga"]),
             helper.make_node("MatMul", ["ga", "w2"], ["mm"]),
             helper.make_node("Mul", ["mm", "s2"], ["y"])]
    model = _check(_model(nodes, inits, [5, 9], [5, 6]))
    assert model.rewrites == {"Mul into Gemm": 1, "Add into Gemm": 1, "Mul into MatMul": 1}


def test_rewrites_that_do_not_apply_run_unfused_and_right():
    # a weight that is a graph input, a per-position constant, a conv read twice
    inits = [_t("w", _rand(6, 3, 3, 3)), _t("pos", _rand(1, 1, 6, 6)), _t("s", 1 + _rand(6, 1, 1))]
    w_in = helper.make_tensor_value_info("wx", TensorProto.FLOAT, [6, 3, 3, 3])
    nodes = [helper.make_node("Conv", ["x", "wx"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["a", "s"], ["a2"]),
             helper.make_node("Conv", ["x", "w"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["b", "pos"], ["b2"]),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "c"], ["c2"]),
             helper.make_node("Sum", ["a2", "b2", "c2"], ["y"])]
    proto = _model(nodes, inits, [1, 3, 6, 6], [1, 6, 6, 6], [w_in])
    feeds = {"x": _rand(1, 3, 6, 6), "wx": _rand(6, 3, 3, 3)}
    model = _check(proto, feeds)
    assert model.rewrites == {}


def test_training_mode_batchnorm_uses_the_batch_statistics():
    inits = _bn("n", 5)
    nodes = [helper.make_node("BatchNormalization", ["x"] + [f"n.{p}" for p in "sbmv"], ["y"],
                              training_mode=1, epsilon=1e-4)]
    proto = _model(nodes, inits, [3, 5, 4, 4], [3, 5, 4, 4])
    model = tox.load(proto, device="cpu")
    assert model.rewrites == {}
    x = _rand(3, 5, 4, 4, scale=2.0) + 1.0
    mean = x.mean((0, 2, 3), keepdims=True, dtype=np.float64)
    var = x.var((0, 2, 3), keepdims=True, dtype=np.float64)
    scale, bias = (numpy_helper.to_array(t).reshape(1, 5, 1, 1) for t in inits[:2])
    expected = (x - mean) / np.sqrt(var + 1e-4) * scale + bias
    np.testing.assert_allclose(model(x)["y"], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet50", "shufflenet", "inception_v2"])
def test_zoo_models_with_rewrites_match_onnxruntime(name):
    proto = light_model(name)
    model = tox.load(proto, device="cpu")
    assert model.rewrites.get("BatchNormalization into Conv", 0) >= 49
    feeds = model.random_inputs(1)
    ours, theirs = model(feeds), onnxruntime_outputs(proto, feeds)
    for key, value in theirs.items():
        scale = np.abs(value).max()
        assert np.abs(ours[key] - value).max() <= 1e-4 * scale
