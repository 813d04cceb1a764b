"""The architectures shipped in the onnx package, as real workloads with seeded random weights.

    >>> from tunesearch.examples import zoo
    >>> model = zoo.light_model("resnet50")   # an onnx.ModelProto for tunesearch.onnx.load

onnx/backend/test/data/light holds ResNet50, SqueezeNet, VGG19, DenseNet121, Inception v1/v2,
ShuffleNet, AlexNet and ZFNet512 with their weights left out of the file: each weight is a
ConstantOfShape node that fills it with 0.02. `with_random_weights` turns those into seeded random
initializers scaled like a real network's (He-scaled kernels, batch-norm statistics near 1 and 0),
so that every channel computes something different and a wrong index shows in a comparison.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# cheapest first: unique kernels to compile, then run time
LIGHT_MODELS = ["bvlc_alexnet", "zfnet512", "squeezenet", "vgg19", "shufflenet", "resnet50",
                "inception_v2", "inception_v1", "densenet121"]


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The named architecture (see LIGHT_MODELS) with seeded random weights and its logits (the
    input of the final Softmax) as a second output."""
    if name not in LIGHT_MODELS:
        raise KeyError(f"no shipped architecture {name!r}; known: {', '.join(LIGHT_MODELS)}")
    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    return expose_logits(with_random_weights(model, seed))


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    out: dict[str, list] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def _role(name: str, consumers) -> tuple[str, int, onnx.NodeProto | None]:
    """What a weight is for: (consumer op, input index, node), seen through Unsqueeze/Reshape."""
    for node, index in consumers.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape", "Identity") and index == 0:
            return _role(node.output[0], consumers)
        return node.op_type, index, node
    return "", -1, None


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Each ConstantOfShape of a known shape becomes a random initializer of that shape."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph, rng = model.graph, np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers = _consumers(graph)
    keep, added = [], []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            keep.append(node)
            continue
        shape = tuple(int(s) for s in shapes[node.input[0]])
        op, index, user = _role(node.output[0], consumers)
        noise = rng.standard_normal(shape)
        if op in ("Conv", "Gemm") and index == 1:
            trans_b = any(a.name == "transB" and a.i for a in user.attribute) if user else True
            fan_in = math.prod(shape[1:]) if op == "Conv" or trans_b else shape[0]
            value = noise * math.sqrt(2.0 / fan_in)
        elif op == "BatchNormalization" and index == 4:
            value = rng.uniform(0.5, 1.5, shape)
        elif (op == "BatchNormalization" and index == 1) or op == "Mul":
            value = 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        added.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(added)
    used = {name for n in graph.node for name in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [v for v in graph.input if v.name in used or v.name not in shapes]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


def expose_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """Add the input of a final Softmax as an output: logits compare more sharply than
    probabilities, which sit near 1/1000 each for a network with random weights."""
    outputs = {v.name for v in model.graph.output}
    for node in model.graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs:
            model.graph.output.append(helper.make_tensor_value_info(
                node.input[0], TensorProto.FLOAT, None))
    return model
