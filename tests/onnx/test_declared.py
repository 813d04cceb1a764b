"""A model is checked against what it declares when it is loaded: each disagreement is an
InvalidModelError (or ExternalDataError) of one line, before any work; models ONNX allows still
load and agree with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox


def _model(nodes, initializers=(), opsets=(("", 17),), outputs=("y",), inputs=(("x", [8]),),
           ir_version=8):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=list(initializers))
    return helper.make_model(graph, ir_version=ir_version,
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


ADD = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
RELU = [helper.make_node("Relu", ["x"], ["y"], name="relu")]


def _weight(**changes) -> TensorProto:
    tensor = numpy_helper.from_array(np.arange(8, dtype=np.float32), "w")
    for key, value in changes.items():
        if key == "dims":
            del tensor.dims[:]
            tensor.dims.extend(value)
        else:
            setattr(tensor, key, value)
    return tensor


def _refused(proto, *words, error=tox.InvalidModelError):
    with pytest.raises(error) as caught:
        tox.load(proto, device="reference")
    text = str(caught.value)
    assert "\n" not in text
    for word in words:
        assert word in text, (word, text)


def test_raw_data_shorter_or_longer_than_the_shape():
    raw = np.arange(8, dtype=np.float32).tobytes()
    _refused(_model(ADD, [_weight(raw_data=raw[:12])]), "'w'", "12 bytes", "32")
    _refused(_model(ADD, [_weight(raw_data=raw + b"\0" * 8)]), "'w'", "40 bytes", "32")
    _refused(_model(ADD, [_weight(raw_data=raw[:13])]), "'w'", "13 bytes")
    twice = _weight()
    twice.float_data.extend(range(8))
    _refused(_model(ADD, [twice]), "'w'", "raw_data and float_data")


def test_typed_data_of_another_count_and_a_tensor_without_data():
    short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8], float_data=[1.0] * 3)
    long = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8], float_data=[1.0] * 9)
    _refused(_model(ADD, [short]), "'w'", "3 values in float_data", "8")
    _refused(_model(ADD, [long]), "'w'", "9 values")
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10 ** 6, 10 ** 6])
    _refused(_model(ADD, [huge]), "'w'", "1000000x1000000", "no data")


def test_unknown_data_type_and_negative_dims():
    _refused(_model(ADD, [_weight(data_type=999)]), "'w'", "999")
    _refused(_model(ADD, [_weight(data_type=0)]), "'w'")
    _refused(_model(ADD, [_weight(data_type=TensorProto.STRING)]), "'w'", "string_data")
    _refused(_model(ADD, [_weight(dims=[-8])]), "'w'", "negative")


def test_a_constant_node_tensor_is_checked_too():
    value = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[8], float_data=[1.0] * 2)
    nodes = [helper.make_node("Constant", [], ["c"], value=value),
             helper.make_node("Add", ["x", "c"], ["y"])]
    _refused(_model(nodes), "'c'", "2 values")


def test_an_output_that_nothing_produces():
    _refused(_model(RELU, outputs=("y", "z")), "'z'", "produced by no node")


def test_two_nodes_writing_one_value_or_a_node_writing_an_input():
    nodes = RELU + [helper.make_node("Neg", ["x"], ["y"], name="neg")]
    _refused(_model(nodes), "'relu'", "'neg'", "'y'")
    _refused(_model([helper.make_node("Relu", ["x"], ["x"], name="self")], outputs=("x",)),
             "'self'", "'x'")
    _refused(_model(RELU, inputs=(("x", [8]), ("x", [8]))), "input 'x' twice")
    _refused(_model(ADD, [_weight(), _weight()]), "initializer 'w' twice")


@pytest.mark.parametrize("version", [0, -1, onnx.defs.onnx_opset_version() + 1, 999])
def test_opsets_no_release_defines(version):
    _refused(_model(RELU, opsets=(("", version),)), f"opset {version}",
             f"1 to {onnx.defs.onnx_opset_version()}")


def test_no_default_opset_two_of_them_or_an_ir_version_past_this_onnx():
    _refused(_model(RELU, opsets=()), "no opset of the default domain")
    _refused(_model(RELU, opsets=(("", 17), ("ai.onnx", 13))), "more than once")
    _refused(_model(RELU, ir_version=onnx.IR_VERSION + 1), f"IR version {onnx.IR_VERSION + 1}")


def test_external_data_shorter_than_the_tensor(tmp_path):
    """The file holds the range the model names, and the range is shorter than the tensor."""
    (tmp_path / "w.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8],
                         data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(_model(ADD, [weight]), tmp_path / "m.onnx")
    _refused(tmp_path / "m.onnx", "'w'", "16 bytes", "32")


@pytest.mark.parametrize("case", ["opset 1", "latest opset", "output is the input",
                                  "optional output left out", "empty initializer"])
def test_models_onnx_allows_still_load_and_match_onnxruntime(case):
    import onnxruntime
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    latest = min(onnx.defs.onnx_opset_version(), 21)  # onnxruntime's newest may lag onnx's
    proto = {
        "opset 1": lambda: _model(RELU, opsets=(("", 1),), ir_version=3),
        "latest opset": lambda: _model(RELU, opsets=(("", latest),)),
        "output is the input": lambda: _model(RELU, outputs=("y", "x")),
        "optional output left out": lambda: _model(
            [helper.make_node("Dropout", ["x"], ["y", ""])]),
        "empty initializer": lambda: _model(
            [helper.make_node("Concat", ["x", "e"], ["y"], axis=0)],
            [TensorProto(name="e", data_type=TensorProto.FLOAT, dims=[0])]),
    }[case]()
    got = tox.load(proto, device="reference")(x)
    if case == "opset 1":  # onnxruntime runs nothing before opset 7: numpy is the reference
        np.testing.assert_array_equal(got["y"], np.maximum(x, 0))
        return
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for name, value in zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})):
        np.testing.assert_allclose(got[name], value, rtol=1e-6)


@pytest.mark.parametrize("kernel, group", [(1, 1), (2, 1), (1, 3), (2, 3)])
def test_a_convolution_with_no_output_channels_runs_to_an_empty_output(kernel, group):
    """Zero-size is valid ONNX: the CPU's default config is never asked for an empty kernel
    (its cost model divided by the empty axis), and an empty view reshapes to any shape."""
    import onnxruntime
    weight = numpy_helper.from_array(np.ones((0, 3 // group, kernel, kernel), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=group)
    graph = helper.make_graph([conv], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[weight])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.ones((2, 3, 4, 5), np.float32)
    got = tox.load(proto, device="cpu")(x)["y"]
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    [want] = session.run(None, {"x": x})
    assert got.shape == want.shape == (2, 0, 5 - kernel, 6 - kernel) and got.dtype == want.dtype
