"""Bad input: each raises its own OnnxImportError subclass, one line that says what is wrong."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tunesearch.onnx as tox


def _model(nodes, inputs, outputs, opset: int = 17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _one_line(exc: Exception) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


def test_missing_file(tmp_path):
    with pytest.raises(tox.ModelNotFoundError) as err:
        tox.load(tmp_path / "nope.onnx")
    assert "nope.onnx" in _one_line(err.value)


@pytest.mark.parametrize("content", [b"this is a text file, not a model\n", bytes(range(256)),
                                     b""])
def test_not_onnx(tmp_path, content):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(tox.NotOnnxError) as err:
        tox.load(path)
    assert "not an ONNX model" in _one_line(err.value)


def test_every_unsupported_operator_is_listed_with_its_node():
    nodes = [helper.make_node("NonZero", ["x"], ["a"], name="first"),
             helper.make_node("Relu", ["x"], ["b"], name="fine"),
             helper.make_node("NonZero", ["b"], ["c"], name="second"),
             helper.make_node("MaxPool", ["x"], ["d", "where"], name="pooled", kernel_shape=[1]),
             helper.make_node("FusedThing", ["x"], ["e"], name="custom", domain="com.example")]
    proto = _model(nodes, [_float("x", [1, 2]), _float("scales", [2])],
                   [_float(n, None) for n in "abcde"])
    with pytest.raises(tox.UnsupportedOperatorError) as err:
        tox.load(proto, device="reference")
    text = _one_line(err.value)
    for piece in ("NonZero", "'first'", "'second'", "Indices output", "'pooled'",
                  "com.example.FusedThing", "'custom'"):
        assert piece in text
    assert "'fine'" not in text


def test_dynamic_dimension_needs_a_shape():
    proto = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", ["batch", 3])],
                   [_float("y", ["batch", 3])])
    with pytest.raises(tox.UnboundDimensionError) as err:
        tox.load(proto, device="reference")
    text = _one_line(err.value)
    assert "'x'" in text and "dimension 0" in text and "'batch'" in text
    model = tox.load(proto, input_shapes={"x": (4, 3)}, device="reference")
    assert model.inputs[0].shape == (4, 3) and model.outputs[0].shape == (4, 3)
    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(model(x)["y"], np.maximum(x, 0))


def test_bad_shape_bindings():
    proto = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", ["batch", 3])],
                   [_float("y", ["batch", 3])])
    with pytest.raises(tox.OnnxImportError, match="dim 1 is 3"):
        tox.load(proto, input_shapes={"x": (4, 5)}, device="reference")
    with pytest.raises(tox.OnnxImportError, match="'nope'"):
        tox.load(proto, input_shapes={"nope": (1, 3)}, device="reference")


def test_unsupported_input_type():
    proto = _model([helper.make_node("Identity", ["s"], ["t"])],
                   [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                   [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    with pytest.raises(tox.UnsupportedTypeError) as err:
        tox.load(proto, device="reference")
    assert "'s'" in _one_line(err.value) and "STRING" in str(err.value)


def test_every_error_is_an_onnx_import_error():
    for cls in (tox.ModelNotFoundError, tox.NotOnnxError, tox.UnsupportedOperatorError,
                tox.UnboundDimensionError, tox.UnsupportedTypeError):
        assert issubclass(cls, tox.OnnxImportError)


def test_calls_with_wrong_inputs():
    proto = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [2, 3])],
                   [_float("y", [2, 3])])
    model = tox.load(proto, device="reference")
    with pytest.raises(ValueError, match="shape"):
        model(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="missing"):
        model({})


@pytest.mark.parametrize("op, attributes, words", [
    ("MaxPool", {"kernel_shape": [-1]}, ("kernel [-1]", "2 spatial dims")),
    ("MaxPool", {"kernel_shape": [2]}, ("kernel [2]",)),
    ("AveragePool", {"kernel_shape": [2, 0]}, ("kernel [2, 0]",)),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [1, 0]}, ("strides [1, 0]",)),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [1]}, ("dilations [1]",)),
])
def test_pool_geometry_out_of_range(op, attributes, words):
    """A window that is empty, negative or of another rank than the input: one line at load,
    never a kernel of a negative size for the compiler."""
    node = helper.make_node(op, ["x"], ["y"], **attributes)
    proto = _model([node], [_float("x", [2, 3, 4, 5])], [_float("y", None)], opset=18)
    with pytest.raises(tox.OnnxImportError) as err:
        tox.load(proto, device="cpu")
    text = _one_line(err.value)
    assert all(word in text for word in words), text


def test_an_element_type_no_onnx_release_defines():
    proto = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [2])],
                   [helper.make_tensor_value_info("y", 999, None)])
    with pytest.raises(tox.UnsupportedTypeError) as err:
        tox.load(proto, device="reference")
    assert "'y'" in _one_line(err.value) and "999" in str(err.value)


def test_a_node_naming_more_outputs_than_its_operator_makes():
    """Split into one part (split=[5]) while the node names two outputs."""
    split = helper.make_node("Split", ["x", "s"], ["y", "z"], axis=-1, name="cut")
    graph = helper.make_graph([split], "g", [_float("x", [2, 5])],
                              [_float("y", None), _float("z", None)],
                              initializer=[helper.make_tensor("s", TensorProto.INT64, [1], [5])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(tox.OnnxImportError) as err:
        tox.load(proto, device="reference")
    assert "'cut'" in _one_line(err.value) and "1 output" in str(err.value)
