"""Operators with attributes and constant operands drawn in and out of their ranges (axes, perms,
shapes, indices, pads, kernel sizes, strides, groups), through `tunesearch run`. Each model must
be refused in one line (exit 2) or run (exit 0), and change no file."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz.contract import fuzz_settings, run_cli

pytestmark = pytest.mark.filterwarnings("ignore:The recursion limit")

SHAPE = [2, 3, 4, 5]
AXIS = st.integers(-6, 6)
SMALL = st.integers(-3, 8)
INTS = st.lists(SMALL, max_size=5)


def _node(op: str, inputs: list[str], outputs: list[str], **attributes) -> onnx.NodeProto:
    """A node whose list attributes are ints even where the list drawn is empty."""
    node = helper.make_node(op, inputs, outputs)
    for key, value in attributes.items():
        kind = onnx.AttributeProto.INTS if isinstance(value, list) else None
        node.attribute.append(helper.make_attribute(key, value, attr_type=kind))
    return node


def _ints(name: str, values) -> TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64).reshape(-1), name)


@st.composite
def nodes(draw) -> tuple[list, list]:
    """One operator node reading x (2x3x4x5) and writing y, with its constants."""
    op = draw(st.sampled_from(["Transpose", "Softmax", "Concat", "Reshape", "Slice", "Gather",
                               "Pad", "Conv", "ReduceSum", "Split", "Expand", "Tile",
                               "Flatten", "Squeeze", "Unsqueeze", "MaxPool", "ArgMax"]))
    if op == "Transpose":
        return [_node(op, ["x"], ["y"], perm=draw(INTS))], []
    if op in ("Softmax", "Flatten", "ArgMax"):
        return [_node(op, ["x"], ["y"], axis=draw(AXIS))], []
    if op == "Concat":
        return [_node(op, ["x", "x"], ["y"], axis=draw(AXIS))], []
    if op in ("Reshape", "Expand", "Tile", "Squeeze", "Unsqueeze", "ReduceSum"):
        return [_node(op, ["x", "c"], ["y"])], [_ints("c", draw(INTS))]
    if op == "Slice":
        n = draw(st.integers(0, 4))
        consts = [_ints(name, draw(st.lists(st.integers(-8, 8), min_size=n, max_size=n)))
                  for name in ("starts", "ends", "axes", "steps")]
        return [_node(op, ["x", "starts", "ends", "axes", "steps"], ["y"])], consts
    if op == "Gather":
        indices = _ints("i", draw(st.lists(st.integers(-8, 8), max_size=4)))
        return [_node(op, ["x", "i"], ["y"], axis=draw(AXIS))], [indices]
    if op == "Pad":
        return [_node(op, ["x", "p"], ["y"], mode=draw(
            st.sampled_from(["constant", "reflect", "edge", "wrap", "bogus"])))], \
            [_ints("p", draw(st.lists(st.integers(-3, 6), max_size=8)))]
    if op == "Split":
        return [_node(op, ["x", "s"], ["y", "z"], axis=draw(AXIS))], \
            [_ints("s", draw(st.lists(st.integers(-1, 5), max_size=3)))]
    if op == "MaxPool":
        return [_node(op, ["x"], ["y"], kernel_shape=draw(st.lists(SMALL, max_size=3)),
                                 strides=draw(st.lists(SMALL, min_size=2, max_size=2)))], []
    out_channels, group = draw(st.integers(0, 4)), draw(st.integers(-1, 4))
    kernel = draw(st.lists(st.integers(0, 6), min_size=2, max_size=2))
    weight_shape = [out_channels, draw(st.integers(0, 4))] + kernel
    weight = numpy_helper.from_array(np.ones(weight_shape, np.float32), "w")
    return [_node("Conv", ["x", "w"], ["y"], group=group,
                             strides=draw(st.lists(SMALL, min_size=2, max_size=2)),
                             pads=draw(st.lists(SMALL, min_size=4, max_size=4)),
                             dilations=draw(st.lists(SMALL, min_size=2, max_size=2)))], [weight]


@fuzz_settings(examples=150)
@given(drawn=nodes())
def test_operator_settings_are_refused_in_one_line_or_run(drawn):
    node_list, constants = drawn
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
               for name in node_list[0].output]
    if node_list[0].op_type == "ArgMax":
        outputs = [helper.make_tensor_value_info("y", TensorProto.INT64, None)]
    graph = helper.make_graph(node_list, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              outputs, initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        onnx.save(model, folder / "model.onnx")
        run_cli(["run", str(folder / "model.onnx"), "--repeat", "1"], folder,
                env={"TUNESEARCH_NODB": "1"}).check()
