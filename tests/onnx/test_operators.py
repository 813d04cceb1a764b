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


@pytest.mark.parametrize("size", [5, 13])
def test_a_fire_module_writes_its_concatenation_in_place(size):
    """squeezenet's fire module: two convolutions with bias and ReLU, concatenated. Each is one
    kernel that writes its half of the output with its epilogue: no kernel of its own for
    the concatenation, none for either epilogue (on 5x5 the 3x3 one puts its 40 channels on
    the vector lanes and writes its half transposed)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 8, size, size)).astype(np.float32)
    w1, w3 = (rng.standard_normal(s).astype(np.float32) for s in ((6, 8, 1, 1), (40, 8, 3, 3)))
    b1, b3 = (rng.standard_normal(n).astype(np.float32) for n in (6, 40))
    inits = [numpy_helper.from_array(v, n) for v, n in
             zip((w1, b1, w3, b3), ("w1", "b1", "w3", "b3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Concat", ["r1", "r3"], ["y"], axis=1)]
    proto = _model(nodes, [_value("x", [1, 8, size, size])], [_value("y", None)], inits)
    model = tox.load(proto, device="reference")
    items = model.schedule()
    # the padded input, its im2col copy, and the two convolutions, each with its epilogue
    assert len(items) == 4 and _reduces(model) == 2
    assert [item.kernel.out_view.offset for item in items if item.piece] == [0, 6 * size * size]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c3 = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + size, j:j + size], w3[:, :, i, j])
             for i in range(3) for j in range(3))
    c1 = np.einsum("nchw,oc->nohw", x, w1[:, :, 0, 0])
    expect = np.concatenate([np.maximum(c1 + b1.reshape(1, 6, 1, 1), 0),
                             np.maximum(c3 + b3.reshape(1, 40, 1, 1), 0)], axis=1)
    np.testing.assert_allclose(model(x)["y"], expect, rtol=1e-4, atol=1e-4)


def _activation(kind: str, x: str, out: str) -> list:
    """An activation as the exporters write it, around its input x."""
    if kind == "silu":
        return [helper.make_node("Sigmoid", [x], ["sig"]),
                helper.make_node("Mul", [x, "sig"], [out])]
    if kind == "gelu_erf":
        return [helper.make_node("Div", [x, "sqrt2"], ["scaled"]),
                helper.make_node("Erf", ["scaled"], ["erf"]),
                helper.make_node("Add", ["erf", "one"], ["shifted"]),
                helper.make_node("Mul", [x, "shifted"], ["half2"]),
                helper.make_node("Mul", ["half2", "half"], [out])]
    # GELU's Tanh form, GPT-2's: x reaches the end through three paths
    return [helper.make_node("Pow", [x, "three"], ["cube"]),
            helper.make_node("Mul", ["cube", "k"], ["kc"]),
            helper.make_node("Add", [x, "kc"], ["inner"]),
            helper.make_node("Mul", ["inner", "tanh_scale"], ["arg"]),
            helper.make_node("Tanh", ["arg"], ["t"]),
            helper.make_node("Add", ["t", "one"], ["t1"]),
            helper.make_node("Mul", [x, "half"], ["hx"]),
            helper.make_node("Mul", ["hx", "t1"], [out])]


ACTIVATION_CONSTANTS = {"sqrt2": 1.4142135, "one": 1.0, "half": 0.5, "three": 3.0,
                        "k": 0.044715, "tanh_scale": 0.7978846}


def _onnxruntime(proto, feeds):
    import onnxruntime as ort
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _constants():
    return [numpy_helper.from_array(np.array(v, np.float32), n)
            for n, v in ACTIVATION_CONSTANTS.items()]


@pytest.mark.parametrize("kind", ["silu", "gelu_erf", "gelu_tanh"])
def test_an_activation_around_its_input_is_the_matmuls_epilogue(kind):
    """x read by several elementwise nodes that meet again (a transformer's GELU): x is not
    written and read back, the matrix product computes it with the activation in its epilogue,
    one kernel."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 64)).astype(np.float32) * 0.2
    b = rng.standard_normal(64).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")] + _constants()
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"])] + _activation(kind, "h", "y")
    proto = _model(nodes, [_value("x", [16, 32])], [_value("y", None)], inits)
    model = tox.load(proto, device="cpu")
    assert len(model.schedule()) == 1
    x = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(model(x)["y"], _onnxruntime(proto, {"x": x}), rtol=1e-4,
                               atol=1e-5)


def test_silu_before_a_padded_depthwise_convolution_computes_the_convolution_once():
    """The pad of the depthwise convolution's input would stop at the Sigmoid (not zero at 0):
    the convolution's x * sigmoid(x) is realized whole, in the convolution's kernel, rather
    than the convolution computed once for x and again inside the sigmoid's kernel."""
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["conv"])] + _activation("silu", "conv", "a") \
        + [helper.make_node("Conv", ["a", "w2"], ["y"], group=16, pads=[1, 1, 1, 1])]
    proto = _model(nodes, [_value("x", [1, 8, 12, 12])], [_value("y", None)], inits)
    model = tox.load(proto, device="cpu")
    assert _reduces(model) == 2
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(model(x)["y"], _onnxruntime(proto, {"x": x}), rtol=1e-4,
                               atol=1e-4)


def test_a_value_read_by_two_consumers_that_do_not_meet_is_written_once():
    """x feeds an activation and, apart from it, a second convolution: x is realized (its
    convolution computed once), not recomputed inside each reader."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Conv", ["c", "w2"], ["d"]),
             helper.make_node("Add", ["s", "d"], ["y"])]
    proto = _model(nodes, [_value("x", [1, 8, 6, 6])], [_value("y", None)], inits)
    model = tox.load(proto, device="reference")
    assert _reduces(model) == 2


@pytest.mark.parametrize("mode,transform", [("linear", "half_pixel"),
                                            ("linear", "align_corners"),
                                            ("cubic", "pytorch_half_pixel")])
def test_resize_linear_and_cubic_as_pytorch_upsamples_match_onnxruntime(mode, transform):
    """F.interpolate(scale_factor=2, mode="bilinear"/"bicubic") as exported, on the CPU device:
    a weight matrix per axis, the same values as onnxruntime's filter."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 10, 14)).astype(np.float32)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform)
    proto = _model([node], [_value("x", [1, 3, 10, 14])], [_value("y", None)], [scales],
                   opset=18)
    got = tox.load(proto, device="cpu")(x)["y"]
    np.testing.assert_allclose(got, _onnxruntime(proto, {"x": x}), rtol=1e-5, atol=1e-5)
