"""The operators PyTorch's exporters emit for transformers (GatherElements, GatherND, CumSum,
Trilu, IsNaN, IsInf, Mod, Sign), each with its indices known at import and computed from the
model's inputs, against onnxruntime on the CPU device."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox


def _check(nodes, inputs: dict, known: dict = (), out_type=TensorProto.FLOAT, opset: int = 18):
    """Run the graph through tunesearch's CPU device and onnxruntime on the same inputs."""
    known = dict(known)
    values = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for name, a in inputs.items()]
    graph = helper.make_graph(nodes, "g", values,
                              [helper.make_tensor_value_info("y", out_type, None)],
                              [numpy_helper.from_array(a, n) for n, a in known.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    want = ort.InferenceSession(proto.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    got = tox.load(proto, device="cpu")(inputs)["y"]
    assert got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


RNG = np.random.default_rng(0)
DATA = RNG.standard_normal((3, 5, 4)).astype(np.float32)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("known", [True, False], ids=["known", "computed"])
def test_gather_elements(axis, known):
    shape = list(DATA.shape)
    shape[axis] = 2  # fewer positions than the axis has
    idx = RNG.integers(-DATA.shape[axis], DATA.shape[axis], shape).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    if known:
        _check([node], {"x": DATA}, {"i": idx})
    else:
        _check([node], {"x": DATA, "i": idx})


@pytest.mark.parametrize("batch_dims", [0, 1])
@pytest.mark.parametrize("known", [True, False], ids=["known", "computed"])
def test_gather_nd(batch_dims, known):
    depth = 2 if batch_dims == 0 else 1
    lead = DATA.shape[batch_dims:batch_dims + depth]
    idx = np.stack([RNG.integers(-n, n, (3, 2)) for n in lead], -1).astype(np.int64)
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    if known:
        _check([node], {"x": DATA}, {"i": idx})
    else:
        _check([node], {"x": DATA, "i": idx})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumsum(exclusive, reverse, dtype):
    x = (DATA * 10).astype(dtype)
    node = helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)
    out = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    _check([node], {"x": x}, {"a": np.array(1, np.int64)}, out)


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu(upper, k):
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    _check([node], {"x": DATA}, {"k": np.array(k, np.int64)})


def test_a_causal_mask_from_the_sequence_length():
    """GPT-style: a lower-triangular mask built from the input's shape, applied with Where."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Concat", ["s", "s"], ["ss"], axis=0),
             helper.make_node("ConstantOfShape", ["ss"], ["ones"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
             helper.make_node("Cast", ["tri"], ["keep"], to=TensorProto.BOOL),
             helper.make_node("Where", ["keep", "x", "low"], ["y"])]
    _check(nodes, {"x": DATA[:, :4, :]}, {"low": np.array(-1e9, np.float32)})


def test_isnan_isinf_sign_mod():
    x = np.array([[1.5, -2.0, np.nan, np.inf], [-np.inf, 0.0, 7.25, -3.5]], np.float32)
    _check([helper.make_node("IsNaN", ["x"], ["y"])], {"x": x}, out_type=TensorProto.BOOL)
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        _check([helper.make_node("IsInf", ["x"], ["y"], detect_positive=pos,
                                 detect_negative=neg)], {"x": x}, out_type=TensorProto.BOOL)
    _check([helper.make_node("Sign", ["x"], ["y"])], {"x": np.nan_to_num(x)})
    a = np.array([7, -7, 7, -7, 5], np.int64)
    b = np.array([3, 3, -3, -3, 5], np.int64)
    for fmod in (0, 1):
        _check([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b},
               out_type=TensorProto.INT64)
    _check([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)],
           {"a": a.astype(np.float32) + 0.5, "b": b.astype(np.float32)})


def test_an_index_out_of_range_is_one_line():
    graph = helper.make_graph([helper.make_node("GatherElements", ["x", "i"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([[5]], np.int64), "i")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(tox.OnnxImportError, match="out of range"):
        tox.load(proto, device="reference")


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_of_computed_ids_over_a_large_vocabulary(axis):
    """An embedding as BERT's exports write it: token ids from the input (int64, some counted
    from the end) into a table of 30,522 rows, the position embedding added; the table
    read one row per token (one-hot, this ran over every word)."""
    words, hidden = 30522, 32
    table = RNG.standard_normal((words, hidden) if axis == 0 else (hidden, words)) \
        .astype(np.float32)
    ids = RNG.integers(-words, words, (2, 40)).astype(np.int64)
    pos = RNG.standard_normal((40, hidden) if axis == 0 else (hidden, 2, 40)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["w", "ids"], ["e"], axis=axis),
             helper.make_node("Add", ["e", "p"], ["y"])]
    _check(nodes, {"ids": ids}, {"w": table, "p": pos})
