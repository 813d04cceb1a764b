"""Write the bundled example models (tunesearch/examples/*.onnx), deterministically.

    python scripts/make_examples.py

tiny_cnn.onnx: a small image classifier, batch 1, 3x32x32 input, about 3.6 MFLOP:
conv 3->16 (3x3) + batch norm + relu + max pool, conv 16->32 (3x3) + batch norm + relu + max pool,
flatten, gemm 2048->64 + relu, gemm 64->10, softmax. Weights are seeded random (He init), so the
model is a real workload for `tunesearch tune`, not a trained classifier.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EXAMPLES = Path(__file__).resolve().parent.parent / "tunesearch" / "examples"


def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        data = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        inits.append(numpy_helper.from_array(data.astype(np.float32), name))
        return name

    def vector(name: str, values: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    x = "input"
    for i, (cin, cout) in enumerate([(3, 16), (16, 32)], start=1):
        w = weight(f"conv{i}.weight", (cout, cin, 3, 3), cin * 9)
        b = vector(f"conv{i}.bias", rng.standard_normal(cout) * 0.1)
        nodes.append(helper.make_node("Conv", [x, w, b], [f"conv{i}"], name=f"conv{i}",
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        bn = [vector(f"bn{i}.{n}", v) for n, v in (
            ("scale", 1 + 0.1 * rng.standard_normal(cout)),
            ("bias", 0.1 * rng.standard_normal(cout)),
            ("mean", 0.1 * rng.standard_normal(cout)), ("var", rng.uniform(0.5, 1.5, cout)))]
        nodes.append(helper.make_node("BatchNormalization", [f"conv{i}", *bn], [f"bn{i}"],
                                      name=f"bn{i}", epsilon=1e-5))
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"], name=f"relu{i}"))
        nodes.append(helper.make_node("MaxPool", [f"relu{i}"], [f"pool{i}"], name=f"pool{i}",
                                      kernel_shape=[2, 2], strides=[2, 2]))
        x = f"pool{i}"
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    w = weight("fc1.weight", (64, 2048), 2048)
    b = vector("fc1.bias", np.zeros(64))
    nodes.append(helper.make_node("Gemm", ["flat", w, b], ["fc1"], name="fc1", transB=1))
    nodes.append(helper.make_node("Relu", ["fc1"], ["fc1_relu"], name="fc1_relu"))
    w = weight("fc2.weight", (10, 64), 64)
    b = vector("fc2.bias", np.zeros(10))
    nodes.append(helper.make_node("Gemm", ["fc1_relu", w, b], ["logits"], name="fc2", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax",
                                  axis=1))
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        inits)
    model = helper.make_model(graph, producer_name="tunesearch",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MODELS = {"tiny_cnn": tiny_cnn}


def main() -> int:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        path = EXAMPLES / f"{name}.onnx"
        onnx.save(build(), str(path))
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
