"""Models for the ONNX tests, built with onnx.helper, and the onnxruntime reference."""
from __future__ import annotations

import onnx

from tunesearch.examples import blocks
from tunesearch.examples.blocks import transformer_block  # noqa: F401  (used by the tests)
from tunesearch.examples.zoo import LIGHT_MODELS, light_model  # noqa: F401  (used by the tests)


def mlp(seed: int = 0) -> onnx.ModelProto:
    """Gemm + Relu + MatMul/Add + Sigmoid over a dynamic batch ('batch', 32)."""
    return blocks.mlp("mlp", "batch", 32, 64, 8, (0.25, 0.2), seed)


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict, threads: int = 1) -> dict:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def kernels_matching_onnxruntime(proto: onnx.ModelProto, seed: int) -> list:
    """The model's kernels on the CPU, once its output 'y' on random inputs matches
    onnxruntime's."""
    import numpy as np
    import tunesearch.onnx as tox
    model = tox.load(proto, device="cpu")
    feeds = model.random_inputs(seed)
    np.testing.assert_allclose(model(feeds)["y"], onnxruntime_outputs(proto, feeds)["y"],
                               rtol=1e-4, atol=1e-4)
    return [item.kernel for item in model.schedule()]
