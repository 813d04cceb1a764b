"""Models for the ONNX tests, built with onnx.helper, and the onnxruntime reference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tunesearch.examples.blocks import _init, transformer_block  # noqa: F401  (the block: tests)
from tunesearch.examples.zoo import LIGHT_MODELS, light_model  # noqa: F401  (used by the tests)


def mlp(seed: int = 0) -> onnx.ModelProto:
    """Gemm + Relu + MatMul/Add + Sigmoid over a dynamic batch ('batch', 32)."""
    rng, inits = np.random.default_rng(seed), []
    w1 = _init(inits, rng, "w1", (64, 32), 0.25)
    b1 = _init(inits, rng, "b1", (64,))
    w2 = _init(inits, rng, "w2", (64, 8), 0.2)
    b2 = _init(inits, rng, "b2", (8,))
    nodes = [helper.make_node("Gemm", ["x", w1, b1], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", w2], ["o"], name="fc2"),
             helper.make_node("Add", ["o", b2], ["ob"], name="bias2"),
             helper.make_node("Sigmoid", ["ob"], ["y"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict, threads: int = 1) -> dict:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
