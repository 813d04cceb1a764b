"""Operator lowering choices, checked on the reference device against numpy: gathers at known
indices, and which work fuses into which kernel."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox
from tunesearch.graph.ops import ReduceOps


def _model(nodes, inputs, outputs, inits=(), opset: int = 13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("indices", [
    np.array(3), np.array([1, 2, 3, 4]), np.array([6, 4, 2, 0]), np.array([0, 0, 1, 1, 2, 2]),
    np.array([[5, 1], [1, 0]]), np.arange(40) % 7, np.array([-1, 0])],
    ids=["scalar", "run", "strided", "repeated", "2d", "many", "negative"])
def test_gather_at_known_indices(indices):
    data = np.arange(2 * 7 * 3, dtype=np.float32).reshape(2, 7, 3)
    proto = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
                   [_value("x", [2, 7, 3])], [_value("y", None)],
                   [numpy_helper.from_array(indices.astype(np.int64), "i")])
    out = tox.load(proto, device="reference")(data)["y"]
    np.testing.assert_array_equal(out, np.take(data, indices, axis=1))


def _reduces(model) -> int:
    return sum(any(isinstance(n.op, ReduceOps) for n in item.kernel.expr.walk())
               for item in model.schedule())


def test_conv_batchnorm_relu_is_one_matmul_and_a_residual_reads_it_once():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    bn = [np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5 for _ in range(4)]
    inits = [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(v, n) for v, n in
                                                 zip(bn, ["s", "b", "m", "v"])]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"]),
             helper.make_node("Mul", ["r", "y"], ["z"])]  # r read twice: computed once
    proto = _model(nodes, [_value("x", [1, 4, 6, 6])], [_value("z", [1, 4, 6, 6])], inits)
    model = tox.load(proto, device="reference")
    assert _reduces(model) == 1
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 4, 6, 6), np.float32)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 6], w[:, :, i, j])
    s, b, m, v = (a.reshape(1, 4, 1, 1) for a in bn)
    r = np.maximum((conv - m) / np.sqrt(v + 1e-5) * s + b, 0)
    np.testing.assert_allclose(model(x)["z"], r * (r + x), rtol=1e-4, atol=1e-4)
