"""Malformed .npz inputs, --input-shape arguments and settings through `tunesearch run`: arrays
of any name, dtype and shape, archives cut short or with bytes flipped, shapes of any text (given
twice too), and every setting with values in and out of its range. Each must be refused in one
line (exit 2) or run (exit 0), and change no file but the outputs asked for."""
from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, strategies as st
from onnx import helper

from tests.fuzz.contract import fuzz_settings, run_cli

pytestmark = pytest.mark.filterwarnings("ignore:The recursion limit")

DTYPES = ["float32", "float64", "float16", "int64", "int32", "uint8", "bool", "complex64",
          "U3", "S2", "V4", "O"]


def _model(folder: Path) -> Path:
    """y = relu(x) for x of shape 2x8."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2, 8])],
                              [helper.make_tensor_value_info("y", 1, None)])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


@st.composite
def archives(draw) -> bytes:
    """An .npz archive of drawn arrays (the right one among them, or not), maybe damaged."""
    arrays = {}
    for name in draw(st.lists(st.sampled_from(["x", "y", "X", "x.npy", "arr_0"]), max_size=3,
                              unique=True)):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 9), max_size=3)))
        if draw(st.booleans()):
            dtype, shape = "float32", (2, 8)
        arrays[name] = np.zeros(shape, dtype=dtype)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
    if damage == "truncate" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "flip" and data:
        flipped = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            flipped[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        data = bytes(flipped)
    return data


@fuzz_settings(examples=80)
@given(archive=archives(), outputs=st.booleans())
def test_malformed_inputs_are_refused_in_one_line_or_run(archive, outputs):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = _model(folder)
        (folder / "inputs.npz").write_bytes(archive)
        argv = ["run", str(model), "--inputs", str(folder / "inputs.npz"), "--repeat", "1"]
        if outputs:
            argv += ["--outputs", str(folder / "out.npz")]
        run_cli(argv, folder, env={"TUNESEARCH_NODB": "1"}, may_change=("out.npz",)).check()


# environment text: no NUL and no lone surrogate, which no environment can hold
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=8)
VALUES = st.one_of(st.sampled_from(["0", "1", "2", "4", "5", "-1", "-5", " 3 ", "1e3", "0x10",
                                    "openmp", "", "cpu", "reference", "tpu", "avx2", "native",
                                    str(2 ** 30), str(2 ** 31), str(2 ** 63)]),
                   st.integers(-2 ** 70, 2 ** 70).map(str), TEXT)
SETTINGS = ["DEBUG", "GRAPH", "TUNESEARCH_NODB", "TUNESEARCH_TUNE", "TUNESEARCH_REWRITE",
            "TUNESEARCH_THREADS", "TUNESEARCH_OMP_SPIN", "TUNESEARCH_DEVICE"]


@fuzz_settings(examples=60)
@given(values=st.dictionaries(st.sampled_from(SETTINGS), VALUES, min_size=1, max_size=3))
def test_settings_out_of_range_are_refused_in_one_line(values):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = _model(folder)
        env = {"TUNESEARCH_NODB": "1", **values}
        graph = ("tunesearch_graph.dot", "tunesearch_graph.svg", "tunesearch_graph.png")
        run_cli(["run", str(model), "--repeat", "1"], folder, env=env, may_change=graph).check()


def _dynamic_model(folder: Path) -> Path:
    """y = relu(x) for x of shape Nx4, N given by --input-shape."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, ["n", 4])],
                              [helper.make_tensor_value_info("y", 1, None)])
    path = folder / "dynamic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


# dims either small (a run stays quick) or past what kernels index (refused before any work)
DIM_TEXT = st.one_of(st.integers(-2, 16), st.integers(2 ** 31, 2 ** 70)).map(str) | \
    st.sampled_from(["", "-0", "0x10", "1e3", " 2", "N", "٣"])
SHAPES = st.builds(lambda name, dims, sep: f"{name}={sep.join(dims)}",
                   st.sampled_from(["x", "y", "", "x=x"]), st.lists(DIM_TEXT, max_size=3),
                   st.sampled_from(["x", "X", ","]))


@fuzz_settings(examples=50)
@given(shapes=st.lists(SHAPES, min_size=1, max_size=2))
def test_input_shapes_are_refused_in_one_line_or_run(shapes):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        argv = ["run", str(_dynamic_model(folder)), "--repeat", "1"]
        for shape in shapes:
            argv += ["--input-shape", shape]
        run_cli(argv, folder, env={"TUNESEARCH_NODB": "1"}).check()
