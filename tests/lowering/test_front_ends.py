"""Both front ends reach one lowering: a convolution or a pool written with `Tensor` in a traced
program and the same node loaded from ONNX run the same kernels (the same keys, in order) and
agree with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox
from tunesearch import Tensor, traced

# (input shape, weight shape, attributes): one per form the lowering chooses on a CPU
CONVS = {
    "channels last": ((1, 32, 28, 28), (64, 32, 3, 3), {"pads": [1] * 4}),
    "channels on lanes": ((1, 64, 7, 7), (128, 64, 3, 3), {"pads": [1] * 4}),
    "in place": ((1, 8, 40, 40), (16, 8, 3, 3), {"pads": [1] * 4}),
    "depthwise": ((1, 16, 20, 20), (16, 1, 3, 3), {"pads": [1] * 4, "group": 16}),
    "pointwise": ((1, 24, 14, 14), (40, 24, 1, 1), {}),
    "first of three channels": ((1, 3, 32, 32), (32, 3, 3, 3), {"strides": [2, 2]}),
    "strided grouped": ((1, 8, 17, 17), (12, 4, 3, 3), {"strides": [2, 2], "group": 2,
                                                        "pads": [0, 1, 1, 0]}),
}


def _onnx_conv(x_shape, w, b, attrs):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("form", sorted(CONVS))
def test_a_convolution_runs_the_same_kernels_from_both_front_ends(form):
    x_shape, w_shape, attrs = CONVS[form]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32) * 0.1
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    proto = _onnx_conv(x_shape, w, b, attrs)
    model = tox.load(proto)
    n = len(x_shape) - 2
    pads = attrs.get("pads", [0] * 2 * n)
    weight, bias = Tensor(w), Tensor(b)
    program = traced(lambda t: t.conv2d(weight, bias, attrs.get("strides", 1), pads,
                                        groups=attrs.get("group", 1)))
    want = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(program(x), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(model(x=x)["y"], want, rtol=1e-4, atol=1e-4)
    onnx_keys = [i.kernel.key for i in model._plan({"x": x_shape}).items]
    tensor_keys = [i.kernel.key for i in program.plan(x).items]
    assert tensor_keys == onnx_keys


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_pool_after_a_convolution_runs_the_same_kernels_from_both_front_ends(op):
    """The pool reads the convolution's channels-last output as it lies, from either front
    end, ceil_mode and padding included."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 32, 28, 28), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32) * 0.1
    b = np.zeros(64, np.float32)
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
         helper.make_node(op, ["c"], ["y"], **pool)], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    weight, bias = Tensor(w), Tensor(b)

    def program(t):
        c = t.conv2d(weight, bias, padding=1)
        if op == "MaxPool":
            return c.max_pool2d(3, 2, 1, ceil_mode=True)
        return c.avg_pool2d(3, 2, 1, count_include_pad=False, ceil_mode=True)
    run = traced(program)
    want = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(x), want, rtol=1e-4, atol=1e-4)
    model = tox.load(proto)
    assert [i.kernel.key for i in run.plan(x).items] == \
        [i.kernel.key for i in model._plan({"x": x.shape}).items]


def test_a_weight_given_as_an_argument_is_not_taken_for_a_constant():
    """A traced program's arguments change from call to call: a convolution whose weight is
    one reads each call's weight (only values fixed at trace time are computed once)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 9, 9), dtype=np.float32)
    run = traced(lambda t, k: t.conv2d(k, padding=1))
    for seed in (4, 5):
        w = np.random.default_rng(seed).standard_normal((32, 16, 3, 3), dtype=np.float32)
        want = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
        np.testing.assert_allclose(run(x, w), want, rtol=1e-4, atol=1e-4)
