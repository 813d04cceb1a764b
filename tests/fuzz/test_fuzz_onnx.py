"""Malformed ONNX models through `tunesearch run`: valid models cut short, with bytes flipped, or
with a field changed (tensor dims, data and types, opsets, IR version, names, operators, input
shapes). Each must be refused in one line (exit 2) or run (exit 0), and change no file."""
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


def _base(kind: int) -> onnx.ModelProto:
    """A valid model: x + w, then relu (raw data); or relu(x @ w) (typed data)."""
    if kind == 0:
        weight = numpy_helper.from_array(np.arange(8, dtype=np.float32), "w")
        nodes = [helper.make_node("Add", ["x", "w"], ["s"], name="add"),
                 helper.make_node("Relu", ["s"], ["y"], name="relu")]
    else:
        weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 4],
                                    np.linspace(-1, 1, 32).tolist())
        nodes = [helper.make_node("MatMul", ["x", "w"], ["s"], name="matmul"),
                 helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 8])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# dims either small (a run stays quick) or past what can exist (refused before any work)
DIMS = st.lists(st.one_of(st.integers(-3, 16), st.integers(2 ** 31, 2 ** 62)), max_size=3)
OPS = st.sampled_from(["Relu", "Add", "MatMul", "Softmax", "Conv", "Reshape", "NonZero",
                       "Bogus", ""])
NAMES = st.sampled_from(["x", "w", "s", "y", "", "z"])


def _mutate(model: onnx.ModelProto, data) -> bytes:
    """One structural change, drawn, or a change of the serialized bytes."""
    graph = model.graph
    weight = graph.initializer[0]
    change = data.draw(st.sampled_from([
        "dims", "raw", "data_type", "opset", "no_opset", "ir", "node_output", "graph_output",
        "op_type", "node_input", "input_dims", "truncate", "flip"]))
    if change == "dims":
        del weight.dims[:]
        weight.dims.extend(data.draw(DIMS))
    elif change == "raw":
        raw = weight.raw_data or np.asarray(weight.float_data, np.float32).tobytes()
        weight.ClearField("float_data")
        cut = data.draw(st.integers(-len(raw), 16))
        weight.raw_data = raw[:cut] if cut < 0 else raw + bytes(cut)
    elif change == "data_type":
        weight.data_type = data.draw(st.one_of(st.integers(-1, 30), st.just(999)))
    elif change == "opset":
        model.opset_import[0].version = data.draw(st.one_of(st.integers(-3, 40), st.just(999)))
        if data.draw(st.booleans()):
            model.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    elif change == "no_opset":
        del model.opset_import[:]
    elif change == "ir":
        model.ir_version = data.draw(st.integers(-1, 20))
    elif change == "node_output":
        graph.node[data.draw(st.integers(0, 1))].output[0] = data.draw(NAMES)
    elif change == "graph_output":
        name = data.draw(NAMES)
        graph.output.append(helper.make_tensor_value_info(name, 1, None))
    elif change == "op_type":
        graph.node[data.draw(st.integers(0, 1))].op_type = data.draw(OPS)
    elif change == "node_input":
        node = graph.node[data.draw(st.integers(0, 1))]
        node.input[data.draw(st.integers(0, len(node.input) - 1))] = data.draw(NAMES)
    elif change == "input_dims":
        shape = graph.input[0].type.tensor_type.shape
        del shape.dim[:]
        for d in data.draw(DIMS):
            shape.dim.add().dim_value = d
    serialized = model.SerializeToString()
    if change == "truncate":
        return serialized[:data.draw(st.integers(0, len(serialized) - 1))]
    if change == "flip":
        flipped = bytearray(serialized)
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(flipped) - 1))
            flipped[at] ^= data.draw(st.integers(1, 255))
        return bytes(flipped)
    return serialized


@fuzz_settings(examples=150)
@given(kind=st.integers(0, 1), data=st.data())
def test_malformed_models_are_refused_in_one_line_or_run(kind, data):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = folder / "model.onnx"
        model.write_bytes(_mutate(_base(kind), data))
        run_cli(["run", str(model), "--repeat", "1"], folder,
                env={"TUNESEARCH_NODB": "1"}).check()


@fuzz_settings(examples=30)
@given(data=st.data())
def test_external_data_of_any_range_is_refused_in_one_line_or_loaded(data):
    """A weight kept in a file beside the model, with its offset and length drawn."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "w.bin").write_bytes(bytes(data.draw(st.integers(0, 64))))
        model = _base(0)
        weight = model.graph.initializer[0]
        weight.ClearField("raw_data")
        weight.data_location = TensorProto.EXTERNAL
        fields = {"location": data.draw(st.sampled_from(["w.bin", "../w.bin", "none.bin", ""])),
                  "offset": str(data.draw(st.integers(-4, 64))),
                  "length": data.draw(st.one_of(st.just(""), st.integers(-4, 96).map(str)))}
        for key, value in fields.items():
            entry = weight.external_data.add()
            entry.key, entry.value = key, value
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        run_cli(["run", str(folder / "model.onnx"), "--repeat", "1"], folder,
                env={"TUNESEARCH_NODB": "1"}).check()
