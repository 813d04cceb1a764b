"""Convolutions whose output channels outnumber their positions run as a matmul with the
channels on the vector lanes and the weight as the column operand; the result matches
onnxruntime, grouped or not, 1x1 or wider, with a bias and an activation after it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox
from tests.onnx.models import onnxruntime_outputs

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("k,groups,cout", [(3, 1, 48), (1, 1, 40), (3, 2, 64), (5, 4, 128)])
def test_channels_on_lanes_match_onnxruntime(k, groups, cout):
    cin, size = 8, 5
    w = (RNG.standard_normal((cout, cin // groups, k, k)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, group=groups),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = tox.load(proto, device="cpu")
    feeds = model.random_inputs(2)
    np.testing.assert_allclose(model(feeds)["y"], onnxruntime_outputs(proto, feeds)["y"],
                               rtol=1e-4, atol=1e-4)
    matmul = next(item.kernel for item in model.schedule() if item.kernel.n_reduce)
    # the reduce's output axes end in (positions, channels): the channels are the lanes
    assert matmul.domain[matmul.n_out - 2:matmul.n_out] == (size * size, cout // groups)
